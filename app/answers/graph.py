"""Concise answers of the graph tools: walks, paths, slices, overviews, queries, duplicates, merges,
aliases and the audit log.

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
from typing import Any

import orjson

from app.mcp.answers.entities import entity_line, relation_line
from app.mcp.answers.text import block, day, lines, moment, more, sizes
from app.services import models
from app.services.audit import AuditEntry, AuditPage
from app.services.budget import clip
from app.services.graph_query import QueryResult

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


def neighbor_chunks(items: Sequence[models.Neighbor]) -> list[str]:
    """Each neighbour's line, in order; the name of the entity it was reached from as a heading
    wherever that changes."""
    out = []
    parent: str | None = None
    for n in items:
        forward = n.via.to_id == n.entity.id
        pid, name = (n.via.from_id, n.via.from_) if forward else (n.via.to_id, n.via.to)
        chunk = ""
        if pid != parent:
            parent = pid
            chunk = f"{block(name)}:\n"
        out.append(chunk + _item(f"{arrow(n.via, forward)} {entity_line(n.entity)}"))
    return out


def neighbor_sizes(items: Sequence[models.EntitySummary | models.Neighbor]) -> list[int]:
    """Bytes of a walk's start (its name heads the first neighbour's line) and of each neighbour."""
    start = [0] if items and not isinstance(items[0], models.Neighbor) else []
    walked = [n for n in items if isinstance(n, models.Neighbor)]
    return start + sizes(neighbor_chunks(walked))


def left_out(omitted: int, what: str, narrow: str) -> str | None:
    """The last line of a walk that did not fit: how many items, and how to see them (it has no cursor)."""
    return f"… {omitted} more {what} (raise max_tokens to see them, or narrow {narrow})" if omitted else None


def stopped(truncated: bool, narrow: str, told: bool) -> str | None:
    """The line of a walk cut at a bound (its limit, or a hub's edges); `told`: how to narrow it is said already."""
    if not truncated:
        return None
    return "The walk stopped at a bound: more lie beyond" + ("." if told else f" (narrow {narrow}).")


def neighbors(r: models.NeighborsResult, narrow: str = "depth, direction, relation_types or limit") -> str:
    """`narrow`: the arguments that make the walk smaller."""
    left = left_out(r.omitted, "neighbours", narrow)
    cut = stopped(r.truncated, narrow, told=left is not None)
    if not r.neighbors:
        none = f"{block(r.start.name)}: no neighbours found." if not r.omitted else None
        return lines([], none, left, cut)
    return lines(neighbor_chunks(r.neighbors), left, cut)


def chain(r: models.NeighborsResult) -> str:
    return neighbors(r, narrow="depth or direction")


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


def subgraph_chunks(items: Sequence[models.EntitySummary | models.Relation]) -> list[str]:
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


def subgraph_sizes(items: Sequence[models.EntitySummary | models.Relation]) -> list[int]:
    return sizes(subgraph_chunks(items))


def subgraph(r: models.SubgraphResult) -> str:
    narrow = "depth, max_nodes or max_relations"
    left = left_out(r.omitted, "entities and relations", narrow)
    cut = stopped(r.truncated, narrow, told=left is not None)
    chunks = subgraph_chunks([*r.entities, *r.relations])
    alone = "No relations among them." if len(r.entities) > 1 and not r.relations and not r.omitted else None
    return lines(chunks, alone, left, cut) or "Nothing found."


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


# --- query_graph --------------------------------------------------------------------------------------

SEPARATOR = " | "


def query_rows(r: QueryResult) -> str:
    """A table: the columns' names, then a line per row; strings bare where that is unambiguous,
    other values as compact JSON, an entity or relation as its properties, null as nothing."""
    cut = "… more rows than the bounds: narrow the query or add LIMIT." if r.truncated else None
    if not r.rows:
        return lines([], "No rows.", cut)
    head = SEPARATOR.join(block(c) for c in r.columns)
    rows = [SEPARATOR.join(_cell(v) for v in row) + "\n" for row in r.rows]
    return lines([f"{head}\n", *rows], cut)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str) and _bare(value):
        return value
    return orjson.dumps(_plain(value)).decode()


def _bare(text: str) -> bool:
    """Whether a string reads as itself in a cell: not empty, on one line, without the separator,
    and not to be taken for a number, a literal or JSON."""
    if not text or text != text.strip() or "\n" in text or "\r" in text or SEPARATOR.strip() in text:
        return False
    if text[0] in '"[{' or text in ("true", "false", "null"):
        return False
    try:
        float(text)
    except ValueError:
        return True
    return False


_GRAPH_KEYS = {"id", "label", "properties"}
_RECORD_KEYS = {"id", "created_at", "created_by"}  # get_entity and detail="full" have them


def _plain(value: Any) -> Any:
    """A value without what only the graph store uses: an entity or relation (a map of `id`, `label`,
    `properties` and its ends' internal ids) becomes its properties, without its id and who wrote it
    when; nulls go."""
    if isinstance(value, dict):
        if value.keys() >= _GRAPH_KEYS and isinstance(value["properties"], dict):
            props = value["properties"].items()
            return {k: _plain(v) for k, v in props if k not in _RECORD_KEYS and v is not None}
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


# --- duplicates, merges, aliases ----------------------------------------------------------------------


def _reason(x: models.DuplicateReason) -> str:
    if x.kind == "shared_neighbors":
        some = f" ({', '.join(block(e) for e in x.examples)})" if x.examples else ""
        return f"{x.count or 0} shared neighbours{some}"
    alike = f" {x.similarity:.0%} alike" if x.similarity is not None else " alike"
    return ("names" if x.kind == "name" else "meanings") + alike


def _pair(p: models.DuplicatePair) -> str:
    if p.a.type == p.b.type:
        both = f"{block(p.a.name)} ~ {block(p.b.name)} ({block(p.a.type)})"
    else:
        both = f"{block(p.a.name)} ({block(p.a.type)}) ~ {block(p.b.name)} ({block(p.b.type)})"
    return f"{both}: {'; '.join(_reason(x) for x in p.reasons)}"


def duplicates(page: models.DuplicatesPage) -> str:
    """Likely pairs, best first; the last line says where the next slice starts."""
    if not page.pairs:
        head = f"No likely duplicates among the {page.scanned} entities scanned."
        return lines([f"{head}\n"], more(page.next_cursor))
    chunks = [f"{_pair(p)}\n" for p in page.pairs]
    return lines(chunks, f"Scanned {page.scanned} entities.", more(page.next_cursor))


def merged(r: models.MergeResult) -> str:
    names = ", ".join(block(e.name) for e in r.merged)
    moved = [
        f"{n} {what}"
        for n, what in (
            (r.observations_added, "facts moved"),
            (r.relations_moved, "relations moved"),
            (r.relations_folded, "relations folded into copies"),
            (r.self_loops_dropped, "self-loops dropped"),
        )
        if n
    ]
    out = [
        f"Merged {names} into {block(r.entity.name)} v{r.entity.version}" + (f": {', '.join(moved)}." if moved else ".")
    ]
    if r.aliases_added:
        out.append(f"New aliases: {', '.join(block(a) for a in r.aliases_added)}.")
    if r.aliases_not_kept:
        out.append(
            f"Not kept as aliases (another entity holds them): {', '.join(block(a) for a in r.aliases_not_kept)}."
        )
    if r.property_conflicts:
        out.append(f"Properties that differed (the rule chose): {', '.join(block(k) for k in r.property_conflicts)}.")
    if r.embeddings_pending:
        out.append(f"{r.embeddings_pending} texts are found by meaning once embedded.")
    return "\n".join(out)


def aliases(r: models.AliasesResult, added: bool) -> str:
    verb, held = ("Added", "already held") if added else ("Removed", "not held")
    done = f"{verb} {', '.join(block(a) for a in r.changed)}" if r.changed else f"{verb} none"
    if r.unchanged:
        done += f"; {held}: {', '.join(block(a) for a in r.unchanged)}"
    now = f"Aliases now: {', '.join(block(a) for a in r.aliases)}." if r.aliases else "No aliases now."
    return f"{block(r.entity.name)} v{r.entity.version}: {done}. {now}"


# --- audit_log ----------------------------------------------------------------------------------------


def audit_chunks(entries: Sequence[AuditEntry]) -> list[str]:
    """A call a line, newest first; who made it (subject and client) as a heading where that changes."""
    out = []
    caller: tuple[str, str] | None = None
    for e in entries:
        chunk = ""
        if (e.subject, e.client_id) != caller:
            caller = (e.subject, e.client_id)
            chunk = f"{block(e.subject)} via {block(e.client_id)}:\n"
        outcome = f" {block(e.outcome)}" if e.outcome != "ok" else ""
        affected = f", {len(e.affected)} changed" if e.affected else ""
        out.append(chunk + f"- {moment(e.at)} {block(e.tool)}{outcome}{affected}\n")
    return out


def audit(page: AuditPage) -> str:
    if not page.entries:
        return "No calls recorded."
    return lines(audit_chunks(page.entries), more(page.next_cursor))
