"""Entities and their observations in one tenant's schema.

An entity is a row of ``entities`` (its content) plus a vertex of the AGE label ``Entity`` whose
properties ``{id, name, type}`` are kept in step, so Cypher sees what the entity says. Vertices
are inserted straight into AGE's label table: one set-based statement per batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

import asyncpg

from app.ids import UUID
from app.store.database import Tx, timed
from app.store.validity import NOW, When, holds, valid_at


@dataclass(frozen=True, slots=True)
class EntityRow:
    """A stored entity: one row of ``entities``. Every read of entities selects these columns."""

    id: str
    gid: str  # its vertex in the graph
    name: str
    name_key: str  # the case-insensitive lookup key of the name
    type: str
    description: str
    area: str | None
    topic: str | None
    subtopic: str | None
    certainty: int | None
    properties: dict[str, Any]
    version: int
    created_at: datetime
    updated_at: datetime
    created_by: str
    updated_by: str
    deleted_at: datetime | None


# The select list of an EntityRow, in field order (ids as text).
COLUMNS = ", ".join(
    f"e.{f.name}::text AS {f.name}" if f.name in ("id", "gid") else f"e.{f.name}" for f in fields(EntityRow)
)
_WIDTH = len(fields(EntityRow))


def entity_row(record: asyncpg.Record) -> EntityRow:
    """The EntityRow at the start of a record that selected `COLUMNS` first."""
    return EntityRow(*record[:_WIDTH])


def name_key(name: str) -> str:
    """The case-insensitive lookup key of a name."""
    return name.casefold()


def is_uuid(value: str) -> bool:
    """Only the canonical spelling is an id (the one Engram returns); `{…}`, `urn:uuid:…`, capitals are names."""
    return UUID.fullmatch(value) is not None


@dataclass(frozen=True, slots=True)
class Stamps:
    """An entity's record as a file gives it; what is not given takes what a write makes (version 1,
    now, the writer)."""

    version: int = 1
    created_at: datetime | None = None
    updated_at: datetime | None = None  # None: created_at
    created_by: str | None = None
    updated_by: str | None = None  # None: created_by
    deleted_at: datetime | None = None


FRESH = Stamps()


@dataclass(slots=True)
class NewEntity:
    """An entity's id and the fields a caller may set: what `insert` and `write_fields` store."""

    id: str
    name: str
    type: str
    description: str = ""
    area: str | None = None
    topic: str | None = None
    subtopic: str | None = None
    certainty: int | None = None
    properties: dict[str, Any] | None = None
    stamps: Stamps = FRESH  # `insert` only


# The fields a caller may change, in the order `write_fields` sends them.
FIELDS = tuple(f.name for f in fields(NewEntity) if f.name not in ("id", "stamps"))


@timed
async def lock_names(tx: Tx, names: Iterable[str]) -> None:
    """Serialise writers of the same names, so two upserts of one new name cannot both insert it."""
    await tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended($1 || n, 0)) FROM unnest($2::text[]) AS n ORDER BY n",
        tx.tenant.schema,
        sorted(set(names)),
    )


@timed
async def live_by_names(tx: Tx, names: Sequence[str], *, lock: bool = False) -> dict[str, EntityRow]:
    """Live entities with exactly these names, in name order."""
    rows = await tx.fetch(
        f"SELECT {COLUMNS} FROM {{s}}.entities e WHERE e.name = ANY($1::text[]) AND e.deleted_at IS NULL"
        " ORDER BY e.name" + (" FOR UPDATE" if lock else ""),
        list(names),
    )
    return {(e := entity_row(r)).name: e for r in rows}


@timed
async def by_ids(tx: Tx, ids: Sequence[str], *, lock: bool = False) -> dict[str, EntityRow]:
    """Entities by id, deleted ones included."""
    rows = await tx.fetch(
        f"SELECT {COLUMNS} FROM {{s}}.entities e WHERE e.id = ANY($1::uuid[])" + (" FOR UPDATE" if lock else ""),
        list(ids),
    )
    return {(e := entity_row(r)).id: e for r in rows}


@timed
async def live_by_ids(tx: Tx, ids: Sequence[str]) -> dict[str, EntityRow]:
    """Live entities by id."""
    rows = await tx.fetch(
        f"SELECT {COLUMNS} FROM {{s}}.entities e WHERE e.id = ANY($1::uuid[]) AND e.deleted_at IS NULL", list(ids)
    )
    return {(e := entity_row(r)).id: e for r in rows}


@timed
async def by_gids(tx: Tx, gids: Sequence[str]) -> dict[str, EntityRow]:
    """Live entities by graph id."""
    rows = await tx.fetch(
        f"SELECT {COLUMNS} FROM {{s}}.entities e"
        " WHERE e.gid = ANY($1::text[]::ag_catalog.graphid[]) AND e.deleted_at IS NULL",
        list(gids),
    )
    return {(e := entity_row(r)).gid: e for r in rows}


@dataclass(frozen=True, slots=True)
class Candidate:
    """A live entity some reference may mean, with what else it answers to."""

    row: EntityRow
    aliases: tuple[str, ...] = ()  # all its aliases
    merged_ids: tuple[str, ...] = ()  # ids, among the references, of entities merged into it


# The live entities references may mean, by parameters $1 (references spelled as ids), $2 (the
# references) and $3 (their name keys): by id, by the id of an entity merged into them, by exact
# name, by name key, by alias key. A union of indexed lookups, so each stays an index probe.
CANDIDATES = """e.deleted_at IS NULL AND e.id IN (
    SELECT c.id FROM {s}.entities c
    WHERE c.id = ANY($1::uuid[]) OR c.name = ANY($2::text[]) OR c.name_key = ANY($3::text[])
    UNION ALL SELECT a.entity_id FROM {s}.aliases a WHERE a.alias_key = ANY($3::text[])
    UNION ALL SELECT m.merged_into FROM {s}.entities m WHERE m.id = ANY($1::uuid[]) AND m.merged_into IS NOT NULL
)"""
# What a candidate answers to besides its id and name (after `COLUMNS`, as `candidate` reads them).
CANDIDATE_EXTRAS = """
    ARRAY(SELECT a.alias FROM {s}.aliases a WHERE a.entity_id = e.id ORDER BY a.alias_key) AS aliases,
    ARRAY(SELECT m.id::text FROM {s}.entities m WHERE m.merged_into = e.id AND m.id = ANY($1::uuid[])) AS merged_ids
"""


def candidate(record: asyncpg.Record) -> Candidate:
    """The Candidate of a record that selected `COLUMNS` then `CANDIDATE_EXTRAS`."""
    return Candidate(entity_row(record), tuple(record["aliases"]), tuple(record["merged_ids"]))


def candidate_args(refs: Sequence[str]) -> list[list[str]]:
    """Parameters $1-$3 of `CANDIDATES`."""
    return [[r for r in refs if is_uuid(r)], list(refs), [name_key(r) for r in refs]]


@timed
async def resolve(tx: Tx, refs: Sequence[str], *, lock: bool = False) -> list[Candidate]:
    """The candidates for references (ids or names): the live entities some reference may mean, by
    id (references spelled as ids, or the id of an entity merged into one), by exact name, by name
    case-insensitively, or by alias. Which one a reference means is the services' rule
    (app/services/refs.py)."""
    rows = await tx.fetch(
        f"SELECT {COLUMNS}, {CANDIDATE_EXTRAS} FROM {{s}}.entities e WHERE {CANDIDATES}"
        + (" FOR UPDATE OF e" if lock else ""),
        *candidate_args(refs),
    )
    return [candidate(r) for r in rows]


def field_arrays(items: Sequence[Any]) -> list[list[Any]]:
    """The entity fields every insert sends, one array per column, for `unnest`: id, name,
    name_key, type, description, area, topic, subtopic, certainty, properties."""
    return [
        [i.id for i in items],
        [i.name for i in items],
        [name_key(i.name) for i in items],
        [i.type for i in items],
        [i.description for i in items],
        [i.area for i in items],
        [i.topic for i in items],
        [i.subtopic for i in items],
        [i.certainty for i in items],
        [i.properties for i in items],
    ]


@timed
async def insert(tx: Tx, items: Sequence[NewEntity], actor: str) -> None:
    """Insert entities and their vertices, each with its stamps (a file's record, or a new one's)."""
    if not items:
        return
    await tx.execute(
        """
        WITH u AS (
            SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                                 $7::text[], $8::text[], $9::smallint[], $10::jsonb[], $11::int[],
                                 $12::timestamptz[], $13::timestamptz[], $14::text[], $15::text[], $16::timestamptz[])
                AS u(id, name, name_key, type, description, area, topic, subtopic, certainty, properties,
                     version, created_at, updated_at, created_by, updated_by, deleted_at)
        ), v AS (
            INSERT INTO {s}."Entity" (properties)
            SELECT ag_catalog.agtype_build_map('id', u.id::text, 'name', u.name, 'type', u.type) FROM u
            RETURNING id AS gid,
                ag_catalog.agtype_access_operator(VARIADIC ARRAY[properties, '"id"'::ag_catalog.agtype])
                    ::text::uuid AS eid
        )
        INSERT INTO {s}.entities (id, gid, name, name_key, type, description, area, topic, subtopic, certainty,
                                  properties, version, created_at, updated_at, created_by, updated_by, deleted_at)
        SELECT u.id, v.gid, u.name, u.name_key, u.type, u.description, u.area, u.topic, u.subtopic, u.certainty,
               coalesce(u.properties, '{}'), u.version, coalesce(u.created_at, now()),
               coalesce(u.updated_at, u.created_at, now()), coalesce(u.created_by, $17),
               coalesce(u.updated_by, u.created_by, $17), u.deleted_at
        FROM u JOIN v ON v.eid = u.id
        """,
        *field_arrays(items),
        *([getattr(i.stamps, f.name) for i in items] for f in fields(Stamps)),
        actor,
    )
    tx.growth.entities += sum(1 for i in items if i.stamps.deleted_at is None)  # quotas count live ones


@timed
async def write_fields(tx: Tx, items: Sequence[NewEntity]) -> None:
    """Store new field values of existing entities; the vertex follows name and type."""
    if not items:
        return
    await tx.execute(
        """
        WITH u AS (
            SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                                 $7::text[], $8::smallint[], $9::jsonb[], $10::text[])
                AS u(id, name, type, description, area, topic, subtopic, certainty, properties, name_key)
        ), e AS (
            UPDATE {s}.entities e SET name = u.name, name_key = u.name_key, type = u.type,
                description = u.description, area = u.area, topic = u.topic, subtopic = u.subtopic,
                certainty = u.certainty, properties = u.properties
            FROM u WHERE e.id = u.id
            RETURNING e.gid, e.id, e.name, e.type
        )
        UPDATE {s}."Entity" v
        SET properties = ag_catalog.agtype_build_map('id', e.id::text, 'name', e.name, 'type', e.type)
        FROM e WHERE v.id = e.gid
        """,
        [i.id for i in items],
        *([getattr(i, f) for i in items] for f in FIELDS),
        [name_key(i.name) for i in items],
    )


@timed
async def touch(tx: Tx, ids: Iterable[str], actor: str) -> dict[str, int]:
    """Bump the version of changed entities once; returns each one's new version."""
    rows = await tx.fetch(
        "UPDATE {s}.entities SET version = version + 1, updated_at = now(), updated_by = $2"
        " WHERE id = ANY($1::uuid[]) RETURNING id::text, version",
        list(set(ids)),
        actor,
    )
    return {r[0]: r[1] for r in rows}


@timed
async def set_deleted(tx: Tx, ids: Sequence[str], deleted: bool, actor: str) -> dict[str, int]:
    """Soft-delete or restore; returns the new versions of the entities whose state changed."""
    rows = await tx.fetch(
        """
        WITH changed AS (
            UPDATE {s}.entities SET deleted_at = CASE WHEN $2 THEN now() END, version = version + 1,
                updated_at = now(), updated_by = $3
            WHERE id = ANY($1::uuid[]) AND (deleted_at IS NULL) = $2
            RETURNING id, version
        )
        SELECT c.id::text, c.version, count(o.id) AS observations, coalesce(sum(octet_length(o.content)), 0) AS bytes
        FROM changed c LEFT JOIN {s}.observations o ON o.entity_id = c.id GROUP BY c.id, c.version
        """,
        list(ids),
        deleted,
        actor,
    )
    sign = -1 if deleted else 1  # quotas count live entities and their observations
    tx.growth.entities += sign * len(rows)
    tx.growth.observations += sign * sum(r[2] for r in rows)
    tx.growth.text_bytes += sign * sum(r[3] for r in rows)
    return {r[0]: r[1] for r in rows}


# A write that adds at least this many rows to a table looks for tables whose planner statistics it
# left far behind (`refresh_statistics`); smaller writes never do.
BULK_ROWS = 50


@timed
async def refresh_statistics(tx: Tx) -> list[str]:
    """Fresh planner statistics for the tenant's tables that have more than doubled in size since
    they were last analyzed (`engram.analyze_outgrown_tables`, migration 0010), so that the reads
    right after an import are not planned for the nearly empty tables autovacuum last saw. Cheap
    when nothing outgrew its statistics (a look at the tables' sizes); bounded when something did
    (ANALYZE reads a sample, and a table is analyzed again only once it has doubled again).
    Returns the tables analyzed."""
    return list(await tx.fetchval("SELECT engram.analyze_outgrown_tables()"))


@timed
async def live_names_taken(tx: Tx, names: Sequence[str]) -> list[str]:
    rows = await tx.fetch(
        "SELECT name FROM {s}.entities WHERE name = ANY($1::text[]) AND deleted_at IS NULL", list(names)
    )
    return [r[0] for r in rows]


# --- observations ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where a written fact came from and when it holds: its writer's `source` (free text) and its
    validity interval (None: open)."""

    source: str | None = None
    valid_from: datetime | None = None
    valid_until: datetime | None = None


@dataclass(frozen=True, slots=True)
class NewFact:
    """An observation to write: its entity, text and provenance, and (from a file) its record."""

    entity_id: str
    text: str
    provenance: Provenance = field(default_factory=Provenance)
    created_at: datetime | None = None  # None: now
    created_by: str | None = None  # None: the writer
    live: bool = True  # its entity is live (what quotas count)


@timed
async def add_observations(
    tx: Tx, facts: Sequence[NewFact], actor: str, *, reopen: bool = True
) -> dict[str, list[str]]:
    """Insert facts in order, skipping exact duplicates of texts the entity holds (the first of a
    repeat wins). With `reopen`, a text whose stored fact has ended (valid_until passed) is written
    again: it holds anew, with the new provenance. Returns what each entity gained."""
    if not facts:
        return {}
    first: dict[tuple[str, str], NewFact] = {}
    for f in facts:
        first.setdefault((f.entity_id, f.text), f)
    kept = list(first.values())
    rows = await tx.fetch(
        """
        INSERT INTO {s}.observations AS o (entity_id, content, created_at, created_by, source, valid_from, valid_until)
        SELECT p.entity_id, p.content, coalesce(p.created_at, now()), coalesce(p.created_by, $3), p.source,
               p.valid_from, p.valid_until
        FROM unnest($1::uuid[], $2::text[], $4::text[], $5::timestamptz[], $6::timestamptz[], $7::timestamptz[],
                    $8::text[]) WITH ORDINALITY
            AS p(entity_id, content, source, valid_from, valid_until, created_at, created_by, n)
        ORDER BY p.n
        ON CONFLICT (entity_id, md5(content)) DO UPDATE
        SET source = excluded.source, valid_from = excluded.valid_from, valid_until = excluded.valid_until,
            created_at = excluded.created_at, created_by = excluded.created_by
        WHERE $9 AND o.valid_until IS NOT NULL AND o.valid_until <= now()
        RETURNING entity_id::text, content, xmax = 0 AS fresh
        """,
        [f.entity_id for f in kept],
        [f.text for f in kept],
        actor,
        [f.provenance.source for f in kept],
        [f.provenance.valid_from for f in kept],
        [f.provenance.valid_until for f in kept],
        [f.created_at for f in kept],
        [f.created_by for f in kept],
        reopen,
    )
    dead = {f.entity_id for f in kept if not f.live}
    _count(tx, [r for r in rows if r["fresh"] and r[0] not in dead], 1)  # a fact written again was counted already
    return _group(rows)


@timed
async def remove_observations(tx: Tx, pairs: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    """Delete exact (entity id, text) pairs; returns what each entity lost."""
    if not pairs:
        return {}
    rows = await tx.fetch(
        """
        DELETE FROM {s}.observations o USING unnest($1::uuid[], $2::text[]) AS p(entity_id, content)
        WHERE o.entity_id = p.entity_id AND md5(o.content) = md5(p.content) AND o.content = p.content
        RETURNING o.entity_id::text, o.content
        """,
        [p[0] for p in pairs],
        [p[1] for p in pairs],
    )
    _count(tx, rows, -1)
    return _group(rows)


@dataclass(frozen=True, slots=True)
class Ended:
    """Facts an invalidation matched: per entity, the texts it ended; and those it could not end
    because they begin at or after the given end (nothing is ended then)."""

    ended: dict[str, list[str]]
    too_early: list[tuple[str, str]]


@timed
async def end_observations(tx: Tx, pairs: Sequence[tuple[str, str]], at: datetime | None) -> Ended:
    """End the (entity id, text) facts that hold past `at` (None: now): their valid_until becomes
    `at`. Facts already ended by then, and texts not stored, are left alone. If one of them begins
    at or after `at`, nothing changes and those are returned in `too_early`."""
    if not pairs:
        return Ended({}, [])
    rows = await tx.fetch(
        """
        WITH m AS MATERIALIZED (
            SELECT o.id, o.entity_id, o.content,
                   coalesce(o.valid_from >= coalesce($3::timestamptz, now()), false) AS early
            FROM {s}.observations o
            JOIN (SELECT DISTINCT * FROM unnest($1::uuid[], $2::text[]) AS p(entity_id, content)) p
              ON o.entity_id = p.entity_id AND md5(o.content) = md5(p.content) AND o.content = p.content
            WHERE o.valid_until IS NULL OR o.valid_until > coalesce($3::timestamptz, now())
        ), u AS (
            UPDATE {s}.observations o SET valid_until = coalesce($3::timestamptz, now())
            FROM m WHERE o.id = m.id AND NOT EXISTS (SELECT 1 FROM m WHERE m.early)
        )
        SELECT m.entity_id::text, m.content, m.early FROM m ORDER BY m.id
        """,
        [p[0] for p in pairs],
        [p[1] for p in pairs],
        at,
    )
    early = [(r[0], r[1]) for r in rows if r[2]]
    return Ended({} if early else _group(rows), early)


def _count(tx: Tx, rows: Sequence[asyncpg.Record], sign: int) -> None:
    """Observations added (1) or removed (-1) count against the tenant's quotas."""
    tx.growth.observations += sign * len(rows)
    tx.growth.text_bytes += sign * sum(len(r[1].encode()) for r in rows)


def _group(rows: Iterable[asyncpg.Record]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in rows:
        out.setdefault(r[0], []).append(r[1])
    return out


@dataclass(frozen=True, slots=True)
class Observations:
    """The first observations of one entity, oldest first, and how many it has."""

    texts: list[str]
    total: int


@timed
async def observations(tx: Tx, entity_ids: Sequence[str], per_entity: int, when: When = NOW) -> dict[str, Observations]:
    """The first `per_entity` observations of each entity that count at `when`, oldest first, and how
    many count."""
    rows = await tx.fetch(
        f"""
        SELECT entity_id::text, content, total FROM (
            SELECT o.entity_id, o.content, row_number() OVER w AS n,
                   count(*) OVER (PARTITION BY o.entity_id) AS total
            FROM {{s}}.observations o WHERE o.entity_id = ANY($1::uuid[]) AND {holds("o", "$3", "$4")}
            WINDOW w AS (PARTITION BY o.entity_id ORDER BY o.id)
        ) x WHERE n <= $2 ORDER BY entity_id, n
        """,
        list(entity_ids),
        per_entity,
        *when.params(),
    )
    texts: dict[str, list[str]] = {eid: [] for eid in entity_ids}
    totals: dict[str, int] = {}
    for eid, content, total in rows:
        texts[eid].append(content)
        totals[eid] = total
    if per_entity == 0:  # no rows came back: count separately
        for eid, total in await tx.fetch(
            "SELECT entity_id::text, count(*) FROM {s}.observations o WHERE entity_id = ANY($1::uuid[])"
            f" AND {holds('o', '$2', '$3')} GROUP BY entity_id",
            list(entity_ids),
            *when.params(),
        ):
            totals[eid] = total
    return {eid: Observations(texts[eid], totals.get(eid, 0)) for eid in entity_ids}


# --- listing --------------------------------------------------------------------------------


def like_pattern(text: str) -> str:
    """A LIKE pattern matching `text` anywhere, with its own % _ and \\ taken literally."""
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


@timed
async def page_by_name(tx: Tx, limit: int, after: str | None) -> list[EntityRow]:
    rows = await tx.fetch(
        f"SELECT {COLUMNS} FROM {{s}}.entities e WHERE e.deleted_at IS NULL AND ($1::text IS NULL OR e.name > $1)"
        " ORDER BY e.name LIMIT $2",
        after,
        limit,
    )
    return [entity_row(r) for r in rows]


@timed
async def count_live(tx: Tx) -> int:
    return await tx.fetchval("SELECT count(*) FROM {s}.entities WHERE deleted_at IS NULL")


@timed
async def matching_text(tx: Tx, text: str, limit: int) -> list[EntityRow]:
    """Live entities whose name, type or an observation contains `text`, case-insensitively.

    The ids are gathered from the trigram indexes of names, types and observations, one branch
    each, so a selective text reads the few matches instead of testing every entity."""
    rows = await tx.fetch(
        f"""
        SELECT {COLUMNS} FROM {{s}}.entities e
        WHERE e.deleted_at IS NULL AND e.id IN (
            SELECT id FROM {{s}}.entities WHERE name ILIKE $1 OR type ILIKE $1
            UNION ALL
            SELECT o.entity_id FROM {{s}}.observations o WHERE o.content ILIKE $1 AND {valid_at("o", "NULL")})
        ORDER BY e.name LIMIT $2
        """,
        like_pattern(text),
        limit,
    )
    return [entity_row(r) for r in rows]
