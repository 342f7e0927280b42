"""The audit log and usage counts (control-plane tables with row-level security)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import asyncpg

from app.store.database import Tx, timed


@dataclass(frozen=True, slots=True)
class AuditRow:
    """One successful change, as the audit log keeps it."""

    id: int
    at: datetime
    subject: str
    client_id: str
    tool: str
    affected: list[str]
    outcome: str
    duration_ms: float
    request_id: str


@timed
async def write(
    tx: Tx, *, subject: str, client_id: str, tool: str, affected: Sequence[str], duration_ms: float, request_id: str
) -> None:
    """One row for a successful change, in the change's own transaction."""
    await tx.execute(
        "INSERT INTO engram.audit (tenant_id, subject, client_id, tool, affected, outcome, duration_ms, request_id)"
        " VALUES ($1::uuid, $2, $3, $4, $5, 'ok', $6, $7)",
        tx.tenant.id,
        subject,
        client_id,
        tool,
        list(dict.fromkeys(affected)),
        duration_ms,
        request_id,
    )


@timed
async def page(tx: Tx, limit: int, before: int | None, tool: str | None, subject: str | None = None) -> list[AuditRow]:
    """The tenant's audit rows, newest first (row-level security keeps them to the tenant)."""
    rows = await tx.fetch(
        "SELECT id, at, subject, client_id, tool, affected, outcome, duration_ms, request_id FROM engram.audit"
        " WHERE ($1::bigint IS NULL OR id < $1) AND ($2::text IS NULL OR tool = $2)"
        " AND ($4::text IS NULL OR subject = $4) ORDER BY id DESC LIMIT $3",
        before,
        tool,
        limit,
        subject,
    )
    return [AuditRow(*r) for r in rows]


@timed
async def add_usage(conn: asyncpg.Connection, counts: list[dict[str, Any]]) -> None:
    await conn.execute("SELECT engram.add_usage($1::jsonb)", counts)


@timed
async def tenant_count(conn: asyncpg.Connection) -> int:
    return await conn.fetchval("SELECT engram.tenant_count()")


# --- administration, on an owner connection ------------------------------------------------


@dataclass(frozen=True, slots=True)
class AdminAuditRow:
    """An audit row with its tenant, as the operators' listing shows it."""

    id: int
    at: datetime
    tenant: str
    subject: str
    client_id: str
    tool: str
    affected: list[str]
    duration_ms: float
    request_id: str


@timed
async def admin_page(
    conn: asyncpg.Connection, tenant_key: str | None, limit: int, since: datetime | None
) -> list[AdminAuditRow]:
    rows = await conn.fetch(
        """SELECT a.id, a.at, t.key AS tenant, a.subject, a.client_id, a.tool, a.affected, a.duration_ms, a.request_id
           FROM engram.audit a JOIN engram.tenants t ON t.id = a.tenant_id
           WHERE ($1::text IS NULL OR t.key = $1) AND ($2::timestamptz IS NULL OR a.at >= $2)
           ORDER BY a.id DESC LIMIT $3""",
        tenant_key,
        since,
        limit,
    )
    return [AdminAuditRow(*r) for r in rows]


@timed
async def cleanup(conn: asyncpg.Connection, days: int) -> int:
    done = await conn.execute("DELETE FROM engram.audit WHERE at < now() - make_interval(days => $1)", days)
    return int(done.split()[-1])


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One tenant's calls of one tool on one day."""

    tenant: str
    day: date
    tool: str
    calls: int
    errors: int


@timed
async def usage(conn: asyncpg.Connection, tenant_key: str | None, days: int) -> list[UsageRow]:
    rows = await conn.fetch(
        """SELECT t.key AS tenant, u.day, u.tool, u.calls, u.errors
           FROM engram.usage u JOIN engram.tenants t ON t.id = u.tenant_id
           WHERE ($1::text IS NULL OR t.key = $1) AND u.day > current_date - $2
           ORDER BY u.day DESC, t.key, u.calls DESC""",
        tenant_key,
        days,
    )
    return [UsageRow(*r) for r in rows]
