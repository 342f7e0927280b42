"""Pinned facts in one tenant's schema: observations whose `pinned_at` is set (migration 0036).

A pin is a mark on a shared observation, so it is seen by everyone who sees the observation (the
tenant's members; docs/pinned-facts.md). Only pins on live entities count and show: a deleted
entity's pins come back with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.store.database import Tx, timed
from app.store.relations import Fact
from app.store.validity import NOW, When, holds


@dataclass(frozen=True, slots=True)
class Marked:
    """One (entity id, text) a pin or unpin call matched, and whether the call changed it."""

    entity_id: str
    text: str
    changed: bool


@dataclass(frozen=True, slots=True)
class Pin:
    """A pinned observation: its entity, and the fact with its record (`pinned_at` set)."""

    observation_id: int
    entity_id: str
    entity_name: str
    entity_type: str
    fact: Fact
    pinned_by: str


@timed
async def lock(tx: Tx) -> None:
    """Serialise the tenant's pin writers, so two calls cannot both pass the bound on pins."""
    await tx.execute("SELECT pg_advisory_xact_lock(hashtextextended($1 || ':pins', 0))", tx.tenant.schema)


@timed
async def mark(tx: Tx, pairs: Sequence[tuple[str, str]], actor: str | None) -> list[Marked]:
    """Pin (`actor` given: who pins) or unpin (None) the exact (entity id, text) observations; texts
    not stored are left out of the answer. A fact pinned already keeps its first pin."""
    rows = await tx.fetch(
        """
        WITH m AS MATERIALIZED (
            SELECT o.id, o.entity_id, o.content, (o.pinned_at IS NULL) = ($3::text IS NOT NULL) AS changes
            FROM {s}.observations o
            JOIN (SELECT DISTINCT * FROM unnest($1::uuid[], $2::text[]) AS p(entity_id, content)) p
              ON o.entity_id = p.entity_id AND md5(o.content) = md5(p.content) AND o.content = p.content
        ), u AS (
            UPDATE {s}.observations o
            SET pinned_at = CASE WHEN $3::text IS NULL THEN NULL ELSE now() END, pinned_by = $3::text
            FROM m WHERE o.id = m.id AND m.changes
        )
        SELECT m.entity_id::text, m.content, m.changes FROM m ORDER BY m.id
        """,
        [p[0] for p in pairs],
        [p[1] for p in pairs],
        actor,
    )
    return [Marked(*r) for r in rows]


@timed
async def count(tx: Tx) -> int:
    """Pins on live entities, whatever their facts' validity."""
    return int(
        await tx.fetchval(
            "SELECT count(*) FROM {s}.observations o JOIN {s}.entities e ON e.id = o.entity_id"
            " WHERE o.pinned_at IS NOT NULL AND e.deleted_at IS NULL"
        )
    )


@timed
async def listing(tx: Tx, limit: int, when: When = NOW) -> list[Pin]:
    """The pins on live entities whose facts count at `when`, oldest pin first, at most `limit`."""
    rows = await tx.fetch(
        f"""
        SELECT o.id, e.id::text, e.name, e.type, o.pinned_by,
               ROW(o.content, o.source, o.created_by, o.created_at, o.valid_from, o.valid_until, o.pinned_at) AS fact
        FROM {{s}}.observations o JOIN {{s}}.entities e ON e.id = o.entity_id AND e.deleted_at IS NULL
        WHERE o.pinned_at IS NOT NULL AND {holds("o", "$2", "$3")}
        ORDER BY o.pinned_at, o.id LIMIT $1
        """,
        limit,
        *when.params(),
    )
    return [Pin(r[0], r[1], r[2], r[3], Fact(*r["fact"]), r[4]) for r in rows]


@timed
async def pinned_documents(tx: Tx, doc_ids: Sequence[int]) -> set[int]:
    """Those of the search documents that are pinned observations."""
    if not doc_ids:
        return set()
    rows = await tx.fetch(
        "SELECT d.id FROM {s}.search_docs d JOIN {s}.observations o ON o.id = d.observation_id"
        " WHERE d.id = ANY($1::bigint[]) AND o.pinned_at IS NOT NULL",
        list(doc_ids),
    )
    return {r[0] for r in rows}
