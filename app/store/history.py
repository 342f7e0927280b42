"""The history of changes, written in the same transaction as the change it records."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from app.store.database import Tx, timed


@dataclass(frozen=True, slots=True)
class Event:
    entity_id: str
    action: str  # created | updated | deleted | restored | observations_added | observations_removed | ...
    changes: dict[str, Any] = field(default_factory=dict)  # field -> [old, new], or what was added/removed
    other_id: str | None = None  # the other end of a relation
    relation_id: str | None = None


@timed
async def record(tx: Tx, events: Sequence[Event], actor: str) -> None:
    if not events:
        return
    tx.affected += [e.relation_id or e.entity_id for e in events]
    tx.entities += [e.entity_id for e in events if e.relation_id is None]
    tx.relations += [e.relation_id for e in events if e.relation_id is not None]
    tx.renamed += [e.entity_id for e in events if e.action == "updated" and "name" in e.changes]
    tx.touched += [e.entity_id for e in events] + [e.other_id for e in events if e.other_id]
    await tx.execute(
        """
        INSERT INTO {s}.history (entity_id, other_id, relation_id, action, changes, actor)
        SELECT * , $6 FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::jsonb[])
        """,
        [e.entity_id for e in events],
        [e.other_id for e in events],
        [e.relation_id for e in events],
        [e.action for e in events],
        [e.changes for e in events],
        actor,
    )


@dataclass(frozen=True, slots=True)
class Change:
    """One row of ``history``: as stored (with its `id`), or as an import's file gives it (no id yet)."""

    entity_id: str
    other_id: str | None
    relation_id: str | None
    action: str
    changes: dict[str, Any]
    actor: str
    at: datetime
    id: int | None = None


COLUMNS = "h.entity_id::text, h.other_id::text, h.relation_id::text, h.action, h.changes, h.actor, h.at, h.id"


@timed
async def of_entity(tx: Tx, entity_id: str, limit: int, before: int | None) -> list[Change]:
    """Newest first: changes to the entity, its observations, and relations touching it."""
    rows = await tx.fetch(
        f"""
        SELECT {COLUMNS} FROM {{s}}.history h
        WHERE (h.entity_id = $1 OR h.other_id = $1) AND ($2::bigint IS NULL OR h.id < $2)
        ORDER BY h.id DESC LIMIT $3
        """,
        entity_id,
        before,
        limit,
    )
    return [Change(*r) for r in rows]


@timed
async def recent(tx: Tx, limit: int) -> list[Change]:
    """The tenant's latest changes, newest first."""
    rows = await tx.fetch(f"SELECT {COLUMNS} FROM {{s}}.history h ORDER BY h.id DESC LIMIT $1", limit)
    return [Change(*r) for r in rows]
