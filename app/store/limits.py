"""Per-tenant limit overrides and the usage totals quotas are checked against (both in the tenant's schema)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

import asyncpg

from app.store.database import Database, Growth, Tx, timed


@dataclass(frozen=True, slots=True)
class Overrides:
    """A tenant's own limits; None: the server's default."""

    rate: float | None
    burst: int | None
    max_concurrent: int | None
    max_entities: int | None
    max_observations: int | None
    max_text_bytes: int | None
    deleted_retention_days: float | None


@dataclass(frozen=True, slots=True)
class UsageTotals:
    """What a tenant stores, as its quotas count it."""

    entities: int
    observations: int
    text_bytes: int


# The overridable limits, by column; the only identifiers set_overrides builds into its query.
COLUMNS = tuple(f.name for f in fields(Overrides))


@timed
async def overrides(tx: Tx) -> Overrides | None:
    """The tenant's overrides, or None when it has none."""
    row = await tx.fetchrow(f"SELECT {', '.join(COLUMNS)} FROM {{s}}.limits")
    return None if row is None else Overrides(*row)


@timed
async def grow(tx: Tx, growth: Growth) -> UsageTotals:
    """Add a write's growth to the tenant's totals; returns the new totals.

    The row stays locked until the transaction ends, so concurrent writers of one tenant check
    their quotas one after the other: this runs last, just before commit, to keep that short.
    """
    row = await tx.fetchrow(
        "UPDATE {s}.usage_totals SET entities = entities + $1, observations = observations + $2,"
        " text_bytes = text_bytes + $3 RETURNING entities, observations, text_bytes",
        growth.entities,
        growth.observations,
        growth.text_bytes,
    )
    assert row is not None
    return UsageTotals(*row)


@timed
async def take_tokens(db: Database, tenant_id: str, want: int, rate: float, burst: int) -> tuple[int, float]:
    """Up to `want` calls' worth of the tenant's shared rate bucket (one statement, outside any
    tenant transaction): how many were granted, and when none, the seconds until one is there."""
    async with db.connection() as lease:
        row = await lease.conn.fetchrow(
            "SELECT granted, wait_seconds FROM engram.take_tokens($1::uuid, $2, $3, $4)", tenant_id, want, rate, burst
        )
    assert row is not None
    return row[0], row[1]


@timed
async def observation_totals(tx: Tx, entity_ids: list[str]) -> tuple[int, int]:
    """How many observations these entities have, and their UTF-8 bytes."""
    row = await tx.fetchrow(
        "SELECT count(*), coalesce(sum(octet_length(content)), 0) FROM {s}.observations"
        " WHERE entity_id = ANY($1::uuid[])",
        entity_ids,
    )
    assert row is not None
    return row[0], row[1]


# --- administration, on an owner connection (`engram tenant set-limits` / `show`) -------------------


@timed
async def set_overrides(conn: asyncpg.Connection, schema: str, values: Mapping[str, float | int | None]) -> None:
    """Set some overrides of a tenant (None: back to the server's default); others stay.
    `schema` is a checked tenant schema name."""
    columns = [c for c in COLUMNS if c in values]
    if not columns:
        return
    given = ", ".join(f"${n}" for n in range(1, len(columns) + 1))
    update = ", ".join(f"{c} = excluded.{c}" for c in columns)
    await conn.execute(
        f"INSERT INTO {schema}.limits ({', '.join(columns)}) VALUES ({given})"
        f" ON CONFLICT (one) DO UPDATE SET {update}, updated_at = now()",
        *(values[c] for c in columns),
    )


@timed
async def admin_view(conn: asyncpg.Connection, schema: str) -> tuple[dict[str, object], dict[str, int]]:
    """A tenant's overrides (column: value, NULL ones left out) and its usage totals."""
    row = await conn.fetchrow(f"SELECT {', '.join(COLUMNS)} FROM {schema}.limits")
    totals = await conn.fetchrow(f"SELECT entities, observations, text_bytes FROM {schema}.usage_totals")
    return ({k: v for k, v in dict(row).items() if v is not None} if row else {}), dict(totals or {})
