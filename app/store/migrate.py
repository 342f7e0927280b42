"""Plain SQL migrations: applied in file-name order, each once, recorded with a checksum.

A session advisory lock serialises concurrent runners (two replicas starting together); each
file runs in its own transaction with its record, so a failed file leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import asyncpg

_LOCK_KEY = 0x656E6772616D  # "engram"
_FILE = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


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


async def migrate(dsn: str, directory: Path) -> list[str]:
    """Apply what is pending; returns the names applied (empty when up to date)."""
    migrations = load(directory)
    conn = await asyncpg.connect(dsn)
    try:
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
            return done
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)
    finally:
        await conn.close()


def _check_known(migrations: list[Migration], applied: dict[str, asyncpg.Record]) -> None:
    known = {m.version: m for m in migrations}
    for version, row in applied.items():
        m = known.get(version)
        if m is None:
            raise SchemaAhead(f"the database has migration {row['name']}, which this version does not know")
        if m.checksum != row["checksum"]:
            raise MigrationError(f"{m.name} changed after it was applied (checksum mismatch)")


async def pending(conn: asyncpg.Connection, directory: Path) -> list[str]:
    """What `migrate` would still apply; raises if the database is ahead of or differs from the code."""
    migrations = load(directory)
    exists = await conn.fetchval("SELECT to_regclass('engram.schema_migrations') IS NOT NULL")
    applied = {r["version"]: r for r in await conn.fetch("SELECT * FROM engram.schema_migrations")} if exists else {}
    _check_known(migrations, applied)
    return [m.name for m in migrations if m.version not in applied]
