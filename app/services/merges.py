"""Merging duplicate entities into one, and the aliases that keep their old names meaning it.

A merge is one transaction: the merged entities' observations move to the survivor (in order,
duplicates skipped), their relations are re-pointed to it (copies folded, self-loops dropped),
their properties combine by a stated rule, their names and aliases become the survivor's aliases,
and they are soft-deleted and marked merged into the survivor, so their ids lead to it too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from app.auth.principal import Principal
from app.errors import EngramError
from app.services import models
from app.services.base import Service
from app.services.fairness import refuse
from app.services.refs import resolve
from app.services.shapes import summary
from app.services.writer import apply
from app.store import aliases, entities, history, merges
from app.store.database import Tx
from app.store.entities import EntityRow, name_key
from app.store.history import Event
from app.store.merges import Edge, EdgeChange

MAX_MERGED = 20  # entities folded into one per call
MAX_ALIASES = 100  # aliases one entity may hold
_FILLED = (
    "description",
    "area",
    "topic",
    "subtopic",
    "certainty",
)  # taken from a merged entity if the survivor has none


def _props(
    survivor: EntityRow, others: Sequence[EntityRow], rule: models.PropertiesRule
) -> tuple[dict[str, Any], list[str]]:
    """The combined properties, key by key, and the keys whose values differed.

    `survivor`: the survivor's value wins, then the merged entities' in the order given; `merged`:
    the merged entities' in the order given win, then the survivor's.
    """
    order = [survivor, *others] if rule == "survivor" else [*others, survivor]
    combined: dict[str, Any] = {}
    for row in reversed(order):
        combined.update(row.properties)
    conflicts = sorted(
        k for k in combined if len({orjson.dumps(r.properties[k]) for r in order if k in r.properties}) > 1
    )
    try:
        models.bounded_properties(combined)
    except ValueError as exc:
        raise refuse("merge_properties", f"the combined properties are too large: {exc}") from None
    return combined, conflicts


def _fields(survivor: EntityRow, others: Sequence[EntityRow], props: dict[str, Any]) -> dict[str, Any]:
    """The survivor's new fields: its own, the combined properties, and the first value a merged
    entity has for a field the survivor leaves empty."""
    fields: dict[str, Any] = {"properties": props}
    for f in _FILLED:
        if getattr(survivor, f) in (None, ""):
            fill = next((getattr(o, f) for o in others if getattr(o, f) not in (None, "")), None)
            if fill is not None:
                fields[f] = fill
    return fields


def _folded(kept: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """A relation's properties after a copy of it is folded in: the kept one's values win; what it lacks
    (strength, notes, property keys) comes from the copy."""
    out = dict(kept)
    for key in ("strength", "notes"):
        if key not in out and key in other:
            out[key] = other[key]
    if "properties" in other:
        out["properties"] = {**other["properties"], **kept.get("properties", {})}
    return out


class _EdgePlan:
    """How a merge changes edges: each touching a merged entity is re-pointed to the survivor, unless
    it becomes a self-loop (dropped) or a copy of an edge the survivor has or gains (folded into it).
    Each re-pointed or folded edge is kept as an `EdgeChange` for its ends' history; a self-loop's id
    goes to the survivor's `merged` entry (both its ends are merged, so no other end is told)."""

    def __init__(self, edges: Sequence[Edge], merged_gids: set[str], survivor_gid: str) -> None:
        self.edges = edges
        self.merged = merged_gids
        self.survivor = survivor_gid
        self.drop: list[str] = []
        self.write: dict[str, Edge] = {}
        self.changes: list[EdgeChange] = []
        self.loop_ids: list[str] = []
        self.loops = self.folded = self.moved = 0

    def end(self, gid: str) -> str:
        return self.survivor if gid in self.merged else gid

    def keys(self) -> list[tuple[str, str, str]]:
        """Where the edges will be, self-loops aside: the keys to look for stored copies at."""
        keys = ((self.end(e.start), self.end(e.end), e.type) for e in self.edges)
        return list(dict.fromkeys(k for k in keys if k[0] != k[1]))

    def plan(self, stored: dict[tuple[str, str, str], Edge]) -> None:
        kept = dict(stored)
        for e in self.edges:
            a, b = self.end(e.start), self.end(e.end)
            if a == b:
                self.drop.append(e.gid)
                self.loop_ids.append(e.props["id"])
                self.loops += 1
                continue
            key = (a, b, e.type)
            if key in kept:
                target = kept[key]
                props = _folded(target.props, e.props)
                if props != target.props:
                    kept[key] = self.write[target.gid] = Edge(target.gid, target.start, target.end, props)
                self.drop.append(e.gid)
                self.folded += 1
                self._told(e, target.props["id"])
                continue
            kept[key] = self.write[e.gid] = Edge(e.gid, a, b, e.props)
            self.moved += 1
            self._told(e, None)

    def _told(self, e: Edge, folded_into: str | None) -> None:
        self.changes.append(EdgeChange(e.props["id"], e.type, e.start, e.end, e.start in self.merged, folded_into))


class Merges(Service):
    async def merge(
        self,
        who: Principal,
        into: str,
        merge: Sequence[str],
        *,
        properties_rule: models.PropertiesRule = "survivor",
        allow_type_mismatch: bool = False,
        expected_version: int | None = None,
    ) -> models.MergeResult:
        if len(merge) > MAX_MERGED:
            raise refuse("merge_entities", f"at most {MAX_MERGED} entities per merge (got {len(merge)})")
        async with self.tx(who) as tx:
            found = await resolve(tx, list(dict.fromkeys([into, *merge])), lock=True)
            survivor = found[into]
            others = list({found[r].id: found[r] for r in merge}.values())
            if any(o.id == survivor.id for o in others):
                raise EngramError("invalid", "an entity cannot be merged into itself", id=survivor.id)
            gone = {r: found[r].id for r in merge if entities.is_uuid(r) and found[r].id != r}
            if gone:  # its id leads to its survivor, which is not what the caller reviewed
                raise EngramError("conflict", "these entities were merged into others already", merged_into=gone)
            if expected_version is not None and survivor.version != expected_version:
                raise EngramError(
                    "conflict",
                    f"{survivor.name!r} is at version {survivor.version}, not {expected_version}; read it again",
                    current_version=survivor.version,
                )
            mixed = [o.name for o in others if name_key(o.type) != name_key(survivor.type)]
            if mixed and not allow_type_mismatch:
                raise EngramError(
                    "invalid",
                    f"these entities are not of type {survivor.type!r}; pass allow_type_mismatch to merge them anyway",
                    names=mixed,
                )
            result = await self._merge(tx, survivor, others, properties_rule, who.actor)
        result.embeddings_pending = tx.pending
        return result

    async def _merge(
        self, tx: Tx, survivor: EntityRow, others: list[EntityRow], rule: models.PropertiesRule, actor: str
    ) -> models.MergeResult:
        ids = [o.id for o in others]
        edges = await self._bounded(tx, others)
        moved_aliases = await aliases.move(tx, ids, survivor.id)
        names = [o.name for o in others if name_key(o.name) != survivor.name_key]
        kept_names = await aliases.add(tx, survivor.id, names, actor)
        if await aliases.count(tx, survivor.id) > MAX_ALIASES:
            raise refuse("aliases", f"an entity holds at most {MAX_ALIASES} aliases")

        gained = await merges.move_observations(tx, ids, survivor.id)
        plan = _EdgePlan(edges, {o.gid for o in others}, survivor.gid)
        plan.plan(await merges.edges_by_keys(tx, plan.keys()))
        await merges.delete_edges(tx, plan.drop)
        await merges.rewrite_edges(tx, list(plan.write.values()))

        props, conflicts = _props(survivor, others, rule)
        values, changes = apply(survivor, _fields(survivor, others, props))
        if changes:
            await entities.write_fields(tx, [entities.NewEntity(id=survivor.id, **values)])
        await entities.set_deleted(tx, ids, True, actor)
        await merges.mark_merged(tx, ids, survivor.id)
        version = (await entities.touch(tx, [survivor.id], actor))[survivor.id]

        added_aliases = [*kept_names, *moved_aliases]
        held = {name_key(a) for a in (await aliases.of_entities(tx, [survivor.id]))[survivor.id]}
        record = {
            "merged": [{"id": o.id, "name": o.name} for o in others],
            "aliases_added": added_aliases,
            "observations_added": len(gained),
            "relations_moved": plan.moved,
            "relations_folded": plan.folded,
            "self_loops_dropped": plan.loops,
            "self_loops_dropped_ids": plan.loop_ids,
            "properties_rule": rule,
            "changes": changes,
        }
        events = [
            Event(o.id, "merged_into", {"into": {"id": survivor.id, "name": survivor.name}}, other_id=survivor.id)
            for o in others
        ]
        events.append(Event(survivor.id, "merged", record))  # last: the survivor's history shows it first
        await merges.record_edge_changes(tx, plan.changes, survivor.id, values["name"], actor)
        await history.record(tx, events, actor)
        return models.MergeResult(
            entity=models.Changed(id=survivor.id, name=values["name"], version=version),
            merged=[summary(o) for o in others],
            aliases_added=added_aliases,
            aliases_not_kept=[n for n in names if name_key(n) not in held],
            observations_added=len(gained),
            relations_moved=plan.moved,
            relations_folded=plan.folded,
            self_loops_dropped=plan.loops,
            property_conflicts=conflicts,
        )

    async def _bounded(self, tx: Tx, others: list[EntityRow]) -> list[merges.Edge]:
        """The edges a merge of `others` re-points; refused if it would move more observations or
        relations than one call may."""
        texts_cap, edges_cap = self.limits.max_batch_texts, self.limits.walk_level_edges
        if await merges.count_observations(tx, [o.id for o in others], texts_cap + 1) > texts_cap:
            raise refuse("merge_observations", f"a merge moves at most {texts_cap} observations; merge fewer at once")
        edges = await merges.edges_touching(tx, [o.gid for o in others], edges_cap + 1)
        if len(edges) > edges_cap:
            raise refuse("merge_relations", f"a merge moves at most {edges_cap} relations; merge fewer at once")
        return edges

    async def add_aliases(self, who: Principal, ref: str, given: Sequence[str]) -> models.AliasesResult:
        """Give an entity aliases. A spelling held by another entity (as an alias, or as a live entity's
        name, case-insensitively) is a `conflict`; one the entity holds already is unchanged."""
        async with self.tx(who) as tx:
            row = (await resolve(tx, [ref], lock=True))[ref]
            first: dict[str, str] = {}
            for a in given:  # the first spelling of each key
                first.setdefault(name_key(a), a)
            wanted = list(first.values())
            held = await aliases.holders(tx, wanted)
            taken = [h for h in held if h.entity_id != row.id or h.alias is None]
            if taken:
                raise EngramError(
                    "conflict",
                    "these spellings already name an entity or are another entity's alias",
                    held=[
                        {
                            "alias": h.alias or h.entity_name,
                            "entity_id": h.entity_id,
                            "entity": h.entity_name,
                            "as": "name" if h.alias is None else "alias",
                            "deleted": h.deleted,
                        }
                        for h in taken
                    ],
                )
            mine = {h.key for h in held}
            added = await aliases.add(tx, row.id, [a for a in wanted if name_key(a) not in mine], who.actor)
            if len(added) < len(wanted) - len(mine):  # another call took one meanwhile
                raise EngramError("conflict", "an alias was taken meanwhile; read it again and retry")
            if await aliases.count(tx, row.id) > MAX_ALIASES:
                raise refuse("aliases", f"an entity holds at most {MAX_ALIASES} aliases")
            return await self._done(tx, row, "aliases_added", added, [a for a in wanted if a not in added], who.actor)

    async def remove_aliases(self, who: Principal, ref: str, given: Sequence[str]) -> models.AliasesResult:
        """Take aliases from an entity (matched case-insensitively); ones it does not hold are unchanged.
        A deleted entity is reached by its id, so that its aliases can be freed."""
        async with self.tx(who) as tx:
            by_id = await entities.by_ids(tx, [ref], lock=True) if entities.is_uuid(ref) else {}
            row = by_id.get(ref) or (await resolve(tx, [ref], lock=True))[ref]
            removed = await aliases.remove(tx, row.id, given)
            gone = {name_key(a) for a in removed}
            return await self._done(
                tx, row, "aliases_removed", removed, [a for a in given if name_key(a) not in gone], who.actor
            )

    @staticmethod
    async def _done(
        tx: Tx, row: EntityRow, action: str, changed: list[str], unchanged: list[str], actor: str
    ) -> models.AliasesResult:
        """Record the change (the search documents follow the entity's aliases) and answer."""
        version = row.version
        if changed:
            version = (await entities.touch(tx, [row.id], actor))[row.id]
            await history.record(tx, [Event(row.id, action, {"aliases": changed})], actor)
        held = (await aliases.of_entities(tx, [row.id]))[row.id]
        return models.AliasesResult(
            entity=models.Changed(id=row.id, name=row.name, version=version),
            aliases=held,
            changed=changed,
            unchanged=unchanged,
        )
