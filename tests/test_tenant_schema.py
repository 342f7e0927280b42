"""A tenant is exactly one schema: its audit log, pending-embedding marker, usage counts and limit
overrides live there (moved from the shared tables on upgrade, nothing lost), its role cannot reach
another tenant's, the administration walks tenants, and no tenant transaction writes any table of
schema `engram` but the global ones listed here with their reason (docs/scaling.md)."""

from __future__ import annotations

import asyncio
import json
import shutil
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from app.auth.principal import ADMIN, READ, WRITE
from app.config import Settings
from app.devdb import provision
from app.store import audit, migrate, tenants
from app.store.database import Tenant
from tests.support.client import MUTATING, READS, connect
from tests.support.server import TEST_DB, Server, free_port, server_env, start_server

# Tables of schema `engram` a tenant's tool calls may write, and why they are global.
GLOBAL_WRITES = {
    # Rate tokens: shared by every replica and taken before the tenant's transaction (control plane).
    "rate_buckets",
    # API keys are looked up by their id before any tenant is known (create_api_key / revoke_api_key).
    "api_keys",
}


@pytest.fixture
async def fresh(db_settings: Settings) -> AsyncIterator[str]:
    """An empty database of its own (owner URL); dropped afterwards with the tenant roles made in it."""
    name = f"{TEST_DB}_schema_{uuid.uuid4().hex[:8]}"
    server = await asyncpg.connect(provision.on_database(db_settings.admin_dsn(), "postgres"))
    await server.execute(f'CREATE DATABASE "{name}"')
    url = provision.on_database(db_settings.admin_dsn(), name)
    try:
        yield url
    finally:
        roles: list[str] = []
        try:
            conn = await asyncpg.connect(url)
            roles = [r[0] for r in await conn.fetch("SELECT schema_name FROM engram.tenants")]
            await conn.close()
        except asyncpg.PostgresError:
            pass
        await server.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        for role in roles:
            await server.execute(f"DROP ROLE IF EXISTS {role}")
        await server.close()


async def _made_before(conn: asyncpg.Connection, key: str) -> Tenant:
    row = await conn.fetchrow("SELECT tenant_id::text, schema_name FROM engram.tenant_schema($1, true)", key)
    assert row is not None
    return Tenant(row[0], key, row[1])


async def test_upgrade_moves_every_tenant_row_into_its_schema(db_settings: Settings, fresh: str, tmp_path: Path):
    before = tmp_path / "migrations"
    before.mkdir()
    for f in sorted(db_settings.migrations_dir.glob("*.sql")):
        if f.name < "0025":
            shutil.copy(f, before)
    await migrate.migrate(fresh, before)
    conn = await asyncpg.connect(fresh)
    try:
        # made as the previous version made them (its function; today's store knows newer columns)
        a, b = [await _made_before(conn, key) for key in ("upgrade-a", "upgrade-b")]
        for tenant, tool, days_ago in ((a, "one", 3), (a, "two", 2), (b, "other", 2), (a, "three", 1)):
            await conn.execute(
                "INSERT INTO engram.audit (tenant_id, at, subject, client_id, tool, affected, outcome, duration_ms,"
                " request_id) VALUES ($1::uuid, now() - make_interval(days => $2), 'sub', 'cli', $3, '{x}', 'ok', 1.5,"
                " 'req')",
                tenant.id,
                days_ago,
                tool,
            )
        await conn.execute("INSERT INTO engram.index_pending (tenant_id, generation) VALUES ($1::uuid, 7)", a.id)
        yesterday = date.today() - timedelta(days=1)
        await conn.execute(
            "INSERT INTO engram.usage VALUES ($1::uuid, $3, 'upsert_entities', 5, 1),"
            " ($2::uuid, $3, 'get_entity', 2, 0)",
            a.id,
            b.id,
            yesterday,
        )
        await conn.execute(
            "INSERT INTO engram.tenant_limits (tenant_id, rate, burst, max_entities) VALUES ($1::uuid, 3, 9, 100)",
            a.id,
        )

        await migrate.migrate(fresh, db_settings.migrations_dir)

        s = a.schema
        assert [(r["id"], r["tool"]) for r in await conn.fetch(f"SELECT id, tool FROM {s}.audit ORDER BY id")] == [
            (1, "one"),
            (2, "two"),
            (4, "three"),
        ]  # the ids are kept: audit_log cursors name them
        assert [r["tool"] for r in await conn.fetch(f"SELECT tool FROM {b.schema}.audit")] == ["other"]
        new_id = await conn.fetchval(
            f"INSERT INTO {s}.audit (subject, client_id, tool, outcome, duration_ms, request_id)"
            " VALUES ('sub', 'cli', 'four', 'ok', 1, 'req') RETURNING id"
        )
        assert new_id == 5  # the identity continues after the rows moved in
        assert await conn.fetchval(f"SELECT generation FROM {s}.index_pending") == 7
        assert await conn.fetchval(f"SELECT count(*) FROM {b.schema}.index_pending") == 0
        assert [tuple(r) for r in await conn.fetch(f"SELECT day, tool, calls, errors FROM {s}.usage")] == [
            (yesterday, "upsert_entities", 5, 1)
        ]
        assert [tuple(r) for r in await conn.fetch(f"SELECT tool, calls FROM {b.schema}.usage")] == [("get_entity", 2)]
        limits = await conn.fetchrow(f"SELECT rate, burst, max_entities, max_concurrent FROM {s}.limits")
        assert tuple(limits or ()) == (3.0, 9, 100, None)
        for table in ("audit", "index_pending", "usage", "tenant_limits"):
            assert await conn.fetchval(f"SELECT count(*) FROM engram.{table}") == 0, table
        view = await tenants.show(conn, "upgrade-a")
        assert view.limits == {"rate": 3.0, "burst": 9, "max_entities": 100}
    finally:
        await conn.close()


async def _denied(conn: asyncpg.Connection, role: str, statement: str) -> bool:
    try:
        async with conn.transaction():
            await conn.execute(f"SET LOCAL ROLE {role}")
            await conn.execute(statement)
    except asyncpg.InsufficientPrivilegeError:
        return True
    return False


async def test_a_tenant_role_reaches_only_its_own_rows_and_only_as_before(db_settings: Settings, fresh: str):
    await migrate.migrate(fresh, db_settings.migrations_dir)
    conn = await asyncpg.connect(fresh)
    try:
        a = await tenants.create(conn, "role-a")
        b = await tenants.create(conn, "role-b")
        assert not await _denied(conn, a.schema, f"SELECT * FROM {a.schema}.audit, {a.schema}.usage, {a.schema}.limits")
        assert not await _denied(
            conn,
            a.schema,
            f"INSERT INTO {a.schema}.audit (subject, client_id, tool, outcome, duration_ms, request_id)"
            " VALUES ('s', 'c', 't', 'ok', 1, 'r')",
        )
        assert not await _denied(conn, a.schema, f"INSERT INTO {a.schema}.index_pending DEFAULT VALUES")
        for statement in (
            f"UPDATE {a.schema}.audit SET tool = 'forged'",  # the log is appended to, never rewritten
            f"DELETE FROM {a.schema}.audit",
            f"INSERT INTO {a.schema}.usage (day, tool) VALUES (current_date, 'x')",  # usage: the flusher's
            f"UPDATE {a.schema}.limits SET rate = 0",  # limits: the administration's
            f"INSERT INTO {a.schema}.limits (rate) VALUES (0)",
            f"SELECT * FROM {b.schema}.audit",  # another tenant's rows
            f"SELECT * FROM {b.schema}.usage",
            f"SELECT * FROM {b.schema}.limits",
            f"DELETE FROM {b.schema}.index_pending",
        ):
            assert await _denied(conn, a.schema, statement), statement
    finally:
        await conn.close()


async def test_admin_views_and_cleanup_walk_every_tenant(db_settings: Settings, fresh: str):
    await migrate.migrate(fresh, db_settings.migrations_dir)
    conn = await asyncpg.connect(fresh)
    try:
        made = [await tenants.create(conn, f"admin-{i}") for i in range(3)]
        # Audit rows of three tenants, interleaved in time; two of them past a year's retention.
        for n, (t, days_ago) in enumerate([(0, 400), (1, 5), (2, 4), (0, 3), (1, 2), (2, 1), (1, 500)]):
            await conn.execute(
                f"INSERT INTO {made[t].schema}.audit (at, subject, client_id, tool, outcome, duration_ms, request_id)"
                " VALUES (now() - make_interval(days => $1), 's', 'c', $2, 'ok', 1, 'r')",
                days_ago,
                f"tool{n}",
            )
        newest = await audit.admin_page(conn, None, 3, None)
        assert [(r.tenant, r.tool) for r in newest] == [
            ("admin-2", "tool5"),
            ("admin-1", "tool4"),
            ("admin-0", "tool3"),
        ]
        assert [r.tool for r in await audit.admin_page(conn, "admin-1", 10, None)] == ["tool4", "tool1", "tool6"]
        since = datetime.now(UTC) - timedelta(days=4, hours=12)
        assert [r.tool for r in await audit.admin_page(conn, None, 10, since)] == ["tool5", "tool4", "tool3", "tool2"]
        assert await audit.admin_page(conn, "nobody", 10, None) == []

        assert await audit.cleanup(conn, 365) == 2
        assert sorted(r.tool for r in await audit.admin_page(conn, None, 10, None)) == [
            "tool1",
            "tool2",
            "tool3",
            "tool4",
            "tool5",
        ]

        # Usage counts of several tenants in one flush (and a key no tenant has), added up per tenant.
        counts = [
            {"tenant": "admin-0", "tool": "get_entity", "calls": 2, "errors": 0},
            {"tenant": "admin-2", "tool": "get_entity", "calls": 1, "errors": 1},
            {"tenant": "admin-0", "tool": "get_entity", "calls": 3, "errors": 1},
            {"tenant": "gone", "tool": "get_entity", "calls": 9, "errors": 0},
        ]
        await conn.execute("SELECT engram.add_usage($1::jsonb)", json.dumps(counts))
        await conn.execute("SELECT engram.add_usage($1::jsonb)", json.dumps(counts[:1]))
        today = date.today()
        assert [(r.tenant, r.day, r.tool, r.calls, r.errors) for r in await audit.usage(conn, None, 7)] == [
            ("admin-0", today, "get_entity", 7, 1),
            ("admin-2", today, "get_entity", 1, 1),
        ]
        assert [r.tenant for r in await audit.usage(conn, "admin-2", 7)] == ["admin-2"]

        await tenants.set_limits(conn, "admin-1", {"rate": 2.5, "max_entities": 10})
        await tenants.set_limits(conn, "admin-1", {"rate": None})
        assert (await tenants.show(conn, "admin-1")).limits == {"max_entities": 10}
        assert (await tenants.show(conn, "admin-0")).limits == {}

        # The filler's "which tenants have pending work": each tenant's own marker, a page at a time.
        for t in (made[0], made[2]):
            await conn.execute(f"INSERT INTO {t.schema}.index_pending DEFAULT VALUES")
        first = await conn.fetch("SELECT * FROM engram.search_tenants(true, NULL, NULL, 1)")
        assert [r["key"] for r in first] == ["admin-0"]
        rest = await conn.fetch(
            "SELECT * FROM engram.search_tenants(true, $1, $2, 10)", first[0]["created_at"], first[0]["tenant_id"]
        )
        assert [r["key"] for r in rest] == ["admin-2"]
        every = await conn.fetch("SELECT * FROM engram.search_tenants(false, NULL, NULL, 10)")
        assert [r["key"] for r in every] == ["admin-0", "admin-1", "admin-2"]
    finally:
        await conn.close()


async def _fingerprints(url: str) -> dict[str, str]:
    """Every table of schema `engram`, as a digest of all its rows."""
    conn = await asyncpg.connect(url)
    try:
        names = [
            r[0]
            for r in await conn.fetch(
                "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = 'engram' AND c.relkind IN ('r', 'p') ORDER BY 1"
            )
        ]
        return {
            name: await conn.fetchval(
                f"SELECT md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) FROM engram.{name} x"
            )
            for name in names
        }
    finally:
        await conn.close()


async def test_no_tenant_call_writes_outside_its_schema(db_settings: Settings, fresh: str):
    await migrate.migrate(fresh, db_settings.migrations_dir)
    runtime = provision.on_database(db_settings.runtime_dsn(), fresh.rsplit("/", 1)[1])
    port = free_port()
    env = server_env(
        db_settings,
        port,
        ENGRAM_DATABASE_URL=runtime,
        ENGRAM_ADMIN_DATABASE_URL=fresh,
        ENGRAM_LISTEN_DATABASE_URL=runtime,
        ENGRAM_TOOL_SETS="native,memory,neo4j,chatgpt",
        ENGRAM_USAGE_FLUSH_SECONDS="0.2",
    )
    process = start_server(env)
    try:
        settings = db_settings.model_copy(update={"port": port})
        s = Server(f"http://127.0.0.1:{port}/mcp", f"http://127.0.0.1:{port}", settings, env, process)
        tenant = f"one-{uuid.uuid4().hex[:8]}"
        token = s.token(tenant, scopes=(READ, WRITE, ADMIN))
        async with connect(s.url, token) as c:
            await c.call_tool("graph_stats", {})  # the tenant is made by its first call
        await asyncio.sleep(1)  # that call's usage flushed
        before = await _fingerprints(fresh)
        called: list[str] = []
        for tool_set in ("native", "memory", "neo4j", "chatgpt"):
            async with connect(s.at(tool_set).url, token) as c:
                for tool in (await c.list_tools()).tools:
                    args = MUTATING.get(tool.name) or READS.get(tool.name) or {}
                    await c.call_tool(tool.name, args)  # refused calls count too: they must write nothing
                    called.append(tool.name)
        assert {"upsert_entities", "audit_log", "query_graph", "create_entities"} <= set(called), called
        await asyncio.sleep(1)  # the calls' usage flushed
        after = await _fingerprints(fresh)
        changed = {name for name in before if before[name] != after.get(name)}
        assert changed <= GLOBAL_WRITES, changed
        conn = await asyncpg.connect(fresh)
        try:
            schema = await conn.fetchval("SELECT schema_name FROM engram.tenants WHERE key = $1", tenant)
            audited = {r[0] for r in await conn.fetch(f"SELECT tool FROM {schema}.audit")}
            assert "upsert_entities" in audited and audited <= set(called)  # the calls were audited, in its schema
            used = await conn.fetchval(f"SELECT calls FROM {schema}.usage WHERE tool = 'upsert_entities'")
            assert used >= 1  # the usage flush wrote the tenant's counts into its schema
        finally:
            await conn.close()
    finally:
        process.terminate()
        process.wait(timeout=30)
