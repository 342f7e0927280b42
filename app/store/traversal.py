"""One level of a breadth-first walk over the edge table, and what a finished walk shows.

Multi-hop walks go level by level here instead of through Cypher's variable-length patterns,
which on AGE 1.5 rebuild a whole-graph cache in every backend after any committed write
(see docs/architecture.md). Each level is one indexed query over ``REL`` (start_id / end_id) that
reads the ends of the edges only: no properties (a hub's thousands of edges are read from the
index alone), and soft-deleted ends are dropped by an anti-join against the few deleted entities.
The properties of the few edges a walk or path returns are read once at the end (`reached`).

Edges count only while they hold at the walk's moment (app/store/validity.py). A level tests an
edge by its ends against ``rel_intervals`` (the few edges that have an interval): a pair of ends is
dropped when one of its edges does not hold and none of them does, so the level still reads the
index alone, and with no interval anywhere the test is an anti-join against an empty table.
A level with a type filter reads the edges' properties anyway, and tests each edge itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import orjson

from app.store.database import Tx, timed
from app.store.edges import REL_TYPE
from app.store.entities import COLUMNS, EntityRow, entity_row
from app.store.validity import NOW, When, edge_holds, valid_at


class Step(NamedTuple):
    """An edge leaving the frontier: `node` was there, `other` is where the edge leads.

    Immutable like every row the store returns, but a tuple: a level may hold thousands, and a
    frozen dataclass costs nearly three times as much to build (8 ms for a hub's 5,000 edges)."""

    node: str
    other: str
    source: str  # the edge's real direction
    target: str
    props: dict[str, Any] | None = None  # not read during a walk: see `reached`


# One direction of a level: the frontier's end of each edge, its other end, and which way it goes.
# The other end must be a live entity; deleted ones are few, and a partial index holds them.
_SIDE = """
    SELECT r.{near}::text, r.{far}::text, {out} FROM {{s}}."REL" r
    WHERE r.{near} = ANY($1::text[]::ag_catalog.graphid[]){kind}
      AND NOT EXISTS (SELECT 1 FROM {{s}}.entities d WHERE d.gid = r.{far} AND d.deleted_at IS NOT NULL){valid}
"""


def _valid(typed: bool, at: str) -> str:
    """The validity test of a level's edge `r` at the parameter `at` (see the module's docstring)."""
    if typed:  # the edge's own row is read for its type: test the edge itself
        return " AND " + edge_holds("r.id", at, "false")
    # Counted, not tested with NOT EXISTS: the planner would turn that test into a hashed subplan
    # over the whole edge table. These scalar subqueries run only for the rare pairs with an edge
    # that does not hold, one index probe each.
    return f"""
      AND NOT EXISTS (
        SELECT 1 FROM {{s}}.rel_intervals v
        WHERE v.start_id = r.start_id AND v.end_id = r.end_id AND NOT ({valid_at("v", at)})
          AND (SELECT count(*) FROM {{s}}.rel_intervals v2
               WHERE v2.start_id = r.start_id AND v2.end_id = r.end_id AND NOT ({valid_at("v2", at)}))
              >= (SELECT count(*) FROM {{s}}."REL" r2 WHERE r2.start_id = r.start_id AND r2.end_id = r.end_id))"""


def _level_query(outgoing: bool, incoming: bool, typed: bool, checked: bool = False) -> str:
    """The text of one level's query. Directions, the type filter and the validity test are separate
    texts, so that a level without a type filter never plans a read of the edges' properties.
    Parameters: $1 the frontier, $2 the limit, $3 the types (typed), then the moment (checked)."""
    kind = f" AND {REL_TYPE} = ANY($3::text[])" if typed else ""
    valid = _valid(typed, f"${4 if typed else 3}") if checked else ""
    parts = []
    if outgoing:
        parts.append(_SIDE.format(near="start_id", far="end_id", out="true", kind=kind, valid=valid))
    if incoming:
        parts.append(_SIDE.format(near="end_id", far="start_id", out="false", kind=kind, valid=valid))
    return " UNION ALL ".join(parts) + " LIMIT $2"


_KEYS = [
    (out, inc, typed, checked)
    for out in (True, False)
    for inc in (True, False)
    for typed in (True, False)
    for checked in (True, False)
    if out or inc
]
_LEVEL = {key: _level_query(*key) for key in _KEYS}


# An edge joining the frontier to the other side's frontier (both hold live entities only).
_JOIN_SIDE = """
    SELECT r.{near}::text, r.{far}::text, {out} FROM {{s}}."REL" r
    WHERE r.{near} = ANY($1::text[]::ag_catalog.graphid[])
      AND r.{far} = ANY($3::text[]::ag_catalog.graphid[]){kind}{valid}
"""


def _join_query(outgoing: bool, incoming: bool, typed: bool, checked: bool = False) -> str:
    """One statement: an edge joining the two frontiers if there is one, else the frontier's level.
    The level is read only when no edge joins them (its scan sits behind a one-time filter).
    Parameters: $1 the frontier, $2 the limit, $3 the other frontier, $4 the types (typed), then the
    moment (checked)."""
    kind = f" AND {REL_TYPE} = ANY($4::text[])" if typed else ""
    at = f"${5 if typed else 4}"
    valid = _valid(typed, at) if checked else ""
    parts = []
    if outgoing:
        parts.append(_JOIN_SIDE.format(near="start_id", far="end_id", out="true", kind=kind, valid=valid))
    if incoming:
        parts.append(_JOIN_SIDE.format(near="end_id", far="start_id", out="false", kind=kind, valid=valid))
    level = _level_query(outgoing, incoming, False, False).rsplit(" LIMIT $2", 1)[0]
    if typed or checked:  # the level's own filters, numbered as this statement numbers them
        level = " UNION ALL ".join(
            _SIDE.format(near=n, far=f, out=o, kind=kind, valid=valid)
            for n, f, o, side in (("start_id", "end_id", "true", outgoing), ("end_id", "start_id", "false", incoming))
            if side
        )
    return f"""
        WITH j AS MATERIALIZED ({" UNION ALL ".join(parts)} LIMIT 1)
        SELECT node, other, out, true FROM j AS j(node, other, out)
        UNION ALL
        (SELECT node, other, out, false FROM ({level}) AS l(node, other, out)
         WHERE NOT EXISTS (SELECT 1 FROM j) LIMIT $2)
    """


_JOIN = {key: _join_query(*key) for key in _KEYS}


def _args(when: When) -> list[Any]:
    """The moment parameter of a checked query (none when every edge counts)."""
    return [] if when.everything else [when.at]


@timed
async def expand(
    tx: Tx,
    frontier: Sequence[str],
    *,
    outgoing: bool,
    incoming: bool,
    types: Sequence[str] | None,
    limit: int | None = None,
    when: When = NOW,
) -> list[Step]:
    """Edges from (and/or into) the frontier's vertices whose other end is a live entity and that
    hold as `when` sees them, at most `limit`: their ends only (`Step.props` is None)."""
    if not (outgoing or incoming) or not frontier:
        return []
    args: list[Any] = [list(frontier), limit]
    if types:
        args.append(list(types))
    rows = await tx.fetch(_LEVEL[outgoing, incoming, bool(types), not when.everything], *args, *_args(when))
    return [Step(node, other, node, other) if out else Step(node, other, other, node) for node, other, out in rows]


@timed
async def expand_or_join(
    tx: Tx,
    frontier: Sequence[str],
    others: Sequence[str],
    *,
    outgoing: bool,
    incoming: bool,
    types: Sequence[str] | None,
    limit: int,
    when: When = NOW,
) -> tuple[Step | None, list[Step]]:
    """An edge from (and/or into) the frontier whose other end is in `others` (the other side of a
    bidirectional search) if there is one, and nothing else; otherwise the frontier's level as
    `expand` reads it (at most `limit` edges; none with `limit` 0). One statement either way."""
    if not (outgoing or incoming) or not frontier:
        return None, []
    args: list[Any] = [list(frontier), limit, list(others)]
    if types:
        args.append(list(types))
    rows = await tx.fetch(_JOIN[outgoing, incoming, bool(types), not when.everything], *args, *_args(when))
    steps = [Step(node, other, node, other) if out else Step(node, other, other, node) for node, other, out, _ in rows]
    if rows and rows[0][3]:
        return steps[0], []
    return None, steps


@timed
async def reached(
    tx: Tx, nodes: Sequence[tuple[str, Step | None]], types: Sequence[str] | None, when: When = NOW
) -> dict[str, tuple[EntityRow, dict[str, Any] | None]]:
    """The live entities of a finished walk or path by graph id, each with the properties of the edge
    it was reached by (`None` for a start): the edge with those ends that holds as `when` sees it and,
    with `types`, of one of those types (the first made, where several are). One statement."""
    rows = await tx.fetch(
        f"""
        SELECT {COLUMNS}, (
            SELECT ag_catalog.agtype_out(r.properties)::text FROM {{s}}."REL" r
            WHERE r.start_id = k.a::ag_catalog.graphid AND r.end_id = k.b::ag_catalog.graphid
              AND ($4::text[] IS NULL OR {REL_TYPE} = ANY($4::text[])) AND {edge_holds("r.id", "$5", "$6")}
            ORDER BY r.id LIMIT 1
        ) AS via
        FROM unnest($1::text[], $2::text[], $3::text[]) AS k(g, a, b)
        JOIN {{s}}.entities e ON e.gid = k.g::ag_catalog.graphid AND e.deleted_at IS NULL
        """,
        [g for g, _ in nodes],
        [s.source if s else None for _, s in nodes],
        [s.target if s else None for _, s in nodes],
        list(types) if types else None,
        *when.params(),
    )
    return {(e := entity_row(r)).gid: (e, None if r["via"] is None else orjson.loads(r["via"])) for r in rows}
