"""Export and import of a tenant's memory: keyset pages read from one snapshot, and set-based
writes that keep what a file says (ids, versions, authors, timestamps).

Imports also keep their place here: one row per imported file in ``imports``, moved forward by
each batch in that batch's own transaction (docs/import-export.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from app.store.database import Database, Tenant, Tx, timed
from app.store.entities import COLUMNS, EntityRow
from app.store.history import COLUMNS as HISTORY_COLUMNS
from app.store.history import Change
from app.store.validity import edge_holds, valid_at

_ENTITY_WIDTH = len(EntityRow.__dataclass_fields__)


def snapshot(db: Database, tenant: Tenant, viewer: str) -> AbstractAsyncContextManager[Tx]:
    """A read-only transaction in the tenant's context that sees one snapshot from its first query
    to its end (REPEATABLE READ), so every page of an export belongs to the same moment; `viewer`'s
    private memory and the shared memory (database.py)."""
    return db.transaction(tenant, readonly=True, snapshot=True, viewer=viewer)


# --- export -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredObservation:
    text: str
    created_at: datetime
    created_by: str
    source: str | None = None
    valid_from: datetime | None = None
    valid_until: datetime | None = None


@dataclass(frozen=True, slots=True)
class ExportedEntity:
    row: EntityRow
    observations: list[StoredObservation]
    aliases: list[str]
    merged_into: str | None  # the entity it was merged into (docs/tools.md, "Merges and aliases")


@timed
async def entity_page(
    tx: Tx, after: str | None, limit: int, *, deleted: bool, by_name: bool = False, valid_only: bool = False
) -> list[ExportedEntity]:
    """Entities after `after` in id order (or, live ones only, in name order), each with all its
    observations (oldest first; with `valid_only`, those that hold now) and aliases; deleted ones
    too with `deleted`."""
    key = "e.name" if by_name else "e.id"
    if by_name and deleted:
        raise ValueError("names are unique among live entities only")
    rows = await tx.fetch(
        f"""
        SELECT {COLUMNS}, o.texts, o.ats, o.bys, o.sources, o.froms, o.untils,
            e.merged_into::text AS merged_into,
            ARRAY(SELECT a.alias FROM {{s}}.aliases a WHERE a.entity_id = e.id ORDER BY a.alias_key) AS aliases
        FROM {{s}}.entities e
        CROSS JOIN LATERAL (
            SELECT array_agg(content ORDER BY id) AS texts, array_agg(created_at ORDER BY id) AS ats,
                   array_agg(created_by ORDER BY id) AS bys, array_agg(source ORDER BY id) AS sources,
                   array_agg(valid_from ORDER BY id) AS froms, array_agg(valid_until ORDER BY id) AS untils
            FROM {{s}}.observations o WHERE entity_id = e.id AND (NOT $4 OR {valid_at("o", "NULL")})
        ) o
        WHERE ($1::text IS NULL OR {key} > $1::text::{"text" if by_name else "uuid"}) AND ($3 OR e.deleted_at IS NULL)
        ORDER BY {key} LIMIT $2
        """,
        after,
        limit,
        deleted,
        valid_only,
    )
    out = []
    for r in rows:
        columns = [r[k] or [] for k in ("texts", "ats", "bys", "sources", "froms", "untils")]
        out.append(
            ExportedEntity(
                EntityRow(*r[:_ENTITY_WIDTH]),
                [StoredObservation(*o) for o in zip(*columns, strict=True)],
                list(r["aliases"]),
                r["merged_into"],
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class ExportedRelation:
    """A stored relation with both ends' ids and names; `gid` is its place in the keyset."""

    gid: int
    props: dict[str, Any]
    source_id: str
    source: str
    target_id: str
    target: str


@timed
async def relation_page(
    tx: Tx, after: int | None, limit: int, *, deleted: bool, valid_only: bool = False
) -> list[ExportedRelation]:
    """Relations in the order they were written (edge id) after `after`; those with a deleted end
    only with `deleted`; with `valid_only`, those that hold now."""
    rows = await tx.fetch(
        f"""
        SELECT r.id::text::bigint AS gid, r.properties AS props, se.id::text, se.name, te.id::text, te.name
        FROM {{s}}."REL" r
        JOIN {{s}}.entities se ON se.gid = r.start_id
        JOIN {{s}}.entities te ON te.gid = r.end_id
        WHERE ($1::bigint IS NULL OR r.id > $1::bigint::text::ag_catalog.graphid)
          AND ($3 OR (se.deleted_at IS NULL AND te.deleted_at IS NULL)) AND {edge_holds("r.id", "NULL", "NOT $4")}
        ORDER BY r.id LIMIT $2
        """,
        after,
        limit,
        deleted,
        valid_only,
    )
    return [ExportedRelation(r[0], orjson.loads(r[1]), r[2], r[3], r[4], r[5]) for r in rows]


@timed
async def history_page(tx: Tx, after: int | None, limit: int, *, deleted: bool) -> list[Change]:
    """History rows oldest first after `after`; those of deleted entities only with `deleted`."""
    rows = await tx.fetch(
        f"""
        SELECT {HISTORY_COLUMNS} FROM {{s}}.history h
        WHERE ($1::bigint IS NULL OR h.id > $1) AND ($3 OR EXISTS (
            SELECT 1 FROM {{s}}.entities e WHERE e.id = h.entity_id AND e.deleted_at IS NULL))
        ORDER BY h.id LIMIT $2
        """,
        after,
        limit,
        deleted,
    )
    return [Change(*r) for r in rows]


# --- import -----------------------------------------------------------------------------------


@timed
async def insert_history(tx: Tx, items: Sequence[Change]) -> int:
    """Add history rows as given, except those the tenant holds already (same entity, time, action,
    actor, relation and changes), and those of entities it does not hold. Returns how many were added."""
    if not items:
        return 0
    done = await tx.execute(
        """
        INSERT INTO {s}.history (entity_id, other_id, relation_id, action, changes, actor, at)
        SELECT h.entity_id, h.other_id, h.relation_id, h.action, h.changes, h.actor, h.at
        FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::jsonb[], $6::text[], $7::timestamptz[])
            WITH ORDINALITY AS h(entity_id, other_id, relation_id, action, changes, actor, at, n)
        WHERE EXISTS (SELECT 1 FROM {s}.entities e WHERE e.id = h.entity_id)
          AND NOT EXISTS (SELECT 1 FROM {s}.history o
                          WHERE o.entity_id = h.entity_id AND o.at = h.at AND o.action = h.action
                            AND o.actor = h.actor AND o.relation_id IS NOT DISTINCT FROM h.relation_id
                            AND o.changes = h.changes)
        ORDER BY h.n
        """,
        [i.entity_id for i in items],
        [i.other_id for i in items],
        [i.relation_id for i in items],
        [i.action for i in items],
        [i.changes for i in items],
        [i.actor for i in items],
        [i.at for i in items],
    )
    return int(done.split()[-1])


@timed
async def bulk_session(tx: Tx) -> None:
    """Settings for an import batch's transaction: its commit does not wait for the write-ahead log
    to reach the disk (a crash may lose the last batches, never half of one: their checkpoint goes
    with them, and the import redoes them), and search-index insertions queue up longer before they
    are merged (fewer, larger merges)."""
    await tx.set_local({"synchronous_commit": "off", "gin_pending_list_limit": 65536})


@dataclass(frozen=True, slots=True)
class End:
    """An entity as a relation's end: what an import needs of it."""

    id: str
    gid: str
    name: str
    deleted: bool


@timed
async def ends(tx: Tx, ids: Sequence[str], names: Sequence[str]) -> tuple[dict[str, End], dict[str, End]]:
    """Entities by id (deleted ones too), and live entities by exact name."""
    rows = await tx.fetch(
        """
        SELECT true, e.id::text, e.gid::text, e.name, e.deleted_at IS NOT NULL
        FROM unnest($1::uuid[]) AS k(id) JOIN {s}.entities e ON e.id = k.id
        UNION ALL
        SELECT false, e.id::text, e.gid::text, e.name, false
        FROM unnest($2::text[]) AS k(name) JOIN {s}.entities e ON e.name = k.name AND e.deleted_at IS NULL
        """,
        list(ids),
        list(names),
    )
    by_id = {r[1]: End(r[1], r[2], r[3], r[4]) for r in rows if r[0]}
    by_name = {r[3]: End(r[1], r[2], r[3], r[4]) for r in rows if not r[0]}
    return by_id, by_name


# --- where an import has got to --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """How far an import of one file went: the last line of `pass_` whose batch committed."""

    pass_: int
    line: int
    counts: dict[str, Any]
    refused: list[Any]
    actor: str
    started_at: datetime
    updated_at: datetime
    finished_at: datetime | None


@timed
async def checkpoint(tx: Tx, digest: bytes, fmt: str, on_existing: str, *, lock: bool = False) -> Checkpoint | None:
    row = await tx.fetchrow(
        "SELECT pass, line, counts, refused, actor, started_at, updated_at, finished_at FROM {s}.imports"
        " WHERE digest = $1 AND format = $2 AND on_existing = $3" + (" FOR UPDATE" if lock else ""),
        digest,
        fmt,
        on_existing,
    )
    return Checkpoint(*row) if row else None


@timed
async def save_checkpoint(
    tx: Tx,
    digest: bytes,
    fmt: str,
    on_existing: str,
    *,
    pass_: int,
    line: int,
    counts: dict[str, Any],
    refused: list[Any],
    actor: str,
    finished: bool,
    restart: bool = False,
) -> None:
    """Record how far the import got; `restart` begins the record anew (a new import of the file)."""
    await tx.execute(
        """
        INSERT INTO {s}.imports AS i (digest, format, on_existing, pass, line, counts, refused, actor, finished_at)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, CASE WHEN $9 THEN now() END)
        ON CONFLICT (digest, format, on_existing) DO UPDATE
        SET pass = excluded.pass, line = excluded.line, counts = excluded.counts, refused = excluded.refused,
            actor = excluded.actor, updated_at = now(), finished_at = excluded.finished_at,
            started_at = CASE WHEN $10 THEN now() ELSE i.started_at END
        """,
        digest,
        fmt,
        on_existing,
        pass_,
        line,
        counts,
        refused,
        actor,
        finished,
        restart,
    )
