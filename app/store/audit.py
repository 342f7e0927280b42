"""The audit log and usage counts, each tenant's in its own schema; the administration walks tenants."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import asyncpg

from app.store.database import Tenant, Tx, timed


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
        "INSERT INTO {s}.audit (subject, client_id, tool, affected, outcome, duration_ms, request_id)"
        " VALUES ($1, $2, $3, $4, 'ok', $5, $6)",
        subject,
        client_id,
        tool,
        list(dict.fromkeys(affected)),
        duration_ms,
        request_id,
    )


@timed
async def page(tx: Tx, limit: int, before: int | None, tool: str | None, subject: str | None = None) -> list[AuditRow]:
    """The tenant's audit rows, newest first."""
    rows = await tx.fetch(
        "SELECT id, at, subject, client_id, tool, affected, outcome, duration_ms, request_id FROM {s}.audit"
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


async def _tenants(conn: asyncpg.Connection, tenant_key: str | None) -> list[Tenant]:
    """The tenants an administrative view walks (one, or all), each with its checked schema name."""
    rows = await conn.fetch(
        # cell 'main' is "here": in the control database, the tenants of its own cell; in a cell's, all
        "SELECT id::text, key, schema_name FROM engram.tenants"
        " WHERE cell = 'main' AND ($1::text IS NULL OR key = $1) ORDER BY key",
        tenant_key,
    )
    return [Tenant(*r) for r in rows]  # Tenant refuses any schema name but the server's own pattern


@timed
async def admin_page(
    conn: asyncpg.Connection, tenant_key: str | None, limit: int, since: datetime | None
) -> list[AdminAuditRow]:
    """The newest `limit` audit rows (of one tenant or all): at most `limit` read from each tenant."""
    found: list[AdminAuditRow] = []
    for t in await _tenants(conn, tenant_key):
        rows = await conn.fetch(
            f"""SELECT id, at, $1::text, subject, client_id, tool, affected, duration_ms, request_id
                FROM {t.schema}.audit WHERE ($2::timestamptz IS NULL OR at >= $2) ORDER BY id DESC LIMIT $3""",
            t.key,
            since,
            limit,
        )
        found = newest(limit, [*found, *(AdminAuditRow(*r) for r in rows)])
    return found


def newest(limit: int, rows: Iterable[AdminAuditRow]) -> list[AdminAuditRow]:
    """The newest `limit` of `rows` (of one database's tenants, or merged from several cells)."""
    return heapq.nlargest(limit, rows, key=lambda r: (r.at, r.id))


@timed
async def cleanup(conn: asyncpg.Connection, days: int) -> int:
    """Remove audit rows older than `days`, tenant by tenant (one statement each)."""
    removed = 0
    for t in await _tenants(conn, None):
        done = await conn.execute(f"DELETE FROM {t.schema}.audit WHERE at < now() - make_interval(days => $1)", days)
        removed += int(done.split()[-1])
    return removed


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
    """Calls per tenant, tool and day over the last `days` days, newest day first."""
    found: list[UsageRow] = []
    for t in await _tenants(conn, tenant_key):
        rows = await conn.fetch(
            f"SELECT $1::text, day, tool, calls, errors FROM {t.schema}.usage WHERE day > current_date - $2::integer",
            t.key,
            days,
        )
        found += [UsageRow(*r) for r in rows]
    return in_order(found)


def in_order(rows: Iterable[UsageRow]) -> list[UsageRow]:
    """Usage rows newest day first, then by tenant, then busiest tool first (also rows merged from cells)."""
    return sorted(rows, key=lambda r: (-r.day.toordinal(), r.tenant, -r.calls))
