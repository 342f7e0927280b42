"""Plain SQL migrations: applied in file-name order, each once, recorded with a checksum; then the
tenant steps they registered, one tenant per transaction.

A session advisory lock serialises concurrent runners (two replicas starting together); each
file runs in its own transaction with its record, so a failed file leaves nothing behind. Each
tenant records the last step it has, so an interrupted run resumes where it stopped, and the
locks a transaction takes are those of one tenant's objects, whatever the number of tenants.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from app.store.connect import OwnerConnection, owner

_LOCK_KEY = 0x656E6772616D  # "engram"
_FILE = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
_REGISTERS_STEP = re.compile(r"engram\.add_tenant_step\(")


class MigrationError(RuntimeError):
    pass


class SchemaAhead(MigrationError):
    """The database has migrations this code does not know: a newer version migrated it."""


@dataclass(frozen=True)
class Migration:
    version: str
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()

    @property
    def registers_step(self) -> bool:
        return bool(_REGISTERS_STEP.search(self.sql))


def load(directory: Path) -> list[Migration]:
    if not directory.is_dir():
        raise MigrationError(f"migrations directory {directory} does not exist")
    found = []
    for path in sorted(directory.glob("*.sql")):
        match = _FILE.match(path.name)
        if not match:
            raise MigrationError(f"{path.name}: migration files are named NNNN_words.sql")
        found.append(Migration(match[1], path.name, path.read_text()))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError("two migration files share a version number")
    return found


_BOOKKEEPING = """
CREATE SCHEMA IF NOT EXISTS engram;
CREATE TABLE IF NOT EXISTS engram.schema_migrations (
    version    text PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
"""


async def migrate(
    dsn: str, directory: Path, *, on_tenant: Callable[[int, int], None] | None = None, jobs: int = 1
) -> list[str]:
    """Apply what is pending, then the tenant steps on `jobs` connections; returns the file names
    applied (empty when up to date). `on_tenant(done, waiting)` is told after each tenant brought
    up to date."""
    migrations = load(directory)
    async with owner(dsn) as conn:
        await conn.execute("SELECT pg_advisory_lock($1)", _LOCK_KEY)
        try:
            await conn.execute(_BOOKKEEPING)
            applied = {r["version"]: r for r in await conn.fetch("SELECT * FROM engram.schema_migrations")}
            _check_known(migrations, applied)
            done = []
            for m in migrations:
                if m.version in applied:
                    continue
                async with conn.transaction():
                    try:
                        await conn.execute(m.sql)
                    except asyncpg.PostgresError as exc:
                        raise MigrationError(f"{m.name} failed: {exc}") from exc
                    await conn.execute(
                        "INSERT INTO engram.schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                        m.version,
                        m.name,
                        m.checksum,
                    )
                done.append(m.name)
            await conn.execute("GRANT SELECT ON engram.schema_migrations TO engram_app")
            await apply_tenant_steps(conn, on_tenant, dsn=dsn, jobs=jobs)
            return done
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)


# The tenants of this database: in the control database, the directory also lists tenants that
# live on other cells (migration 0026), whose steps are applied on their cell.
_BEHIND = """
SELECT schema_name FROM engram.tenants
WHERE steps_version < (SELECT coalesce(max(version), '') FROM engram.tenant_steps) {here}
ORDER BY schema_name
"""


async def apply_tenant_steps(
    conn: OwnerConnection,
    on_tenant: Callable[[int, int], None] | None = None,
    *,
    dsn: str | None = None,
    jobs: int = 1,
) -> int:
    """Bring every tenant up to the newest step, each in a transaction of its own, on `jobs`
    connections at once (`conn` and, past one, new ones to `dsn`); returns how many were brought
    up. Passes repeat until none is behind (a tenant made during a pass may have missed a step
    registered meanwhile)."""
    if not await _has_step_versions(conn):
        return 0
    async with AsyncExitStack() as more:
        workers = [conn]
        if dsn is not None:
            workers += [await more.enter_async_context(owner(dsn)) for _ in range(jobs - 1)]
        return await _bring_up(conn, workers, on_tenant)


async def _bring_up(
    conn: OwnerConnection, workers: list[OwnerConnection], on_tenant: Callable[[int, int], None] | None
) -> int:
    """The passes of `apply_tenant_steps`, each tenant behind taken by the first worker free."""
    total = 0

    async def work(c: OwnerConnection, queue: list[str], waiting: int) -> None:
        nonlocal total
        while queue:
            schema = queue.pop()
            async with c.transaction():
                try:
                    await c.fetchval("SELECT engram.apply_tenant_steps($1)", schema)
                except asyncpg.PostgresError as exc:
                    raise MigrationError(f"tenant steps for {schema} failed: {exc}") from exc
            total += 1
            if on_tenant is not None:
                on_tenant(total, waiting)

    # (a database migrated only up to a file before 0026 has no cells: every tenant is here)
    behind_here = _BEHIND.format(here="AND cell = 'main'" if await _has_step_versions(conn, "cell") else "")
    while behind := [r[0] for r in await conn.fetch(behind_here)]:
        behind.reverse()  # popped from the end: in name order
        try:
            async with asyncio.TaskGroup() as group:
                for c in workers:
                    group.create_task(work(c, behind, total + len(behind)))
        except BaseExceptionGroup as failed:
            raise failed.exceptions[0] from None
    return total


@dataclass(frozen=True, slots=True)
class StepsStatus:
    """Where the tenants are with their steps: the newest step registered, how many tenants there
    are and how many lack it, and how many have each last step."""

    newest: str
    tenants: int
    waiting: int
    by_version: tuple[tuple[str, int], ...]


async def _has_step_versions(conn: OwnerConnection, column: str = "steps_version") -> bool:
    return bool(
        await conn.fetchval(
            "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('engram.tenants')"
            " AND attname = $1 AND NOT attisdropped)",
            column,
        )
    )


async def steps_status(conn: OwnerConnection) -> StepsStatus:
    if not await _has_step_versions(conn):
        return StepsStatus("", 0, 0, ())
    newest = await conn.fetchval("SELECT coalesce(max(version), '') FROM engram.tenant_steps")
    here = "WHERE cell = 'main'" if await _has_step_versions(conn, "cell") else ""
    rows = await conn.fetch(
        f"SELECT steps_version, count(*)::int FROM engram.tenants {here} GROUP BY steps_version ORDER BY steps_version"
    )
    waiting = sum(n for version, n in rows if version < newest)
    return StepsStatus(newest, sum(n for _, n in rows), waiting, tuple((v, n) for v, n in rows))


@dataclass(frozen=True, slots=True)
class Plan:
    """What `migrate` would do, and what it has done: files applied and pending (with whether each
    registers a tenant step), and the tenants' steps."""

    applied: tuple[str, ...]
    pending: tuple[Migration, ...]
    steps: StepsStatus


async def plan(dsn: str, directory: Path) -> Plan:
    """`engram migrate --status` and `--dry-run`: reads only."""
    migrations = load(directory)
    async with owner(dsn) as conn:
        applied = await _applied(conn)
        _check_known(migrations, applied)
        return Plan(
            tuple(m.name for m in migrations if m.version in applied),
            tuple(m for m in migrations if m.version not in applied),
            await steps_status(conn),
        )


def _check_known(migrations: list[Migration], applied: dict[str, asyncpg.Record]) -> None:
    known = {m.version: m for m in migrations}
    for version, row in applied.items():
        m = known.get(version)
        if m is None:
            raise SchemaAhead(f"the database has migration {row['name']}, which this version does not know")
        if m.checksum != row["checksum"]:
            raise MigrationError(f"{m.name} changed after it was applied (checksum mismatch)")


async def _applied(conn: asyncpg.Connection) -> dict[str, asyncpg.Record]:
    if not await conn.fetchval("SELECT to_regclass('engram.schema_migrations') IS NOT NULL"):
        return {}
    return {r["version"]: r for r in await conn.fetch("SELECT * FROM engram.schema_migrations")}


async def pending(conn: asyncpg.Connection, directory: Path) -> list[str]:
    """What `migrate` would still apply; raises if the database is ahead of or differs from the code."""
    migrations = load(directory)
    applied = await _applied(conn)
    _check_known(migrations, applied)
    return [m.name for m in migrations if m.version not in applied]


async def migrated(conn: asyncpg.Connection) -> bool:
    """Whether `engram migrate` has applied a migration here (a first one that failed leaves the
    table empty); True when this role may not read it, which only a migrated database grants."""
    exists = await conn.fetchval(
        "SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'engram' AND c.relname = 'schema_migrations')"
    )
    if not exists:
        return False
    try:
        return bool(await conn.fetchval("SELECT EXISTS (SELECT 1 FROM engram.schema_migrations)"))
    except asyncpg.InsufficientPrivilegeError:
        return True
