"""Entities, observations and relations of one tenant.

Layout (per tenant schema, see sql/migrations): every entity is a vertex of the AGE label
``Entity`` (properties id, name, type) plus a row of ``entities`` holding its content; every
relation is an edge of the AGE label ``REL`` whose properties hold the relation itself.
Edges and vertices are inserted straight into AGE's label tables (Cypher CREATE of an edge scans
the vertex table per endpoint on AGE 1.5); one-hop reads go through Cypher; multi-hop walks go
level by level over the indexed edge table, because variable-length Cypher patterns rebuild a
whole-graph cache after any write (see docs/architecture.md).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import orjson

from app.errors import EngramError
from app.store.database import Tx

ENTITY_COLUMNS = (
    "e.id::text AS id, e.name, e.type, e.description, e.area, e.topic, e.subtopic, e.certainty,"
    " e.properties, e.version, e.created_at, e.updated_at, e.created_by, e.updated_by"
)
_REL_TYPE = "ag_catalog.agtype_access_operator(VARIADIC ARRAY[r.properties, '\"type\"'::ag_catalog.agtype])::text"


def name_key(name: str) -> str:
    """The case-insensitive lookup key of a name."""
    return name.casefold()


@dataclass(slots=True)
class EntityInput:
    """One entity of an upsert, after in-batch duplicates were merged."""

    name: str
    type: str | None
    description: str | None = None
    area: str | None = None
    topic: str | None = None
    subtopic: str | None = None
    certainty: int | None = None
    properties: dict[str, Any] | None = None
    observations: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Upserted:
    name: str
    id: str
    status: str  # created | updated | unchanged | skipped
    version: int
    observations_added: int


# --- entities -------------------------------------------------------------------------------


async def _lock_names(tx: Tx, names: Iterable[str]) -> None:
    """Serialise writers of the same names, so two upserts of one new name cannot both insert it."""
    await tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended($1 || n, 0)) FROM unnest($2::text[]) AS n ORDER BY n",
        tx.tenant.schema,
        sorted(set(names)),
    )


async def upsert_entities(tx: Tx, items: Sequence[EntityInput], on_existing: str, actor: str) -> list[Upserted]:
    await _lock_names(tx, (i.name for i in items))
    rows = await tx.fetch(
        "SELECT id::text AS id, name, version FROM {s}.entities"
        " WHERE name = ANY($1::text[]) AND deleted_at IS NULL FOR UPDATE",
        [i.name for i in items],
    )
    existing = {r["name"]: r for r in rows}
    if existing and on_existing == "error":
        raise EngramError("conflict", "entities already exist", names=sorted(existing))

    new = [i for i in items if i.name not in existing]
    ids = {i.name: str(uuid.uuid4()) for i in new}
    ids.update({name: r["id"] for name, r in existing.items()})
    if new:
        await _insert_entities(tx, new, ids, actor)
    merged = [i for i in items if i.name in existing and on_existing == "merge"]
    obs_items = [i for i in items if i.name not in existing or on_existing == "merge"]
    added = await add_observations(tx, [(ids[i.name], o) for i in obs_items for o in i.observations], actor)
    versions = await _merge_entities(tx, merged, ids, added, actor) if merged else {}

    results = []
    for i in items:
        eid = ids[i.name]
        if i.name not in existing:
            results.append(Upserted(i.name, eid, "created", 1, added.get(eid, 0)))
        elif on_existing == "skip":
            results.append(Upserted(i.name, eid, "skipped", existing[i.name]["version"], 0))
        elif eid in versions:
            results.append(Upserted(i.name, eid, "updated", versions[eid], added.get(eid, 0)))
        else:
            results.append(Upserted(i.name, eid, "unchanged", existing[i.name]["version"], 0))
    return results


async def _insert_entities(tx: Tx, items: Sequence[EntityInput], ids: dict[str, str], actor: str) -> None:
    await tx.execute(
        """
        WITH u AS (
            SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                                 $7::text[], $8::text[], $9::smallint[], $10::jsonb[])
                AS u(id, name, name_key, type, description, area, topic, subtopic, certainty, properties)
        ), v AS (
            INSERT INTO {s}."Entity" (properties)
            SELECT ag_catalog.agtype_build_map('id', u.id::text, 'name', u.name, 'type', u.type) FROM u
            RETURNING id AS gid,
                ag_catalog.agtype_access_operator(VARIADIC ARRAY[properties, '"id"'::ag_catalog.agtype])::text::uuid
                AS eid
        )
        INSERT INTO {s}.entities (id, gid, name, name_key, type, description, area, topic, subtopic, certainty,
                                  properties, created_by, updated_by)
        SELECT u.id, v.gid, u.name, u.name_key, u.type, coalesce(u.description, ''), u.area, u.topic, u.subtopic,
               u.certainty, coalesce(u.properties, '{}'), $11, $11
        FROM u JOIN v ON v.eid = u.id
        """,
        [ids[i.name] for i in items],
        [i.name for i in items],
        [name_key(i.name) for i in items],
        [i.type or "thing" for i in items],
        [i.description for i in items],
        [i.area for i in items],
        [i.topic for i in items],
        [i.subtopic for i in items],
        [i.certainty for i in items],
        [i.properties for i in items],
        actor,
    )


async def _merge_entities(
    tx: Tx, items: Sequence[EntityInput], ids: dict[str, str], added: dict[str, int], actor: str
) -> dict[str, int]:
    """Apply the given fields to existing entities; returns the new version of each one that changed."""
    rows = await tx.fetch(
        """
        WITH u AS (
            SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                                 $7::smallint[], $8::jsonb[]) AS u(id, type, description, area, topic, subtopic,
                                                                  certainty, properties)
        ), changed AS (
            SELECT e.id, e.type IS DISTINCT FROM coalesce(u.type, e.type) AS retyped
            FROM {s}.entities e JOIN u ON u.id = e.id
            WHERE e.id = ANY($9::uuid[])
               OR (u.type IS NOT NULL AND u.type IS DISTINCT FROM e.type)
               OR (u.description IS NOT NULL AND u.description IS DISTINCT FROM e.description)
               OR (u.area IS NOT NULL AND u.area IS DISTINCT FROM e.area)
               OR (u.topic IS NOT NULL AND u.topic IS DISTINCT FROM e.topic)
               OR (u.subtopic IS NOT NULL AND u.subtopic IS DISTINCT FROM e.subtopic)
               OR (u.certainty IS NOT NULL AND u.certainty IS DISTINCT FROM e.certainty)
               OR (u.properties IS NOT NULL AND e.properties || u.properties IS DISTINCT FROM e.properties)
        )
        UPDATE {s}.entities e SET
            type = coalesce(u.type, e.type),
            description = coalesce(u.description, e.description),
            area = coalesce(u.area, e.area),
            topic = coalesce(u.topic, e.topic),
            subtopic = coalesce(u.subtopic, e.subtopic),
            certainty = coalesce(u.certainty, e.certainty),
            properties = e.properties || coalesce(u.properties, '{}'),
            version = e.version + 1,
            updated_at = now(),
            updated_by = $10
        FROM u JOIN changed c ON c.id = u.id
        WHERE e.id = u.id
        RETURNING e.id::text AS id, e.version, c.retyped
        """,
        [ids[i.name] for i in items],
        [i.type for i in items],
        [i.description for i in items],
        [i.area for i in items],
        [i.topic for i in items],
        [i.subtopic for i in items],
        [i.certainty for i in items],
        [i.properties for i in items],
        [eid for eid, n in added.items() if n],
        actor,
    )
    retyped = [r["id"] for r in rows if r["retyped"]]
    if retyped:
        await _sync_vertices(tx, retyped)
    return {r["id"]: r["version"] for r in rows}


async def _sync_vertices(tx: Tx, ids: list[str]) -> None:
    """Copy name and type onto the AGE vertices of `ids`, so Cypher sees what the entities say."""
    await tx.execute(
        """
        UPDATE {s}."Entity" v
        SET properties = ag_catalog.agtype_build_map('id', e.id::text, 'name', e.name, 'type', e.type)
        FROM {s}.entities e WHERE e.gid = v.id AND e.id = ANY($1::uuid[])
        """,
        ids,
    )


async def add_observations(tx: Tx, pairs: Sequence[tuple[str, str]], actor: str) -> dict[str, int]:
    """Insert (entity id, text) pairs, skipping exact duplicates; returns how many each entity gained."""
    if not pairs:
        return {}
    rows = await tx.fetch(
        """
        INSERT INTO {s}.observations (entity_id, content, created_by)
        SELECT p.entity_id, p.content, $3 FROM unnest($1::uuid[], $2::text[]) WITH ORDINALITY
            AS p(entity_id, content, n)
        ORDER BY p.n
        ON CONFLICT (entity_id, md5(content)) DO NOTHING
        RETURNING entity_id::text
        """,
        [p[0] for p in pairs],
        [p[1] for p in pairs],
        actor,
    )
    added: dict[str, int] = {}
    for r in rows:
        added[r[0]] = added.get(r[0], 0) + 1
    return added


async def resolve(tx: Tx, refs: Sequence[str]) -> dict[str, asyncpg.Record]:
    """Map each reference (an id, or a name) to a live entity.

    An exact id or name wins; otherwise a case-insensitive name match, which must be unique.
    """
    ids = [r for r in refs if _is_uuid(r)]
    rows = await tx.fetch(
        "SELECT e.id::text AS id, e.gid::text AS gid, e.name, e.name_key, e.type FROM {s}.entities e"
        " WHERE e.deleted_at IS NULL AND (e.id = ANY($1::uuid[]) OR e.name = ANY($2::text[])"
        " OR e.name_key = ANY($3::text[]))",
        ids,
        list(refs),
        [name_key(r) for r in refs],
    )
    found: dict[str, asyncpg.Record] = {}
    for ref in refs:
        exact = [r for r in rows if r["id"] == ref or r["name"] == ref]
        loose = exact or [r for r in rows if r["name_key"] == name_key(ref)]
        if not loose:
            raise EngramError("not_found", f"no entity with id or name {ref!r}", ref=ref)
        if len(loose) > 1:
            raise EngramError(
                "ambiguous",
                f"{ref!r} matches several entities by name; use the exact name or id",
                ref=ref,
                candidates=[{"id": r["id"], "name": r["name"]} for r in loose],
            )
        found[ref] = loose[0]
    return found


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


async def entity(tx: Tx, entity_id: str) -> asyncpg.Record:
    row = await tx.fetchrow(f"SELECT {ENTITY_COLUMNS} FROM {{s}}.entities e WHERE e.id = $1", entity_id)
    if row is None:
        raise EngramError("not_found", f"no entity with id {entity_id}")
    return row


async def observations(tx: Tx, entity_ids: Sequence[str], per_entity: int) -> dict[str, tuple[list[str], int]]:
    """The first `per_entity` observations of each entity, oldest first, and each entity's total."""
    rows = await tx.fetch(
        """
        SELECT entity_id::text AS entity_id, content, total FROM (
            SELECT o.entity_id, o.content, row_number() OVER w AS n, count(*) OVER (PARTITION BY o.entity_id) AS total
            FROM {s}.observations o WHERE o.entity_id = ANY($1::uuid[])
            WINDOW w AS (PARTITION BY o.entity_id ORDER BY o.id)
        ) x WHERE n <= $2 ORDER BY entity_id, n
        """,
        list(entity_ids),
        per_entity,
    )
    out: dict[str, tuple[list[str], int]] = {eid: ([], 0) for eid in entity_ids}
    for r in rows:
        texts, _ = out[r["entity_id"]]
        texts.append(r["content"])
        out[r["entity_id"]] = (texts, r["total"])
    return out


# --- relations ------------------------------------------------------------------------------


@dataclass(slots=True)
class RelationInput:
    source: asyncpg.Record  # resolved entities
    target: asyncpg.Record
    type: str
    strength: float | None = None
    notes: str | None = None
    properties: dict[str, Any] | None = None


async def insert_relations(tx: Tx, items: Sequence[RelationInput], actor: str) -> list[dict[str, Any] | None]:
    """Create edges; returns each item's new relation, or None where (from, type, to) already existed."""
    props = []
    for i in items:
        p: dict[str, Any] = {"id": str(uuid.uuid4()), "type": i.type, "created_by": actor}
        if i.strength is not None:
            p["strength"] = i.strength
        if i.notes is not None:
            p["notes"] = i.notes
        if i.properties:
            p["properties"] = i.properties
        props.append(p)
    rows = await tx.fetch(
        """
        INSERT INTO {s}."REL" (start_id, end_id, properties)
        SELECT a::ag_catalog.graphid, b::ag_catalog.graphid,
               (p::jsonb || jsonb_build_object('created_at', now()))::text::ag_catalog.agtype
        FROM unnest($1::text[], $2::text[], $3::text[]) AS u(a, b, p)
        ON CONFLICT DO NOTHING
        RETURNING properties
        """,
        [i.source["gid"] for i in items],
        [i.target["gid"] for i in items],
        [orjson.dumps(p).decode() for p in props],
    )
    created = {(rel := orjson.loads(r[0]))["id"]: rel for r in rows}
    return [created.get(p["id"]) for p in props]


async def find_relations(tx: Tx, keys: Sequence[tuple[str, str, str]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Existing relations by (source gid, target gid, type)."""
    if not keys:
        return {}
    rows = await tx.fetch(
        f"""
        SELECT r.start_id::text AS a, r.end_id::text AS b, r.properties AS rel
        FROM unnest($1::text[], $2::text[], $3::text[]) AS k(a, b, t)
        JOIN {{s}}."REL" r ON r.start_id = k.a::ag_catalog.graphid AND r.end_id = k.b::ag_catalog.graphid
                        AND {_REL_TYPE} = k.t
        """,
        [k[0] for k in keys],
        [k[1] for k in keys],
        [k[2] for k in keys],
    )
    found = {}
    for r in rows:
        rel = orjson.loads(r["rel"])
        found[(r["a"], r["b"], rel["type"])] = rel
    return found


async def relations_of(tx: Tx, entity_id: str, limit: int) -> list[asyncpg.Record]:
    """The live relations touching one entity, by two directed Cypher matches (never an undirected one)."""
    return await tx.fetch(
        """
        SELECT c.rel, c.dir, o.id::text AS other_id, o.name AS other_name FROM (
            SELECT * FROM ag_catalog.cypher('{s}', $$
                MATCH (a:Entity {id: $id})-[r:REL]->(b:Entity) RETURN properties(r), b.id, 'out'
            $$, $1) AS (rel ag_catalog.agtype, other text, dir text)
            UNION ALL
            SELECT * FROM ag_catalog.cypher('{s}', $$
                MATCH (a:Entity {id: $id})<-[r:REL]-(b:Entity) RETURN properties(r), b.id, 'in'
            $$, $1) AS (rel ag_catalog.agtype, other text, dir text)
        ) c JOIN {s}.entities o ON o.id = c.other::uuid AND o.deleted_at IS NULL
        ORDER BY c.dir DESC, o.name
        LIMIT $2
        """,
        orjson.dumps({"id": entity_id}).decode(),
        limit,
    )


@dataclass(slots=True)
class Reached:
    gid: str
    depth: int
    edge: dict[str, Any]  # the relation that first reached this node
    source_gid: str
    target_gid: str


async def walk(
    tx: Tx, start_gid: str, depth: int, direction: str, types: Sequence[str] | None, limit: int
) -> list[Reached]:
    """Breadth-first from one vertex: each node once, at its shortest distance, at most `limit` nodes."""
    seen = {start_gid}
    frontier = [start_gid]
    reached: list[Reached] = []
    for level in range(1, depth + 1):
        if not frontier:
            break
        rows = await tx.fetch(
            f"""
            SELECT r.start_id::text AS a, r.end_id::text AS b, r.properties AS rel, true AS outgoing
            FROM {{s}}."REL" r JOIN {{s}}.entities e ON e.gid = r.end_id AND e.deleted_at IS NULL
            WHERE $2 AND r.start_id = ANY($1::text[]::ag_catalog.graphid[])
              AND ($4::text[] IS NULL OR {_REL_TYPE} = ANY($4))
            UNION ALL
            SELECT r.start_id::text, r.end_id::text, r.properties, false
            FROM {{s}}."REL" r JOIN {{s}}.entities e ON e.gid = r.start_id AND e.deleted_at IS NULL
            WHERE $3 AND r.end_id = ANY($1::text[]::ag_catalog.graphid[])
              AND ($4::text[] IS NULL OR {_REL_TYPE} = ANY($4))
            """,
            frontier,
            direction in ("out", "both"),
            direction in ("in", "both"),
            types,
        )
        frontier = []
        for r in rows:
            other = r["b"] if r["outgoing"] else r["a"]
            if other in seen:
                continue
            seen.add(other)
            frontier.append(other)
            reached.append(Reached(other, level, orjson.loads(r["rel"]), r["a"], r["b"]))
            if len(reached) >= limit:
                return reached
    return reached


async def entities_by_gid(tx: Tx, gids: Sequence[str]) -> dict[str, asyncpg.Record]:
    rows = await tx.fetch(
        f"SELECT e.gid::text AS gid, {ENTITY_COLUMNS} FROM {{s}}.entities e"
        " WHERE e.gid = ANY($1::text[]::ag_catalog.graphid[]) AND e.deleted_at IS NULL",
        list(gids),
    )
    return {r["gid"]: r for r in rows}
