"""Tenant and API-key administration, on an owner connection (the `engram tenant` / `apikey` commands);
and a tenant's own view of its API keys, in its transaction (the console)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from app.config import MAIN_CELL
from app.errors import Code, EngramError
from app.store import hooks, limits
from app.store.cell import each_cell
from app.store.database import Database, Tenant, Tx, timed
from app.store.pool import Pool


@dataclass(frozen=True, slots=True)
class TenantRecord:
    """A tenant as the administration sees it."""

    id: str
    key: str
    schema_name: str
    created_at: datetime
    cell: str


_RECORD = "SELECT id::text, key, schema_name, created_at, cell FROM engram.tenants"


@timed
async def create(conn: asyncpg.Connection, key: str) -> Tenant:
    """The tenant `key` in the directory, placed on a cell unless it exists; on `main` its schema
    and role are made too (on another cell, `database.adopt` makes them there)."""
    row = await conn.fetchrow(
        "SELECT tenant_id::text AS id, schema_name, cell FROM engram.tenant_directory($1, true)", key
    )
    assert row is not None
    return Tenant(row["id"], key, row["schema_name"], row["cell"])


@timed
async def cell_of(conn: asyncpg.Connection, key: str) -> str:
    """Where the directory says tenant `key` lives; `not_found` if nowhere."""
    return (await _get(conn, key)).cell


@timed
async def list_all(conn: asyncpg.Connection) -> list[TenantRecord]:
    rows = await conn.fetch(f"{_RECORD} ORDER BY key")
    return [TenantRecord(*r) for r in rows]


@dataclass(frozen=True, slots=True)
class TenantView:
    """What the administration shows of a tenant."""

    record: TenantRecord
    counts: dict[str, int]  # live and deleted entities, relations, observations, active API keys
    limits: dict[str, object]  # the limits set for it (the others are the server's defaults)
    usage: dict[str, int]  # its usage totals


@timed
async def show(conn: asyncpg.Connection, key: str, cell: asyncpg.Connection | None = None) -> TenantView:
    """What the administration shows of a tenant: its record from the directory (`conn`), its
    contents, limits and usage from its cell's database (`cell`; default `conn`)."""
    row = await _get(conn, key)
    s = row.schema_name
    on_cell = cell or conn
    counts = await on_cell.fetchrow(
        f"""SELECT (SELECT count(*) FROM {s}.entities WHERE deleted_at IS NULL) AS entities,
                   (SELECT count(*) FROM {s}.entities WHERE deleted_at IS NOT NULL) AS deleted_entities,
                   (SELECT count(*) FROM {s}."REL") AS relations,
                   (SELECT count(*) FROM {s}.observations) AS observations"""
    )
    keys = await conn.fetchval(
        "SELECT count(*) FROM engram.api_keys WHERE tenant_id = $1::uuid AND revoked_at IS NULL", row.id
    )
    overrides, totals = await limits.admin_view(on_cell, s)
    return TenantView(row, {**dict(counts or {}), "api_keys": keys}, overrides, totals)


@timed
async def set_limits(conn: asyncpg.Connection, key: str, values: Mapping[str, float | int | None]) -> None:
    """Set some of a tenant's own limits (None: back to the server's default), on its cell (`conn`)."""
    row = await _get(conn, key)
    await limits.set_overrides(conn, row.schema_name, values)


@timed
async def set_hooks(conn: asyncpg.Connection, key: str, values: Mapping[str, object]) -> None:
    """Set some of a tenant's hook settings (None: back to the server's default), on its cell (`conn`)."""
    row = await _get(conn, key)
    await hooks.set_overrides(conn, row.schema_name, values)


@timed
async def hook_view(conn: asyncpg.Connection, key: str) -> dict[str, object]:
    """A tenant's own hook settings (column: value, unset ones left out), on its cell (`conn`)."""
    row = await _get(conn, key)
    found = await conn.fetchrow(f"SELECT {', '.join(hooks.COLUMNS)} FROM {row.schema_name}.hook_settings")
    return {k: v for k, v in dict(found).items() if v is not None} if found else {}


@timed
async def delete(conn: asyncpg.Connection, key: str, cell: asyncpg.Connection | None = None) -> None:
    """Remove a tenant and everything it has: graph, tables and role on its cell (`cell`; default
    `conn`), then its directory row and keys in the control database (`conn`)."""
    row = await _get(conn, key)
    s = row.schema_name
    on_cell = cell or conn
    async with on_cell.transaction():
        await on_cell.execute("SELECT ag_catalog.drop_graph($1, true)", s)
        await on_cell.execute("DELETE FROM engram.tenants WHERE id = $1::uuid", row.id)
        await on_cell.execute(f"DROP ROLE IF EXISTS {s}")
    if on_cell is not conn:
        await conn.execute("DELETE FROM engram.tenants WHERE id = $1::uuid", row.id)  # api keys cascade


@timed
async def get(conn: asyncpg.Connection, key: str) -> TenantRecord:
    """The directory's record of tenant `key`; `not_found` if there is none."""
    return await _get(conn, key)


async def _get(conn: asyncpg.Connection, key: str) -> TenantRecord:
    row = await conn.fetchrow(f"{_RECORD} WHERE key = $1", key)
    if row is None:
        raise EngramError("not_found", f"no tenant {key!r}")
    Tenant(row["id"], key, row["schema_name"])  # refuses any schema name but the server's own pattern
    return TenantRecord(*row)


@timed
async def add_key(
    conn: asyncpg.Connection,
    tenant_key: str,
    key_id: str,
    secret_hash: bytes,
    scopes: Sequence[str],
    name: str,
    expires_at: datetime | None,
) -> None:
    tenant = await create(conn, tenant_key)
    await conn.execute(
        "INSERT INTO engram.api_keys (id, tenant_id, name, secret_hash, scopes, expires_at)"
        " VALUES ($1, $2::uuid, $3, $4, $5, $6)",
        key_id,
        tenant.id,
        name,
        secret_hash,
        list(scopes),
        expires_at,
    )


@timed
async def revoke_key(conn: asyncpg.Connection, key_id: str) -> bool:
    done = await conn.execute(
        "UPDATE engram.api_keys SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL", key_id
    )
    return done.endswith(" 1")


@dataclass(frozen=True, slots=True)
class KeyRow:
    """An API key as its tenant's administrators may see it: never its secret's hash."""

    id: str
    name: str
    scopes: list[str]
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None


@dataclass(frozen=True, slots=True)
class TenantKeyRow(KeyRow):
    """An API key with its tenant, as the operators' listing shows it."""

    tenant: str


@timed
async def list_keys(conn: asyncpg.Connection, tenant_key: str | None) -> list[TenantKeyRow]:
    rows = await conn.fetch(
        """SELECT k.id, k.name, k.scopes, k.created_at, k.expires_at, k.revoked_at, t.key AS tenant
           FROM engram.api_keys k JOIN engram.tenants t ON t.id = k.tenant_id
           WHERE $1::text IS NULL OR t.key = $1 ORDER BY t.key, k.created_at""",
        tenant_key,
    )
    return [TenantKeyRow(*r) for r in rows]


@timed
async def keys_of_tenant(tx: Tx) -> list[KeyRow]:
    """The tenant's API keys, newest first (row-level security keeps them to the tenant)."""
    rows = await tx.fetch(
        "SELECT id, name, scopes, created_at, expires_at, revoked_at FROM engram.api_keys"
        " WHERE tenant_id = $1::uuid ORDER BY created_at DESC LIMIT 1000",
        tx.tenant.id,
    )
    return [KeyRow(*r) for r in rows]


@dataclass(frozen=True, slots=True)
class KeyAudit:
    """Who made or revoked a key from inside the tenant, for the audit row the database writes with it."""

    subject: str
    client_id: str
    tool: str
    duration_ms: float
    request_id: str

    def args(self) -> tuple[str, str, str, float, str]:
        """The definer functions' last five parameters, in their order."""
        return (self.subject, self.client_id, self.tool, self.duration_ms, self.request_id)


# What the definer functions' refusals mean (sql/migrations/0015_tenant_api_keys.sql).
_KEY_REFUSALS: dict[type[asyncpg.PostgresError], tuple[Code, str]] = {
    asyncpg.InvalidParameterValueError: ("invalid", "the key's name, scopes or expiry are out of bounds"),
    asyncpg.ProgramLimitExceededError: ("limit", "this tenant has 100 unrevoked API keys; revoke some first"),
    asyncpg.InsufficientPrivilegeError: ("forbidden", "API keys are made only inside a tenant's transaction"),
}


def _refusal(exc: asyncpg.PostgresError) -> EngramError:
    return EngramError(*_KEY_REFUSALS[type(exc)])


@timed
async def create_key_in_tenant(
    tx: Tx,
    key_id: str,
    secret_hash: bytes,
    name: str,
    scopes: Sequence[str],
    expires_at: datetime | None,
    audit: KeyAudit,
) -> datetime:
    """A new key for the transaction's own tenant, through `engram.create_api_key()`: the run-time
    role cannot write engram.api_keys, and the function takes the tenant from the transaction.
    Answers when it was made."""
    try:
        made: datetime = await tx.fetchval(
            "SELECT engram.create_api_key($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            key_id,
            secret_hash,
            name,
            list(scopes),
            expires_at,
            *audit.args(),
        )
    except tuple(_KEY_REFUSALS) as exc:
        raise _refusal(exc) from None
    return made


@timed
async def revoke_key_in_tenant(tx: Tx, key_id: str, audit: KeyAudit) -> bool:
    """Revoke one of the transaction's tenant's keys; False if it has no unrevoked key by that id."""
    try:
        return bool(await tx.fetchval("SELECT engram.revoke_api_key($1, $2, $3, $4, $5, $6)", key_id, *audit.args()))
    except tuple(_KEY_REFUSALS) as exc:
        raise _refusal(exc) from None


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    """What checking an API key needs of it: its tenant, its secret's hash, scopes and times."""

    tenant_key: str
    secret_hash: bytes
    scopes: list[str]
    expires_at: datetime | None
    revoked_at: datetime | None


@timed
async def api_key(db: Database, key_id: str) -> ApiKeyRecord | None:
    """An API key's record by its public id, looked up before any tenant is known.

    `engram apikey create` writes keys in the control database; a tenant's own key made in the
    console is written in its transaction, so on its cell: looked up on every other cell at once
    when the control database has none. A cell that does not answer makes a key found nowhere
    `unavailable` rather than unknown (a client told 401 may throw a good key away)."""
    if (found := await db.run(_api_key, key_id)) is not None:
        return found

    async def look_up(name: str, pool: Pool) -> ApiKeyRecord | None:
        return await pool.run(_api_key, key_id)

    others = {name: cell.pool for name, cell in db.cells.items() if name != MAIN_CELL}
    answers = await each_cell(others, look_up, on_error="report", together=True)
    if found := next((a for a in answers.values() if isinstance(a, ApiKeyRecord)), None):
        return found
    if failed := [a for a in answers.values() if isinstance(a, Exception)]:
        raise failed[-1]
    return None


async def _api_key(conn: asyncpg.Connection, key_id: str) -> ApiKeyRecord | None:
    row = await conn.fetchrow(
        "SELECT tenant_key, secret_hash, scopes, expires_at, revoked_at FROM engram.api_key($1)", key_id
    )
    if row is None or row[0] is None:  # no such key (the function answers a row of nulls)
        return None
    return ApiKeyRecord(row[0], bytes(row[1]), list(row[2]), row[3], row[4])
