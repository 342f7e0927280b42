"""Relations: edges of the AGE label ``REL`` whose properties hold the relation itself.

Edges are inserted straight into the label table (Cypher CREATE of an edge scans the vertex table
per endpoint on AGE 1.5); a unique index on (start, end, type) keeps (from, type, to) unique.
A relation is visible only while both of its ends are live entities.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import asyncpg
import orjson

from app.store import cypher
from app.store.database import Tx, timed
from app.store.edges import REL_ID, REL_TYPE
from app.store.entities import (
    CANDIDATE_EXTRAS,
    CANDIDATES,
    COLUMNS,
    Candidate,
    Provenance,
    candidate,
    candidate_args,
)
from app.store.index import Model, vector_value
from app.store.validity import NOW, When, edge_holds, holds

_SELECT = """
    SELECT r.start_id::text AS a, r.end_id::text AS b, r.properties AS rel,
           se.id::text AS source_id, se.name AS source, te.id::text AS target_id, te.name AS target
    FROM {s}."REL" r
    JOIN {s}.entities se ON se.gid = r.start_id AND se.deleted_at IS NULL
    JOIN {s}.entities te ON te.gid = r.end_id AND te.deleted_at IS NULL
"""


@dataclass(frozen=True, slots=True)
class Relation:
    """A stored relation with the ids and names of its ends."""

    props: dict[str, Any]  # id, type, strength?, notes?, properties?, created_at, created_by
    source_id: str
    source: str
    target_id: str
    target: str
    source_gid: str
    target_gid: str

    @property
    def id(self) -> str:
        return self.props["id"]

    @property
    def type(self) -> str:
        return self.props["type"]

    @property
    def key(self) -> tuple[str, str, str]:
        return self.source_gid, self.target_gid, self.type


def _relation(row: asyncpg.Record) -> Relation:
    return Relation(
        orjson.loads(row["rel"]), row["source_id"], row["source"], row["target_id"], row["target"], row["a"], row["b"]
    )


class End(Protocol):
    """A relation's end as a write needs it (a stored entity, or what an import looked up)."""

    @property
    def id(self) -> str: ...
    @property
    def gid(self) -> str: ...  # its vertex
    @property
    def name(self) -> str: ...


@dataclass(frozen=True, slots=True)
class NewRelation:
    source: End
    target: End
    type: str
    strength: float | None = None
    notes: str | None = None
    properties: dict[str, Any] | None = None
    provenance: Provenance = field(default_factory=Provenance)
    id: str | None = None  # a file's id; None: a new one
    created_by: str | None = None  # None: the writer
    # A file's stamps as it wrote them (created_at, valid_from, valid_until: JSON text of times),
    # kept over the ones a write makes so that an export gives them back unchanged.
    written: dict[str, str] = field(default_factory=dict)


# The write time and interval of a relation written now, as its properties hold them (JSON text of
# timestamptz, as PostgreSQL writes it): parameters $4 (valid_from) and $5 (valid_until) per row.
_STAMPS = "jsonb_strip_nulls(jsonb_build_object('created_at', now(), 'valid_from', u.vf, 'valid_until', u.vu))"


# The items of `insert` as rows: ends' graph ids, properties (JSON text), interval, and their order.
_ITEMS = (
    "unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::timestamptz[]) WITH ORDINALITY"
    " AS u(a, b, p, vf, vu, n)"
)


def _props(item: NewRelation, actor: str) -> dict[str, Any]:
    p: dict[str, Any] = {"id": item.id or str(uuid.uuid4()), "type": item.type, "created_by": item.created_by or actor}
    optional = (("strength", item.strength), ("notes", item.notes), ("properties", item.properties or None))
    p.update((k, v) for k, v in optional if v is not None)
    if item.provenance.source is not None:
        p["source"] = item.provenance.source
    return p | item.written


@timed
async def insert(tx: Tx, items: Sequence[NewRelation], actor: str, *, reopen: bool = True) -> list[str | None]:
    """Create edges; returns each item's new relation id, or None where its id or (from, type, to)
    already existed.

    An edge with an interval is listed in ``rel_intervals`` too. With `reopen`, an existing edge
    whose interval has ended (valid_until passed) is written again instead: it holds anew with this
    write's fields, source, interval, author and time, and its id is returned as for a new one."""
    if not items:
        return []
    props = [_props(i, actor) for i in items]
    args = (
        [i.source.gid for i in items],
        [i.target.gid for i in items],
        [orjson.dumps(p).decode() for p in props],
        [i.provenance.valid_from for i in items],
        [i.provenance.valid_until for i in items],
    )
    rows = await tx.fetch(
        f"""
        WITH u AS MATERIALIZED (SELECT * FROM {_ITEMS}), ins AS (
            INSERT INTO {{s}}."REL" (start_id, end_id, properties)
            SELECT a::ag_catalog.graphid, b::ag_catalog.graphid, ({_STAMPS} || p::jsonb)::text::ag_catalog.agtype
            FROM u ORDER BY u.n
            ON CONFLICT DO NOTHING
            RETURNING id, start_id, end_id, {REL_ID.replace("r.properties", "properties")} AS rid
        ), iv AS (
            INSERT INTO {{s}}.rel_intervals (edge, start_id, end_id, valid_from, valid_until)
            SELECT ins.id, ins.start_id, ins.end_id, u.vf, u.vu FROM ins JOIN u ON u.p::jsonb->>'id' = ins.rid
            WHERE u.vf IS NOT NULL OR u.vu IS NOT NULL
        )
        SELECT rid FROM ins
        """,
        *args,
    )
    created = {r[0] for r in rows}
    reopened = await _reopen(tx, args, created) if reopen else {}
    return [p["id"] if p["id"] in created else reopened.get(p["id"]) for p in props]


async def _reopen(tx: Tx, args: tuple[list[Any], ...], created: set[str]) -> dict[str, str]:
    """Edges that were there already and whose interval has ended hold again, as written now; by
    the id the item would have had, the edge's own id."""
    rows = await tx.fetch(
        f"""
        WITH u AS MATERIALIZED (SELECT * FROM {_ITEMS}), m AS MATERIALIZED (
            SELECT DISTINCT ON (r.id) r.id, u.p, u.vf, u.vu FROM u
            JOIN {{s}}."REL" r ON r.start_id = u.a::ag_catalog.graphid AND r.end_id = u.b::ag_catalog.graphid
                 AND {REL_TYPE} = u.p::jsonb->>'type'
            JOIN {{s}}.rel_intervals ri ON ri.edge = r.id AND ri.valid_until <= now()
            WHERE u.p::jsonb->>'id' <> ALL($6::text[])
            ORDER BY r.id, u.n
        ), kept AS (
            UPDATE {{s}}.rel_intervals ri SET valid_from = m.vf, valid_until = m.vu
            FROM m WHERE ri.edge = m.id AND (m.vf IS NOT NULL OR m.vu IS NOT NULL)
        ), dropped AS (
            DELETE FROM {{s}}.rel_intervals ri USING m WHERE ri.edge = m.id AND m.vf IS NULL AND m.vu IS NULL
        )
        UPDATE {{s}}."REL" r
        SET properties = ((ag_catalog.agtype_out(r.properties)::text::jsonb - 'valid_from' - 'valid_until')
                          || (m.p::jsonb - 'id') || {_STAMPS.replace("u.", "m.")})::text::ag_catalog.agtype
        FROM m WHERE r.id = m.id
        RETURNING {REL_ID}, m.p::jsonb->>'id'
        """,
        *args,
        list(created),
    )
    return {r[1]: r[0] for r in rows}


@timed
async def by_keys(tx: Tx, keys: Sequence[tuple[str, str, str]]) -> dict[tuple[str, str, str], Relation]:
    """Live relations by (source gid, target gid, type)."""
    if not keys:
        return {}
    rows = await tx.fetch(
        _SELECT
        + f"""
        JOIN unnest($1::text[], $2::text[], $3::text[]) AS k(a, b, t)
          ON r.start_id = k.a::ag_catalog.graphid AND r.end_id = k.b::ag_catalog.graphid AND {REL_TYPE} = k.t
        """,
        [k[0] for k in keys],
        [k[1] for k in keys],
        [k[2] for k in keys],
    )
    return {(rel := _relation(r)).key: rel for r in rows}


@timed
async def by_ids(tx: Tx, ids: Sequence[str]) -> list[Relation]:
    rows = await tx.fetch(_SELECT + f" WHERE {REL_ID} = ANY($1::text[])", list(ids))
    return [_relation(r) for r in rows]


@timed
async def delete(tx: Tx, ids: Sequence[str]) -> None:
    await tx.execute(
        f"""
        WITH gone AS (DELETE FROM {{s}}."REL" r WHERE {REL_ID} = ANY($1::text[]) RETURNING r.id)
        DELETE FROM {{s}}.rel_intervals ri USING gone WHERE ri.edge = gone.id
        """,
        list(ids),
    )


@dataclass(frozen=True, slots=True)
class EndedRelations:
    """Relations an invalidation ended (their ids), or, when some could not be ended because they
    begin at or after the given end, those (and nothing was ended)."""

    ended: list[str]
    too_early: list[str]


@timed
async def end(tx: Tx, ids: Sequence[str], at: datetime | None) -> EndedRelations:
    """End the relations that hold past `at` (None: now): their valid_until becomes `at`, in their
    properties and in ``rel_intervals``. Relations ended by then are left alone."""
    moment = "coalesce($2::timestamptz, now())"
    rows = await tx.fetch(
        f"""
        WITH m AS MATERIALIZED (
            SELECT r.id, r.start_id, r.end_id, {REL_ID} AS rid, ri.valid_from,
                   coalesce(ri.valid_from >= {moment}, false) AS early
            FROM {{s}}."REL" r LEFT JOIN {{s}}.rel_intervals ri ON ri.edge = r.id
            WHERE {REL_ID} = ANY($1::text[]) AND (ri.valid_until IS NULL OR ri.valid_until > {moment})
        ), iv AS (
            INSERT INTO {{s}}.rel_intervals (edge, start_id, end_id, valid_from, valid_until)
            SELECT m.id, m.start_id, m.end_id, m.valid_from, {moment} FROM m
            WHERE NOT EXISTS (SELECT 1 FROM m WHERE m.early)
            ON CONFLICT (edge) DO UPDATE SET valid_until = excluded.valid_until
        ), u AS (
            UPDATE {{s}}."REL" r
            SET properties = (ag_catalog.agtype_out(r.properties)::text::jsonb
                              || jsonb_build_object('valid_until', {moment}))::text::ag_catalog.agtype
            FROM m WHERE r.id = m.id AND NOT EXISTS (SELECT 1 FROM m WHERE m.early)
        )
        SELECT rid, early FROM m ORDER BY m.id
        """,
        list(ids),
        at,
    )
    early = [r[0] for r in rows if r[1]]
    return EndedRelations([] if early else [r[0] for r in rows], early)


@dataclass(frozen=True, slots=True)
class Fact:
    """An observation with its record: who wrote it, from what source, when, and when it holds."""

    text: str
    source: str | None
    created_by: str
    created_at: datetime
    valid_from: datetime | None
    valid_until: datetime | None
    pinned_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Detail:
    """An entity (with its aliases) with its first observations (oldest first), how many it has, and
    its live relations."""

    entity: Candidate
    observations: list[Fact]
    observations_total: int
    relations: list[Relation] | None


# A relation as one composite value, read where its entity is read: (properties, source id, source name,
# target id, target name, source gid, target gid).
_RELATION_ROW = """ROW(ag_catalog.agtype_out(r.properties)::text, se.id::text, se.name, te.id::text, te.name,
                        r.start_id::text, r.end_id::text)"""


@dataclass(frozen=True, slots=True)
class ObservationOrder:
    """Which observations an entity read shows first: the oldest (the default), the newest, or those
    nearest to a query: by its vector under `model` (cosine), else by its words."""

    newest: bool = False
    query: str | None = None
    vector: Sequence[float] | None = None
    model: Model | None = None

    def clause(self) -> str:
        """SQL ORDER BY of observations `o`; its one parameter, if any, is $8 (`params`)."""
        by_id = "o.id DESC" if self.newest else "o.id"
        if self.query is None:
            return by_id
        if self.vector is not None and self.model is not None:
            cast = f"::vector({int(self.model.dimensions)})"
            near = (
                f"(SELECT d.embedding{cast} <=> $8{cast} FROM {{s}}.search_docs d"
                f" WHERE d.observation_id = o.id AND d.model_id = {int(self.model.id)}) NULLS LAST"
            )
        else:
            near = (
                "(SELECT ts_rank_cd(d.tsv, q.q) FROM {s}.search_docs d,"
                " (SELECT coalesce(string_agg(quote_literal(w), ' | '), '')::tsquery AS q"
                " FROM unnest(tsvector_to_array(to_tsvector('english', $8::text))) AS w) q"
                " WHERE d.observation_id = o.id) DESC NULLS LAST"
            )
        return f"{near}, o.id DESC"

    def params(self) -> tuple[Any, ...]:
        """The query's vector, or its text, or nothing (as `clause` reads them)."""
        if self.query is None:
            return ()
        if self.vector is not None and self.model is not None:
            return (vector_value(self.vector),)
        return (self.query,)


OLDEST_FIRST = ObservationOrder()


@timed
async def detail(
    tx: Tx,
    ref: str,
    *,
    observations: int,
    relations: int | None,
    when: When = NOW,
    order: ObservationOrder = OLDEST_FIRST,
) -> list[Detail]:
    """Every candidate for `ref` (as `entities.resolve` finds them), each with its first `observations`
    observations in `order` and their total and, unless `relations` is None, its first `relations`
    live relations in both directions (outgoing first, then by the names of the ends): one statement.
    Observations and relations count only as `when` sees them.

    Which candidate the reference means is the services' rule (app/services/refs.py). The relations
    are read from the edge table by the entity's graph id, one indexed scan per direction.
    """
    rows = await tx.fetch(
        f"""
        SELECT {COLUMNS}, {CANDIDATE_EXTRAS},
            ARRAY(SELECT ROW(o.content, o.source, o.created_by, o.created_at, o.valid_from, o.valid_until, o.pinned_at)
                  FROM {{s}}.observations o WHERE o.entity_id = e.id AND {holds("o", "$6", "$7")}
                  ORDER BY {order.clause()} LIMIT $4) AS observations,
            (SELECT count(*) FROM {{s}}.observations o WHERE o.entity_id = e.id AND {holds("o", "$6", "$7")})
                AS observations_total,
            CASE WHEN $5::int IS NOT NULL THEN ARRAY(
                SELECT {_RELATION_ROW}
                FROM (
                    SELECT r.id, r.start_id, r.end_id, r.properties FROM {{s}}."REL" r WHERE r.start_id = e.gid
                    UNION ALL
                    SELECT r.id, r.start_id, r.end_id, r.properties FROM {{s}}."REL" r WHERE r.end_id = e.gid
                ) r
                JOIN {{s}}.entities se ON se.gid = r.start_id AND se.deleted_at IS NULL
                JOIN {{s}}.entities te ON te.gid = r.end_id AND te.deleted_at IS NULL
                WHERE {edge_holds("r.id", "$6", "$7")}
                ORDER BY se.id = e.id DESC, se.name, te.name
                LIMIT $5
            ) END AS relations
        FROM {{s}}.entities e
        WHERE {CANDIDATES}
        """,
        *candidate_args([ref]),
        observations,
        relations,
        *when.params(),
        *order.params(),
    )
    return [
        Detail(
            candidate(r),
            [Fact(*o) for o in r["observations"]],
            r["observations_total"],
            None if r["relations"] is None else [Relation(orjson.loads(x[0]), *x[1:]) for x in r["relations"]],
        )
        for r in rows
    ]


@timed
async def touching(tx: Tx, entity_id: str, limit: int) -> list[Relation]:
    """Live relations of one entity, by two directed Cypher matches (never an undirected one), in
    `detail`'s order. `get_entity` reads them with `detail` (by graph id, in the same statement as
    the entity); this form stays as the Cypher reference the tests hold `detail` to. The Cypher is
    the emitter's (app/store/cypher/), from a tree."""
    leaving, entering = cypher.edges_of(entity_id, outgoing=True), cypher.edges_of(entity_id, outgoing=False)
    rows = await tx.fetch(
        _SELECT
        + f"""
        JOIN (
            SELECT * FROM ag_catalog.cypher('{{s}}', $$ {leaving.text} $$, $1) AS (edge ag_catalog.graphid)
            UNION ALL
            SELECT * FROM ag_catalog.cypher('{{s}}', $$ {entering.text} $$, $1) AS (edge ag_catalog.graphid)
        ) c ON c.edge = r.id
        ORDER BY se.id::text = $2 DESC, se.name, te.name
        LIMIT $3
        """,
        orjson.dumps(leaving.parameters).decode(),
        entity_id,
        limit,
    )
    return [_relation(r) for r in rows]


@timed
async def among(tx: Tx, gids: Sequence[str], *, either_end: bool, limit: int, when: When = NOW) -> list[Relation]:
    """Live relations with both ends (or, with `either_end`, at least one end) among `gids`, that
    count as `when` sees them."""
    join = "OR" if either_end else "AND"
    # Materialized: the edges of these ends first. Left to itself, right after an import (no
    # planner statistics yet) the planner joined entities x entities first: 0.9 s at 1k entities.
    rows = await tx.fetch(
        f"""
        WITH r AS MATERIALIZED (
            SELECT * FROM {{s}}."REL" r
            WHERE (r.start_id = ANY($1::text[]::ag_catalog.graphid[])
                   {join} r.end_id = ANY($1::text[]::ag_catalog.graphid[]))
              AND {edge_holds("r.id", "$3", "$4")}
        )
        """
        + _SELECT.replace('FROM {s}."REL" r', "FROM r")
        + "ORDER BY se.name, te.name LIMIT $2",
        list(gids),
        limit,
        *when.params(),
    )
    return [_relation(r) for r in rows]


@timed
async def from_source_names(
    tx: Tx, after: str | None, last: str, after_key: tuple[str, str, str] | None, limit: int
) -> list[tuple[Relation, tuple[str, str, str]]]:
    """Live relations that hold now whose source's name is in (after, last] (a read_graph page owns its
    entities' outgoing edges), by source name, target name and edge id; from just past `after_key`, at most
    `limit`. Each comes with its key, to continue from."""
    rows = await tx.fetch(
        _SELECT.replace("SELECT ", "SELECT r.id::text AS rid, ", 1)
        + """
        WHERE ($1::text IS NULL OR se.name > $1) AND se.name <= $2
          AND ($3::text IS NULL OR (se.name, te.name, r.id) > ($3, $4, $5::text::ag_catalog.graphid))
          AND VALID_NOW
        ORDER BY se.name, te.name, r.id LIMIT $6
        """.replace("VALID_NOW", edge_holds("r.id", "NULL", "false")),
        after,
        last,
        *(after_key or (None, None, None)),
        limit,
    )
    return [(_relation(r), (r["source"], r["target"], r["rid"])) for r in rows]
