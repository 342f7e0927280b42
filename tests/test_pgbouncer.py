"""Engram behind PgBouncer in transaction mode: no startup parameters, the run-time role's settings
checked, prepared statements surviving eviction, and no tenant context leaking from one client's
transaction to another's on the few server connections they share."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import httpx2
import pytest

from app.config import Settings
from app.devdb import provision
from app.devdb.pooler import PgBouncer
from app.observability.context import deadline
from app.store.database import Database, Tenant, Unavailable
from app.store.pool import ROLE_SETTINGS, Recycling, wrong_settings
from tests.support.client import ok
from tests.support.server import TEST_DB, free_port, open_database, serve

TENANTS = 24
ROUNDS = 8


@pytest.fixture(scope="module")
def narrow_bouncer(pgbouncer: PgBouncer) -> Iterator[PgBouncer]:
    """Two server connections for every client, and room for only 8 prepared statements on each:
    transactions of different tenants interleave on the same backends, and statements are evicted
    and prepared again all the time."""
    state = provision.LocalState.load()
    assert state is not None
    bouncer = PgBouncer(
        free_port(), state.port, {provision.APP_ROLE: state.app_password}, pool_size=2, max_prepared_statements=8
    )
    bouncer.start()
    yield bouncer
    bouncer.stop()


@pytest.fixture
async def pooled_db(db_settings: Settings, narrow_bouncer: PgBouncer) -> AsyncIterator[Database]:
    async with open_database(narrow_bouncer.url(provision.APP_ROLE, TEST_DB), max_size=8) as db:
        yield db


async def test_startup_parameters_are_refused_and_the_server_sends_none(pooled_db, narrow_bouncer):
    with pytest.raises(asyncpg.ProtocolViolationError, match="unsupported startup parameter: search_path"):
        await asyncpg.connect(
            narrow_bouncer.url(provision.APP_ROLE, TEST_DB), server_settings={"search_path": "ag_catalog, public"}
        )
    # The pool opened without any, and the role's own settings are in force on its connections.
    assert await pooled_db.run(wrong_settings) == []
    setting = await pooled_db.run(lambda c: c.fetchval("SELECT current_setting('search_path')"))
    assert setting == ROLE_SETTINGS["search_path"]


async def _context(conn: asyncpg.Connection) -> tuple[str, str, str, list[str]]:
    """Who the transaction runs as, the tenant pinned, its statement timeout, and which tenants'
    rows row-level security lets it see."""
    row = await conn.fetchrow(
        "SELECT current_user::text, coalesce(current_setting('engram.tenant_id', true), ''),"
        " current_setting('statement_timeout'), ARRAY(SELECT key FROM engram.tenants ORDER BY key)"
    )
    assert row is not None
    return (row[0], row[1], row[2], list(row[3]))


async def test_no_tenant_context_leaks_on_shared_server_connections(pooled_db):
    """Many tenants' transactions, committed, refused and abandoned at their deadline, interleaved on
    two server connections: each sees only itself, and work outside any tenant sees no tenant."""
    db = pooled_db
    tenants = [await db.tenant(f"sweep-{uuid.uuid4().hex[:10]}") for _ in range(TENANTS)]
    leaks: list[str] = []
    seen = 0

    async def as_tenant(t: Tenant, outcome: str, readonly: bool) -> None:
        nonlocal seen
        try:
            with deadline(0.3 if outcome == "expire" else 20):
                async with db.transaction(t, readonly=readonly) as tx:
                    context = await _context(tx.conn)
                    if context != (t.schema, t.id, "5s", [t.key]):
                        leaks.append(f"{t.key} saw {context}")
                    seen += 1
                    if outcome == "refuse":
                        raise LookupError("refused")
                    if outcome == "expire":
                        await tx.execute("SELECT pg_sleep(2)")
        except (LookupError, Unavailable):
            pass

    async def outside(pause: float) -> None:
        await asyncio.sleep(pause)
        context = await db.run(_context)
        if context != (provision.APP_ROLE, "", "10s", []):
            leaks.append(f"outside any tenant: {context}")

    rnd = random.Random(27)
    for _ in range(ROUNDS):
        work = [
            as_tenant(t, rnd.choice(("commit", "commit", "refuse", "expire")), rnd.random() < 0.5)
            for t in rnd.sample(tenants, TENANTS)
        ]
        work += [outside(rnd.random() / 100) for _ in range(TENANTS // 2)]
        await asyncio.gather(*work)
    assert leaks == []
    assert seen >= TENANTS * ROUNDS // 2  # all but those that lost their connection before the first query


async def test_every_tool_call_keeps_its_tenant_through_the_pooler(db_settings, narrow_bouncer):
    """Through the server: tenants writing and reading at once on two server connections each get
    back exactly their own entities."""
    pooled = db_settings.model_copy(update={"database_url": _secret(narrow_bouncer.url(provision.APP_ROLE, TEST_DB))})
    with serve(pooled, ENGRAM_EMBEDDING_PROVIDER="none", ENGRAM_TENANT_MAX_CONCURRENT="8") as server:
        assert httpx2.get(f"{server.base}/readyz", timeout=10).status_code == 200
        tenants = [f"tools-{uuid.uuid4().hex[:10]}" for _ in range(8)]

        async def work(tenant: str) -> list[str]:
            async with server.client(tenant) as c:
                for i in range(4):
                    ok(
                        await c.call_tool(
                            "upsert_entities",
                            {"entities": [{"name": f"{tenant}/{i}", "type": "own", "observations": [tenant]}]},
                        )
                    )
                found = ok(await c.call_tool("find_entities", {"limit": 50}))
                return sorted(e["name"] for e in found["entities"])

        results = await asyncio.gather(*(work(t) for t in tenants))
    for tenant, names in zip(tenants, results, strict=True):
        assert names == [f"{tenant}/{i}" for i in range(4)]


async def test_readyz_names_a_wrong_role_setting(db_settings):
    """A role setting that differs (here `jit`) keeps the server from being ready, and /readyz says
    which and the statement that fixes it. A direct connection: one opened after the change reads it."""
    admin = await asyncpg.connect(db_settings.admin_dsn())
    alter = f'ALTER ROLE {provision.APP_ROLE} IN DATABASE "{TEST_DB}" SET jit = '
    try:
        await admin.execute(alter + "on")
        direct = db_settings.model_copy(update={"database_url": _secret(db_settings.listen_dsn())})
        with serve(direct, ENGRAM_EMBEDDING_PROVIDER="none") as server:
            answer = httpx2.get(f"{server.base}/readyz", timeout=10)
        assert answer.status_code == 503
        reason = answer.json()["reason"]
        assert "jit is 'on'" in reason
        assert f"ALTER ROLE {provision.APP_ROLE} IN DATABASE {TEST_DB} SET jit = off" in reason
    finally:
        await admin.execute(alter + "off")
        await admin.close()


async def test_connections_are_recycled_after_their_queries(db_settings):
    async with open_database(db_settings.runtime_dsn(), min_size=1, max_size=1, recycling=Recycling(queries=100)) as db:
        pids = {await db.run(lambda c: c.fetchval("SELECT pg_backend_pid()")) for _ in range(250)}
    assert len(pids) >= 2


def _secret(value: str) -> Any:
    from pydantic import SecretStr

    return SecretStr(value)
