"""What every benchmark needs: settings for the local database (or a scratch one), an open Database
with the services the server builds on it, a caller, the machine."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
from pydantic import SecretStr

from app.auth.principal import READ, WRITE, Principal
from app.config import Settings, cache_dir
from app.devdb import provision
from app.observability.context import CALL, Call
from app.services import Services
from app.services.indexing import Indexer
from app.store import migrate
from app.store.database import Database

ROOT = Path(__file__).resolve().parent.parent


def bench_dir() -> Path:
    """Machine-local benchmark state: the generated graph's record, npm packages, results."""
    path = cache_dir() / "bench"
    path.mkdir(parents=True, exist_ok=True)
    return path


def settings() -> Settings:
    """The server's settings (ENGRAM_* variables included), pointed at the local database when none is set."""
    return provision.with_local_database(Settings())


def scratch_name(part: str = "") -> str:
    """The name of a quick run's own database: ENGRAM_BENCH_DB, or the test suite's name (ENGRAM_TEST_DB,
    one per checkout) with `_bench` added, so it is never the developer's database nor the suite's."""
    base = os.environ.get("ENGRAM_BENCH_DB") or os.environ.get("ENGRAM_TEST_DB", "engram_test") + "_bench"
    return f"{base}_{part}" if part else base


def _database_of(url: str) -> str:
    return url.rsplit("/", 1)[1].split("?", 1)[0]


async def fresh_database(s: Settings, name: str) -> Settings:
    """`s` pointed at database `name` on the same server, dropped (with its tenants' roles) and made
    anew, migrated to the latest schema."""
    admin = s.admin_dsn()
    kept = {
        _database_of(admin),
        _database_of(s.runtime_dsn()),
        "postgres",
        os.environ.get("ENGRAM_TEST_DB", "engram_test"),
    }
    if name in kept:
        raise ValueError(f"refusing to recreate the configured database {name!r}")
    await provision.recreate_database(admin, name)
    scratch = on_database(s, name)
    await migrate.migrate(scratch.admin_dsn(), scratch.migrations_dir)
    return scratch


def on_database(s: Settings, name: str) -> Settings:
    """`s` pointed at database `name` on the same server, as it is."""
    return s.model_copy(
        update={
            "database_url": SecretStr(provision.on_database(s.runtime_dsn(), name)),
            "admin_database_url": SecretStr(provision.on_database(s.admin_dsn(), name)),
        }
    )


def database_env(s: Settings) -> dict[str, str]:
    """Environment for a child process that should use the same database as `s`."""
    return {
        **os.environ,
        "ENGRAM_DATABASE_URL": s.runtime_dsn(),
        "ENGRAM_ADMIN_DATABASE_URL": s.admin_dsn(),
    }


def principal(tenant: str) -> Principal:
    return Principal(subject="bench", client_id="bench", tenant=tenant, scopes=frozenset({READ, WRITE}), issuer="bench")


@contextmanager
def tool_call(who: Principal, tool: str) -> Iterator[None]:
    """Run a service call as the tool would: a write then ends with its audit row, in its transaction."""
    token = CALL.set(Call(tool, who.subject, who.client_id, time.perf_counter(), who.tenant))
    try:
        yield
    finally:
        CALL.reset(token)


def build(s: Settings) -> tuple[Database, Services]:
    """The Database and Services, built from `s` as `app.server.create_app` builds them (the
    embedding indexer of the configured provider, the limits, vector search and cursor settings),
    without the per-tenant rates and quotas."""
    db = Database.from_settings(s)
    indexer = Indexer.from_settings(db, s)
    return db, Services.from_settings(s, db, indexer)


@asynccontextmanager
async def services(s: Settings) -> AsyncIterator[tuple[Database, Services]]:
    """An open Database and the Services the server would build on it, its embedding model loaded.

    Writes embed their texts before their transaction, as in the server; the server's background
    filler of pending texts is not started (it would add work of its own to the figures).
    """
    db, services = build(s)
    await db.open()
    try:
        await services.indexer.start(fill=False)
        try:
            yield db, services
        finally:
            await services.indexer.stop()
    finally:
        await db.close()


def _first_line(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout
    except OSError:
        return "not found"
    return out.strip().splitlines()[0] if out.strip() else "not found"


def code_version() -> str:
    """The commit measured, and whether the server code differed from it."""
    head = _first_line(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    if head == "not found":
        return "not a git checkout"
    changed = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--", "app"], capture_output=True, text=True
    ).stdout.strip()
    return head + (" with uncommitted changes to app/" if changed else "")


def machine() -> dict[str, Any]:
    """Where and when the figures were taken, and how busy the machine was."""
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kb = next(
        int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")
    )
    from importlib.metadata import version

    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "code": code_version(),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "node": _first_line(["node", "--version"]),
        "packages": {p: version(p) for p in ("mcp", "starlette", "uvicorn", "asyncpg", "pydantic", "orjson")},
        "load_average": os.getloadavg(),
    }


async def database_versions(s: Settings) -> dict[str, str]:
    conn = await asyncpg.connect(s.runtime_dsn())
    try:
        versions = {"postgresql": await conn.fetchval("SHOW server_version")}
        for name, v in await conn.fetch("SELECT extname, extversion FROM pg_extension ORDER BY 1"):
            versions[name] = v
    finally:
        await conn.close()
    return versions
