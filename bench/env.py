"""What every benchmark needs: settings for the local database, an open Database, a caller, the machine."""

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

from app.auth.principal import READ, WRITE, Principal
from app.config import Settings, cache_dir
from app.observability.context import CALL, Call
from app.services import Limits, Services
from app.store import provision
from app.store.database import Database

ROOT = Path(__file__).resolve().parent.parent


def bench_dir() -> Path:
    """Machine-local benchmark state: the generated graph's record, npm packages, results."""
    path = cache_dir() / "bench"
    path.mkdir(parents=True, exist_ok=True)
    return path


def settings() -> Settings:
    return provision.with_local_database(Settings())


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


@asynccontextmanager
async def services(s: Settings) -> AsyncIterator[tuple[Database, Services]]:
    """An open Database and the Services the server would build on it, with the server's default limits."""
    db = Database(s)
    await db.open()
    try:
        limits = Limits(
            max_batch=s.max_batch,
            max_results=s.max_results,
            page_size=s.graph_page_size,
            observations_per_entity=s.observations_per_entity,
        )
        yield db, Services.create(db, limits)
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
        ["git", "-C", str(ROOT), "status", "--porcelain", "--", "app", "sql"], capture_output=True, text=True
    ).stdout.strip()
    return head + (" with uncommitted changes to app/ or sql/" if changed else "")


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
    import asyncpg

    conn = await asyncpg.connect(s.runtime_dsn())
    try:
        versions = {"postgresql": await conn.fetchval("SHOW server_version")}
        for name, v in await conn.fetch("SELECT extname, extversion FROM pg_extension ORDER BY 1"):
            versions[name] = v
    finally:
        await conn.close()
    return versions
