"""Walks, paths, context bundles, overviews and bounded slices of one tenant's graph.

Walks are breadth-first, one indexed query per level (store.traversal.expand), with the visited
set kept here: each node is expanded once, at its shortest distance, and a walk stops at its limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from app.auth.principal import Principal
from app.observability import metrics
from app.services import models
from app.services.base import Service
from app.services.budget import Budget, clip
from app.services.parts import SubgraphItem, WalkItem
from app.services.refs import resolve
from app.services.shapes import relation, summary
from app.store import entities, history, overview, relations, traversal
from app.store.database import Tx
from app.store.entities import EntityRow
from app.store.traversal import Step
from app.store.validity import NOW, When

UNCATEGORISED = None


@dataclass(slots=True)
class Reached:
    gid: str
    depth: int
    via: Step


def _sides(direction: str) -> tuple[bool, bool]:
    return direction in ("out", "both"), direction in ("in", "both")


@dataclass(frozen=True, slots=True)
class Bounds:
    """What one walk level may cost: edges read, and entities expanded."""

    level_edges: int = 5000
    frontier: int = 1000
    # A shortest-path level with more edges than this (a hub's) is put off while the other side's
    # next level is smaller: it may never be needed.
    probe_edges: int = 1000


async def _level(
    tx: Tx, frontier: list[str], out: bool, inc: bool, types: Sequence[str] | None, limit: int, when: When
) -> tuple[list[Step], bool]:
    """The edges of one level that hold as `when` sees them, at most `limit`; and whether there were more."""
    steps = await traversal.expand(tx, frontier, outgoing=out, incoming=inc, types=types, limit=limit + 1, when=when)
    return steps[:limit], len(steps) > limit


async def walk(
    tx: Tx,
    starts: Sequence[str],
    depth: int,
    direction: str,
    types: Sequence[str] | None,
    limit: int,
    bounds: Bounds,
    *,
    when: When = NOW,
) -> tuple[list[Reached], bool]:
    """Breadth-first from several vertices over the edges that hold as `when` sees them: each other
    node once, at its shortest distance, ≤ `limit` nodes; and whether `bounds` cut the walk (a level
    had more edges, or more nodes to expand)."""
    outgoing, incoming = _sides(direction)
    seen = set(starts)
    frontier = list(starts)
    reached: list[Reached] = []
    cut = False
    for level in range(1, depth + 1):
        if not frontier:
            break
        if len(frontier) > bounds.frontier:
            frontier, cut = frontier[: bounds.frontier], True
        # A level can hold far more edges than the walk still needs (a hub has thousands): read a
        # few times what is missing, and more (up to the bound) only when that did not bring enough.
        want = limit - len(reached)
        cap = min(4 * want + len(frontier), bounds.level_edges)
        steps, more = await _level(tx, frontier, outgoing, incoming, types, cap, when)
        if more and cap < bounds.level_edges and len({st.other for st in steps} - seen) < want:
            cap = bounds.level_edges
            steps, more = await _level(tx, frontier, outgoing, incoming, types, cap, when)
        cut = cut or (more and cap == bounds.level_edges)
        frontier = []
        for step in steps:
            if step.other in seen:
                continue
            seen.add(step.other)
            frontier.append(step.other)
            reached.append(Reached(step.other, level, step))
            if len(reached) >= limit:
                return reached, cut
    return reached, cut


async def shortest(
    tx: Tx,
    start: str,
    end: str,
    max_depth: int,
    direction: str,
    types: Sequence[str] | None,
    bounds: Bounds,
    *,
    joins: bool = False,
    when: When = NOW,
) -> tuple[list[Step] | None, bool]:
    """The steps of a shortest path from `start` to `end`, by bidirectional breadth-first search; and
    whether `bounds` cut the search (then a path, or a shorter one, may exist beyond what was read).

    Each round expands the frontier of the side with fewer nodes by one level. With `joins` (what
    `Graph.path` uses), each round first asks whether one edge joins the two frontiers, in the
    same statement as the level: the path is then complete without reading that level, which is
    usually the largest of the search. And a level found to hold more than `bounds.probe_edges`
    edges (a hub's) is put off while the other side's is smaller: only when both sides are that
    large is the one with fewer nodes read whole, and a side known to be large is not asked again
    until its frontier changes. Without `joins`, a plain search over `traversal.expand`. Either way
    the same path length.
    """
    if start == end:
        return [], False
    forward, backward = _sides(direction)
    # per side (0: from the start, 1: from the end): node -> (depth, the step that reached it)
    trees: tuple[dict[str, tuple[int, Step | None]], ...] = ({start: (0, None)}, {end: (0, None)})
    fronts, depths = [[start], [end]], [0, 0]
    large = [False, False]  # the side's frontier has more than `probe_edges` edges
    cut = False
    while fronts[0] and fronts[1] and depths[0] + depths[1] < max_depth:
        side = 0 if len(fronts[0]) <= len(fronts[1]) else 1
        if joins:
            found = await _join_round(tx, fronts, large, side, depths, max_depth, direction, types, bounds, when)
            if isinstance(found, Step):
                return [*_unwind(trees[0], found.node)[::-1], found, *_unwind(trees[1], found.other)], cut
            if found is None:
                break
            side, steps, more = found
        else:
            out, inc = (forward, backward) if side == 0 else (backward, forward)
            steps, more = await _level(tx, fronts[side], out, inc, types, bounds.level_edges, when)
        cut = cut or more
        level = depths[side] + 1
        next_front, meets = _grown(trees[side], trees[1 - side], level, steps)
        if meets:
            meet = min(meets, key=lambda n: trees[0][n][0] + trees[1][n][0])
            return _unwind(trees[0], meet)[::-1] + _unwind(trees[1], meet), cut
        if len(next_front) > bounds.frontier:
            next_front, cut = next_front[: bounds.frontier], True
        fronts[side], depths[side], large[side] = next_front, level, False
    return None, cut


def _grown(
    mine: dict[str, tuple[int, Step | None]], other: dict[str, tuple[int, Step | None]], level: int, steps: list[Step]
) -> tuple[list[str], list[str]]:
    """One side's tree grown by the steps of its next `level`: its new frontier, and the nodes
    where it now meets the other side's tree."""
    front, meets = [], []
    for step in steps:
        if step.other in mine:
            continue
        mine[step.other] = (level, step)
        front.append(step.other)
        if step.other in other:
            meets.append(step.other)
    return front, meets


async def _join_round(
    tx: Tx,
    fronts: list[list[str]],
    large: list[bool],
    side: int,
    depths: list[int],
    max_depth: int,
    direction: str,
    types: Sequence[str] | None,
    bounds: Bounds,
    when: When,
) -> Step | tuple[int, list[Step], bool] | None:
    """One round of `shortest` with `joins`: an edge joining the two frontiers (oriented from the
    start's side), or the side expanded with its level and whether the bound cut it, or None when no
    path within `max_depth` remains. `large` is kept up to date."""
    forward, backward = _sides(direction)
    # No node is on both sides yet, so no path is shorter than the two depths and one edge.
    last = depths[0] + depths[1] + 1 >= max_depth  # then only a joining edge can help
    if large[side] and not large[1 - side]:
        side = 1 - side
    while True:
        out, inc = (forward, backward) if side == 0 else (backward, forward)
        whole = last or large[side]  # no other side to turn to: read the level whole
        limit = 0 if last else (bounds.level_edges if whole else bounds.probe_edges) + 1
        joined, steps = await traversal.expand_or_join(
            tx, fronts[side], fronts[1 - side], outgoing=out, incoming=inc, types=types, limit=limit, when=when
        )
        if joined is not None:  # written from this side's node: the start's side comes first
            return joined if side == 0 else joined._replace(node=joined.other, other=joined.node)
        if last:
            return None
        if whole:
            return side, steps[: bounds.level_edges], len(steps) > bounds.level_edges
        if len(steps) <= bounds.probe_edges:
            return side, steps, False
        large[side] = True
        # The other side, unless it is large too: then the one with fewer nodes, whole.
        side = (0 if len(fronts[0]) <= len(fronts[1]) else 1) if large[1 - side] else 1 - side


def path_nodes(start: str, steps: Sequence[Step]) -> list[str]:
    """The nodes a path visits from `start`: a step was taken from whichever of its ends the search
    reached first, so each next node is the end the previous one is not."""
    order = [start]
    for step in steps:
        order.append(step.other if step.node == order[-1] else step.node)
    return order


def _unwind(tree: dict[str, tuple[int, Step | None]], node: str) -> list[Step]:
    """The steps from `node` back to the root of one search tree, nearest first."""
    steps = []
    while (step := tree[node][1]) is not None:
        steps.append(step)
        node = step.node
    return steps


class EntityWithObservations(BaseModel):
    entity: models.EntitySummary
    observations: list[str]
    observations_total: int


class Slice(BaseModel):
    """Entities with their observations and the relations the slice includes."""

    entities: list[EntityWithObservations]
    relations: list[models.Relation]
    total_entities: int | None = None
    next_cursor: str | None = None
    truncated: bool = False
    relations_more: bool = False  # a page's entities have more relations than it lists: next_cursor continues them


class Graph(Service):
    @property
    def _bounds(self) -> Bounds:
        return Bounds(self.limits.walk_level_edges, self.limits.walk_frontier)

    async def neighbors(
        self,
        who: Principal,
        ref: str,
        *,
        depth: int,
        direction: str,
        types: list[str] | None,
        limit: int,
        when: When = NOW,
        budget: Budget[WalkItem] | None = None,
    ) -> models.NeighborsResult:
        """Nearest first; as many as fit `budget` (`omitted` counts the rest)."""
        async with self.tx(who, readonly=True) as tx:
            start = (await resolve(tx, [ref]))[ref]
            reached, cut = await walk(tx, [start.gid], depth, direction, types, limit + 1, self._bounds, when=when)
            kept = reached[:limit]
            # Each node's parent was reached before it: the start and the kept nodes are every end.
            rows = await traversal.reached(tx, [(start.gid, None), *((r.gid, r.via) for r in kept)], types, when)
        rows[start.gid] = (start, None)
        head = summary(start)
        found = [
            models.Neighbor(entity=summary(rows[r.gid][0]), depth=r.depth, via=_step(r.via, r.gid, rows))
            for r in kept
            if _shown(r.via, r.gid, rows)
        ]
        shown = found
        if budget:  # the start counts too: the complete record carries it whole
            walked: list[WalkItem] = [head, *found]
            fit = budget.take(walked)
            first = fit[0] if fit else None
            head = first if isinstance(first, models.EntitySummary) else head.clipped(clip(head.description, 0))
            shown = [n for n in fit if isinstance(n, models.Neighbor)]
        return models.NeighborsResult(
            start=head,
            neighbors=shown,
            truncated=_truncated("walk", cut or len(reached) > limit),
            omitted=len(found) - len(shown),
        )

    async def path(
        self,
        who: Principal,
        source: str,
        target: str,
        *,
        max_depth: int,
        direction: str,
        types: list[str] | None,
        when: When = NOW,
    ) -> models.PathResult:
        async with self.tx(who, readonly=True) as tx:
            ends = await resolve(tx, list(dict.fromkeys([source, target])))
            a, b = ends[source], ends[target]
            steps, cut = await shortest(
                tx, a.gid, b.gid, max_depth, direction, types, self._bounds, joins=True, when=when
            )
            if steps is None:
                return models.PathResult(found=False, truncated=_truncated("path", cut))
            order = path_nodes(a.gid, steps)
            # The entities and the path's edges with their properties, read once the search is over.
            rows = await traversal.reached(tx, [(a.gid, None), *zip(order[1:], steps, strict=True)], types, when)
            if not all(_shown(s, g, rows) for s, g in zip(steps, order[1:], strict=True)):  # deleted meanwhile
                return models.PathResult(found=False, truncated=_truncated("path", cut))
        return models.PathResult(
            found=True,
            length=len(steps),
            nodes=[summary(rows[g][0]) for g in order],
            relations=[_step(s, g, rows) for s, g in zip(steps, order[1:], strict=True)],
            truncated=_truncated("path", cut),
        )

    async def chain(
        self, who: Principal, ref: str, *, relation_type: str, direction: str, depth: int, when: When = NOW
    ) -> models.NeighborsResult:
        return await self.neighbors(
            who, ref, depth=depth, direction=direction, types=[relation_type], limit=self.limits.max_results, when=when
        )

    async def subgraph(
        self,
        who: Principal,
        refs: Sequence[str],
        *,
        depth: int,
        max_nodes: int,
        max_relations: int,
        when: When = NOW,
        budget: Budget[SubgraphItem] | None = None,
    ) -> models.SubgraphResult:
        """The entities, then the relations among them; as many as fit `budget`, the relations only
        among the entities kept (`omitted` counts the rest)."""
        async with self.tx(who, readonly=True) as tx:
            starts = await resolve(tx, list(dict.fromkeys(refs)))
            gids = list(dict.fromkeys(r.gid for r in starts.values()))
            room = max_nodes - len(gids)
            reached, cut = await walk(tx, gids, depth, "both", None, max(room, 0) + 1, self._bounds, when=when)
            gids += [r.gid for r in reached[:room]]
            rels = await relations.among(tx, gids, either_end=False, limit=max_relations + 1, when=when)
            rows = await entities.by_gids(tx, gids)
        found = [summary(rows[g]) for g in gids if g in rows]
        links = [relation(r) for r in rels[:max_relations]]
        kept, among = found, links
        if budget:
            kept = [e for e in budget.take(found) if isinstance(e, models.EntitySummary)]
            ids = {e.id for e in kept}
            among = [r for r in links if r.from_id in ids and r.to_id in ids]
            among = among[: budget.fit([*kept, *among]) - len(kept)]
        return models.SubgraphResult(
            entities=kept,
            relations=among,
            truncated=_truncated("walk", cut or len(reached) > room or len(rels) > max_relations),
            omitted=len(found) + len(links) - len(kept) - len(among),
        )

    async def hierarchy(self, who: Principal) -> models.HierarchyResult:
        async with self.tx(who, readonly=True) as tx:
            rows = await overview.categories(tx, self.limits.hierarchy_max_children, self.limits.hierarchy_max_nodes)
        # Built with dicts, one pass: the rows are bounded, and so is the work done on the event loop.
        areas: dict[str | None, models.HierarchyNode] = {}
        topics: dict[tuple[str | None, str | None], models.HierarchyNode] = {}
        for r in rows:
            area = areas.get(r.area)
            if area is None:
                area = areas[r.area] = models.HierarchyNode(name=r.area, count=r.area_n)
            topic = topics.get((r.area, r.topic))
            if topic is None:
                topic = topics[(r.area, r.topic)] = models.HierarchyNode(name=r.topic, count=r.topic_n)
                area.children.append(topic)
            topic.children.append(models.HierarchyNode(name=r.subtopic, count=r.n))
        return models.HierarchyResult(
            areas=list(areas.values()),
            total=rows[0].total if rows else 0,
            truncated=_truncated("hierarchy", bool(rows) and rows[0].groups > len(rows)),
        )

    async def stats(self, who: Principal) -> models.StatsResult:
        async with self.tx(who, readonly=True) as tx:
            totals = await overview.totals(tx)
            types = await overview.type_counts(tx, 20)
            rel_types = await overview.relation_type_counts(tx, 20)
            connected = await overview.most_connected(tx, 10)
            recent = await history.recent(tx, 10)
        return models.StatsResult(
            entities=totals.entities,
            deleted_entities=totals.deleted_entities,
            relations=totals.relations,
            observations=totals.observations,
            entity_types=[models.Count(name=r.type, count=r.n) for r in types],
            relation_types=[models.Count(name=r.type, count=r.n) for r in rel_types],
            most_connected=[models.Connected.model_validate(r, from_attributes=True) for r in connected],
            recent_activity=[models.Activity.model_validate(r, from_attributes=True) for r in recent],
        )

    # --- bounded slices, for the compatibility dialects and resources ----------------------

    async def page(self, who: Principal, cursor: str | None) -> Slice:
        """A page of the whole graph: entities by name, each page owning its entities' outgoing relations.

        A page lists at most `page_relations` relations; when its entities have more, the next
        pages list the rest of them (and no entities) before the next entities come.
        """
        cap = self.limits.page_relations
        async with self.tx(who, readonly=True) as tx:
            pos = self.cursors.decode(cursor, tx.tenant.id, "graph") if cursor else None
            if isinstance(pos, dict):  # the rest of the relations of the previous page's entities
                rows, after, last, rel_after, more = [], pos["a"], pos["z"], tuple(pos["r"]), pos["m"]
            else:
                rows = await entities.page_by_name(tx, self.limits.page_size + 1, pos)
                more = len(rows) > self.limits.page_size
                rows = rows[: self.limits.page_size]
                after, last, rel_after = pos, rows[-1].name if rows else None, None
            rels = await relations.from_source_names(tx, after, last, rel_after, cap + 1) if last is not None else []
            total = await entities.count_live(tx)
            out = await self._slice(tx, rows, [r for r, _ in rels[:cap]])
            out.total_entities = total
            if len(rels) > cap:
                position = {"a": after, "z": last, "r": list(rels[cap - 1][1]), "m": more}
                out.next_cursor = self.cursors.encode(tx.tenant.id, "graph", position)
                out.relations_more = _truncated("read_graph", True)
            elif more:
                out.next_cursor = self.cursors.encode(tx.tenant.id, "graph", last)
        return out

    async def matching(self, who: Principal, text: str) -> Slice:
        """Entities whose name, type or an observation contains `text`; relations with either end among them."""
        async with self.tx(who, readonly=True) as tx:
            rows = await entities.matching_text(tx, text, self.limits.max_results + 1)
            return await self._bounded(tx, rows)

    async def named(self, who: Principal, names: Sequence[str]) -> Slice:
        """Entities with exactly these names; relations with either end among them."""
        async with self.tx(who, readonly=True) as tx:
            found = await entities.live_by_names(tx, names)
            return await self._bounded(tx, list(found.values()))

    async def _bounded(self, tx: Tx, rows: list[EntityRow]) -> Slice:
        cap = self.limits.max_results
        rels = await relations.among(tx, [r.gid for r in rows[:cap]], either_end=True, limit=cap * 5 + 1)
        out = await self._slice(tx, rows[:cap], rels[: cap * 5])
        out.truncated = len(rows) > cap or len(rels) > cap * 5
        return out

    async def _slice(self, tx: Tx, rows: Sequence[EntityRow], rels: Sequence[relations.Relation]) -> Slice:
        obs = await entities.observations(tx, [r.id for r in rows], self.limits.observations_per_entity)
        return Slice(
            entities=[
                EntityWithObservations(
                    entity=summary(r), observations=obs[r.id].texts, observations_total=obs[r.id].total
                )
                for r in rows
            ],
            relations=[relation(r) for r in rels],
        )


def _truncated(what: str, cut: bool) -> bool:
    if cut:
        metrics.TRUNCATED.labels(what).inc()
    return cut


# traversal.reached: graph id -> (the entity, the properties of the edge it was reached by)
Ends = dict[str, tuple[EntityRow, dict[str, Any] | None]]


def _shown(step: Step, reached_by: str, rows: Ends) -> bool:
    """Whether a step's ends and edge are still there: a write may have removed one since the walk read it."""
    return step.source in rows and step.target in rows and reached_by in rows and rows[reached_by][1] is not None


def _step(step: Step, reached_by: str, rows: Ends) -> models.Relation:
    """The relation of a step, whose properties `traversal.reached` read with the node `reached_by`."""
    (source, _), (target, _), (_, props) = rows[step.source], rows[step.target], rows[reached_by]
    assert props is not None
    return relation(relations.Relation(props, source.id, source.name, target.id, target.name, step.source, step.target))
