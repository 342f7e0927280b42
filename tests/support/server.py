"""`engram serve` in its own process on a free port, the CLI run as a subprocess, and this suite's
database (its name, test-sized pools, scratch databases of their own)."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx2

from app.auth.devkeys import mint_token
from app.auth.principal import READ, WRITE
from app.config import ENDPOINT_PATHS, Settings
from app.store import migrate
from app.store.database import Database
from app.store.pool import Recycling
from tests.support.client import connect

ROOT = Path(__file__).resolve().parents[2]
# Its own database per checkout, so two suites can run side by side on one PostgreSQL; and per
# worker when the suite runs in several processes (pytest-xdist names each one: gw0, gw1, ...).
TEST_DB = os.environ.get("ENGRAM_TEST_DB", "engram_test") + (
    f"_{worker}" if (worker := os.environ.get("PYTEST_XDIST_WORKER")) else ""
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    url: str
    base: str
    settings: Settings
    env: dict[str, str]
    process: subprocess.Popen[bytes]

    def token(self, tenant: str, scopes: tuple[str, ...] = (READ, WRITE), **kw: Any) -> str:
        return mint_token(self.settings, tenant=tenant, scopes=scopes, **kw)

    def client(self, tenant: str, scopes: tuple[str, ...] = (READ, WRITE), mode: str = "auto") -> Any:
        """`async with server.client(tenant) as c:` — a real MCP client holding a token for `tenant`."""
        return connect(self.url, self.token(tenant, scopes), mode)

    def at(self, tool_set: str) -> Server:
        """The same server, its `url` (and clients) at another tool set's endpoint (`memory`, `neo4j`)."""
        return dataclasses.replace(self, url=f"{self.base}{ENDPOINT_PATHS[tool_set]}")


def server_env(settings: Settings, port: int, **extra: str) -> dict[str, str]:
    assert settings.database_url is not None and settings.admin_database_url is not None
    return {
        **os.environ,
        "ENGRAM_DATABASE_URL": settings.database_url.get_secret_value(),
        "ENGRAM_ADMIN_DATABASE_URL": settings.admin_database_url.get_secret_value(),
        "ENGRAM_LISTEN_DATABASE_URL": settings.listen_dsn(),
        "ENGRAM_PORT": str(port),
        "ENGRAM_METRICS_PORT": str(free_port()),
        "ENGRAM_DEV_KEY_FILE": str(settings.dev_key_file),
        "ENGRAM_LOG_LEVEL": "WARNING",
        # Many tests send refused credentials on purpose from one address; one test checks the throttle.
        "ENGRAM_AUTH_FAILURE_BURST": "100000",
        # Writes wait for all their vectors (up to ENGRAM_EMBED_SYNC_TEXTS): tests read by meaning what a
        # write made as soon as it returns, on however loaded a machine. The production budget is
        # tested where it is set (tests/test_embedding_pool.py); the benchmarks measure with it.
        "ENGRAM_EMBED_WRITE_BUDGET_MS": "10000",
        # The suite reads records: its servers declare output schemas, so every native answer carries
        # the complete record as structured content beside its concise text. The answers a default
        # server gives (text only) are tested in tests/test_answers.py and tests/test_tool_list.py.
        "ENGRAM_TOOL_OUTPUT_SCHEMAS": "true",
        **extra,
    }


# How long a test server may take to start: seconds on an idle machine, much longer on a loaded one
# (the embedding model loads on start). A bound on waiting, not a timing assertion.
START_SECONDS = 120


def start_server(env: dict[str, str], stdout: Any = None, cwd: Path = ROOT) -> subprocess.Popen[bytes]:
    """`engram serve` of the checkout `cwd` (its code), once it answers /healthz."""
    process = subprocess.Popen([sys.executable, "-m", "app.cli", "serve"], env=env, cwd=cwd, stdout=stdout)
    base = f"http://127.0.0.1:{env['ENGRAM_PORT']}"
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"engram serve exited with {process.returncode}")
        try:
            if httpx2.get(f"{base}/healthz", timeout=1).status_code == 200:
                return process
        except httpx2.TransportError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"engram serve did not answer /healthz within {START_SECONDS} s")


@contextmanager
def serve(db_settings: Settings, **extra: str) -> Iterator[Server]:
    """`engram serve` on a free port with extra ENGRAM_* settings, stopped on exit."""
    port = free_port()
    env = server_env(db_settings, port, **extra)
    settings = db_settings.model_copy(update={"port": port})
    process = start_server(env)
    try:
        yield Server(f"http://127.0.0.1:{port}/mcp", f"http://127.0.0.1:{port}", settings, env, process)
    finally:
        process.terminate()
        process.wait(timeout=30)


def serve_builtin(db_settings: Settings, **extra: str) -> AbstractContextManager[Server]:
    """`serve` with Engram's own authorization server, no embedding model, and its per-minute
    limits raised for a suite that signs in many times (`extra` overrides any of them)."""
    limits = {f"ENGRAM_{what}_PER_MINUTE": "1000" for what in ("REGISTER", "TOKEN", "AUTHORIZE")}
    return serve(db_settings, ENGRAM_AUTH_MODE="builtin", ENGRAM_EMBEDDING_PROVIDER="none", **(limits | extra))


@asynccontextmanager
async def open_database(
    dsn: str,
    *,
    min_size: int = 0,
    max_size: int = 4,
    create_tenants: bool = True,
    recycling: Recycling | None = None,
    statement_timeout_ms: int = 5000,
) -> AsyncIterator[Database]:
    """A pool on `dsn` with test-sized bounds (5 s statements, 30 s deadline), open for the block."""
    db = Database(
        dsn,
        min_size=min_size,
        max_size=max_size,
        statement_timeout_ms=statement_timeout_ms,
        acquire_seconds=10,
        call_deadline=30,
        create_tenants=create_tenants,
        recycling=recycling,
    )
    await db.open()
    try:
        yield db
    finally:
        await db.close()


@asynccontextmanager
async def scratch_database(db_settings: Settings, prefix: str) -> AsyncIterator[tuple[str, str]]:
    """A freshly migrated database of its own beside the suite's (for a test that registers another
    embedding model or changes what every tenant shares), dropped after: (app URL, owner URL)."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(db_settings.admin_dsn())
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    owner = db_settings.admin_dsn().rsplit("/", 1)[0] + "/" + name
    await migrate.migrate(owner, db_settings.migrations_dir)
    try:
        yield db_settings.runtime_dsn().rsplit("/", 1)[0] + "/" + name, owner
    finally:
        admin = await asyncpg.connect(db_settings.admin_dsn())
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        await admin.close()


def engram(env: dict[str, str], *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """`engram <args>` with this environment, its output captured; the bound is for a loaded machine
    (a migration over several cells takes longest), not a timing assertion."""
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=ROOT,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
    )
