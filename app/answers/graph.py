"""The answers of the graph tools (app/mcp/tools/graph.py): walks, paths, subgraphs, and the
overviews (the category tree, statistics, the server's status).

    Ada Lovelace:
      -wrote programs for→ Analytical Engine (machine): Babbage's design
      ←mentors (since 1833; strength 0.8)- Charles Babbage (person)
    Analytical Engine:
      ←designed- Luigi Menabrea (person)

A walk lists each entity it reached under the one it was reached from, the relation between them as
an arrow (its type, and its notes and strength when it has them); a path is one such chain on one
line: `Ada -works at→ Babbage Labs ←mentors- Grace`. Names are the handles every tool takes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime

from app.answers.form import Form
from app.answers.summaries import entity_line, relation_line
from app.answers.text import block, day, lines, moment
from app.services import models
from app.services.budget import clip
from app.services.parts import SubgraphItem, WalkItem, subgraph_items, walk_items

NOTES_BYTES = 120  # of a relation's notes on an arrow; get_entity shows them whole


def arrow(r: models.Relation, forward: bool) -> str:
    """A relation as read from one of its ends: `-works at→` (forward), or `←mentors-`."""
    extra = [block(clip(r.notes, NOTES_BYTES))] if r.notes else []
    if r.strength is not None:
        extra.append(f"strength {r.strength:g}")
    if r.valid_until:
        extra.append(f"until {day(datetime.fromisoformat(r.valid_until))}")
    label = block(r.type) + (f" ({'; '.join(extra)})" if extra else "")
    return f"-{label}→" if forward else f"←{label}-"


def _item(text: str) -> str:
    """An item under a heading: indented, and its further lines more so."""
    return "  " + text.replace("\n", "\n  ") + "\n"


# --- neighbors, relation_chain ------------------------------------------------------------------------


def neighbor_chunks(items: Sequence[WalkItem]) -> list[str]:
    """Each neighbour's line, in order; the name of the entity it was reached from as a heading
    wherever that changes. The start prints nothing of its own: its name heads the first line."""
    out = []
    parent: str | None = None
    for n in items:
        if not isinstance(n, models.Neighbor):
            out.append("")
            continue
        forward = n.via.to_id == n.entity.id
        pid, name = (n.via.from_id, n.via.from_) if forward else (n.via.to_id, n.via.to)
        chunk = ""
        if pid != parent:
            parent = pid
            chunk = f"{block(name)}:\n"
        out.append(chunk + _item(f"{arrow(n.via, forward)} {entity_line(n.entity)}"))
    return out


def left_out(omitted: int, what: str, narrow: str) -> str | None:
    """The last line of a walk that did not fit: how many items, and how to see them (it has no cursor)."""
    return f"… {omitted} more {what} (raise max_tokens to see them, or narrow {narrow})" if omitted else None


def stopped(truncated: bool, narrow: str, told: bool) -> str | None:
    """The line of a walk cut at a bound (its limit, or a hub's edges); `told`: how to narrow it is said already."""
    if not truncated:
        return None
    return "The walk stopped at a bound: more lie beyond" + ("." if told else f" (narrow {narrow}).")


def _walk(narrow: str) -> Form[models.NeighborsResult, WalkItem]:
    """The form of a walk; `narrow`: the arguments that make it smaller."""

    def frame(r: models.NeighborsResult, chunks: list[str]) -> str:
        left = left_out(r.omitted, "neighbours", narrow)
        cut = stopped(r.truncated, narrow, told=left is not None)
        if not r.neighbors:
            none = f"{block(r.start.name)}: no neighbours found." if not r.omitted else None
            return lines([], none, left, cut)
        return lines(chunks, left, cut)

    return Form(walk_items, neighbor_chunks, frame)


NEIGHBORS = _walk("depth, direction, relation_types or limit")
CHAIN = _walk("depth or direction")


# --- shortest_path ------------------------------------------------------------------------------------


def path(r: models.PathResult) -> str:
    if not r.found or not r.nodes:
        bound = " A hub's bound cut the search: narrow it with relation_types or direction." if r.truncated else ""
        return f"No path within max_depth relations; a larger max_depth (up to 10) may find one.{bound}"
    steps = [block(r.nodes[0].name)]
    for rel, node in zip(r.relations, r.nodes[1:], strict=True):
        steps.append(f"{arrow(rel, rel.to_id == node.id)} {block(node.name)}")
    if len(steps) == 1:
        return f"{steps[0]} is both ends: a path of no relations."
    cut = "A hub's bound cut the search: a shorter path may exist." if r.truncated else None
    return lines([" ".join(steps) + "\n"], cut)


# --- subgraph -----------------------------------------------------------------------------------------


def subgraph_chunks(items: Sequence[SubgraphItem]) -> list[str]:
    """Entities' lines, then relations' under one heading, in order."""
    out = []
    heading = False
    for x in items:
        if isinstance(x, models.Relation):
            out.append(("" if heading else "Relations:\n") + f"{relation_line(x)}\n")
            heading = True
        else:
            out.append(f"{entity_line(x)}\n")
    return out


def _subgraph(r: models.SubgraphResult, chunks: list[str]) -> str:
    narrow = "depth, max_nodes or max_relations"
    left = left_out(r.omitted, "entities and relations", narrow)
    cut = stopped(r.truncated, narrow, told=left is not None)
    alone = "No relations among them." if len(r.entities) > 1 and not r.relations and not r.omitted else None
    return lines(chunks, alone, left, cut) or "Nothing found."


SUBGRAPH = Form[models.SubgraphResult, SubgraphItem](subgraph_items, subgraph_chunks, _subgraph)


# --- hierarchy, graph_stats, server_status ------------------------------------------------------------


def hierarchy(r: models.HierarchyResult) -> str:
    if not r.total:
        return "No entities."
    chunks: list[str] = []

    def add(node: models.HierarchyNode, indent: str) -> None:
        name = block(node.name) if node.name is not None else "(none)"
        chunks.append(f"{indent}{name} ({node.count})\n")
        children = node.children
        if len(children) == 1 and children[0].name is None:  # says nothing its parent does not
            children = children[0].children
            if len(children) == 1 and children[0].name is None:
                children = []
        for child in children:
            add(child, indent + "  ")

    for area in r.areas:
        add(area, "")
    cut = "The tree was cut to the server's bounds; the counts are exact." if r.truncated else None
    return lines(chunks, f"{r.total} entities in all.", cut)


def _counts(items: Sequence[models.Count]) -> str:
    return ", ".join(f"{block(c.name)} {c.count}" for c in items)


def stats(r: models.StatsResult) -> str:
    if not (r.entities or r.deleted_entities or r.relations or r.observations):
        return "The memory is empty."
    deleted = f" ({r.deleted_entities} deleted)" if r.deleted_entities else ""
    out = [f"{r.entities} entities{deleted}, {r.relations} relations, {r.observations} facts."]
    if r.entity_types:
        out.append(f"Entity types: {_counts(r.entity_types)}")
    if r.relation_types:
        out.append(f"Relation types: {_counts(r.relation_types)}")
    if r.most_connected:
        out.append(
            "Most connected: " + ", ".join(f"{block(c.name)} ({block(c.type)}) {c.degree}" for c in r.most_connected)
        )
    if r.recent_activity:
        last = r.recent_activity[0]
        actions = Counter(a.action for a in r.recent_activity)
        kinds = ", ".join(f"{n} {block(action)}" for action, n in actions.most_common())
        out.append(f"Latest changes: {kinds}; the last {moment(last.at)} by {block(last.actor)}")
    return "\n".join(out)


def status(r: models.StatusResult) -> str:
    works = r.graph == "ok"
    head = (
        f"Memory {'works' if works else 'is unavailable now'}: database {r.database}, graph {r.graph},"
        f" embeddings {r.embeddings}. Engram {r.version}."
    )
    usable = f"{len(r.tools)} tools usable." if works else f"Usable now: {', '.join(r.tools) or 'none'}."
    return f"{head}\n{usable}"
