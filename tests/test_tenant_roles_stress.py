"""New tenants enter their roles while other servers start and `engram migrate` runs against the
same database: each tenant's first call, made at once on whichever server, is never refused its
role (`tenant_role_refused`, "permission denied to set role"), and each role's grant is there.

Real parts only: `engram serve` processes, `engram migrate` runs and MCP clients over HTTP, on a
freshly migrated database of the test's own. Bounded in size (a few tenants per server), not in
time; a call the loaded machine answers `unavailable` for time (statement_timeout, deadline) is
made again, since what is tested is the role, not the machine's speed.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import asyncpg
import pytest

from app.config import Settings
from tests.support.client import connect
from tests.support.server import Server, engram, free_port, scratch_database, server_env, start_server

TENANTS_PER_SERVER = 4  # made at once on each server (a new tenant's objects are made one at a time)
MIGRATIONS = 2  # `engram migrate` runs beside them
ATTEMPTS = 5  # per tenant, for answers about time on a loaded machine


@pytest.fixture
async def scratch(db_settings: Settings) -> AsyncIterator[tuple[str, str]]:
    async with scratch_database(db_settings, "roles") as urls:
        yield urls


@contextmanager
def serving(db_settings: Settings, urls: tuple[str, str]) -> Iterator[Server]:
    """`engram serve` on the scratch database, free ports, no embedding model (started in seconds)."""
    port = free_port()
    env = server_env(
        db_settings,
        port,
        ENGRAM_DATABASE_URL=urls[0],
        ENGRAM_ADMIN_DATABASE_URL=urls[1],
        ENGRAM_LISTEN_DATABASE_URL=urls[0],
        ENGRAM_EMBEDDING_PROVIDER="none",
    )
    process = start_server(env)
    try:
        settings = db_settings.model_copy(update={"port": port})
        yield Server(f"http://127.0.0.1:{port}/mcp", f"http://127.0.0.1:{port}", settings, env, process)
    finally:
        process.terminate()
        process.wait(timeout=30)


async def first_calls(server: Server, count: int) -> tuple[list[str], list[str]]:
    """`count` new tenants' first calls on `server` at once: (their keys, the answers that were not
    success nor `unavailable` for time)."""

    async def one(key: str) -> str | None:
        async with connect(server.url, server.token(key)) as c:
            for _ in range(ATTEMPTS):
                result: Any = await c.call_tool("upsert_entities", {"entities": [{"name": "Ada", "type": "person"}]})
                text = result.content[0].text if result.is_error else ""
                if not result.is_error:
                    return None
                if "tenant_role_refused" in text or not any(r in text for r in ("statement_timeout", "deadline")):
                    return f"{key}: {text}"
                await asyncio.sleep(1)
            return f"{key}: still unavailable after {ATTEMPTS} attempts"

    keys = [f"roles-{uuid.uuid4().hex[:12]}" for _ in range(count)]
    answers = await asyncio.gather(*(one(k) for k in keys))
    return keys, [a for a in answers if a is not None]


async def test_new_tenants_enter_their_roles_while_servers_start_and_migrate(db_settings, scratch):
    owner_env = {**server_env(db_settings, free_port()), "ENGRAM_DATABASE_URL": scratch[1]}
    migrated: list[int] = []
    started: list[Server] = []

    def migrate_beside() -> None:
        for _ in range(MIGRATIONS):
            migrated.append(engram(owner_env, "migrate").returncode)

    with ExitStack() as stack:
        first = stack.enter_context(serving(db_settings, scratch))
        runner = threading.Thread(target=migrate_beside)
        starter = threading.Thread(target=lambda: started.append(stack.enter_context(serving(db_settings, scratch))))
        runner.start()
        starter.start()
        keys, failed = await first_calls(first, TENANTS_PER_SERVER)  # while another starts and migrate runs
        await asyncio.to_thread(starter.join)
        for more_keys, more_failed in await asyncio.gather(
            *(first_calls(s, TENANTS_PER_SERVER) for s in [first, *started])
        ):
            keys += more_keys
            failed += more_failed
        await asyncio.to_thread(runner.join)
    assert len(started) == 1 and migrated == [0] * MIGRATIONS
    assert failed == [], failed
    owner = await asyncpg.connect(scratch[1])
    try:  # every tenant made, each role granted to the run-time role for SET ROLE
        granted = await owner.fetchval(
            "SELECT count(*) FROM engram.tenants WHERE key = ANY($1::text[])"
            " AND pg_has_role('engram_app', schema_name, 'SET')",
            keys,
        )
    finally:
        await owner.close()
    assert granted == len(keys) == 3 * TENANTS_PER_SERVER
