"""Isolation enforced by the database itself, checked as the run-time role with plain SQL."""

from __future__ import annotations

import asyncpg
import pytest

from tests.support.client import ok


async def _ctx(conn: asyncpg.Connection, tenant_id: str, role: str) -> None:
    await conn.execute("SELECT set_config('engram.tenant_id', $1, true), set_config('role', $2, true)", tenant_id, role)


async def test_runtime_role_sees_only_the_tenant_of_its_transaction(db_settings, client_for, tenant):
    other = tenant + "-b"
    for name in (tenant, other):
        async with client_for(name) as c:
            ok(await c.call_tool("upsert_entities", {"entities": [{"name": f"{name} secret", "type": "t"}]}))
    admin = await asyncpg.connect(db_settings.admin_dsn())
    ids = {
        r["key"]: (str(r["id"]), r["schema_name"])
        for r in await admin.fetch(
            "SELECT id, key, schema_name FROM engram.tenants WHERE key = ANY($1)", [tenant, other]
        )
    }
    await admin.close()
    (a_id, a_schema), (b_id, b_schema) = ids[tenant], ids[other]

    conn = await asyncpg.connect(db_settings.runtime_dsn())
    try:
        role = await conn.fetchrow(
            "SELECT rolsuper, rolbypassrls, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname = current_user"
        )
        assert tuple(role) == (False, False, False, False)
        # No tenant context: tenant schemas are out of reach, shared tenant rows invisible.
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.fetch(f"SELECT name FROM {a_schema}.entities")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.fetch(f'SELECT * FROM {a_schema}."Entity"')
        assert await conn.fetch("SELECT * FROM engram.tenants") == []
        assert await conn.fetch("SELECT * FROM engram.api_keys") == []

        async with conn.transaction():
            await _ctx(conn, a_id, a_schema)
            assert [r[0] for r in await conn.fetch(f"SELECT name FROM {a_schema}.entities")] == [f"{tenant} secret"]
            assert [r["key"] for r in await conn.fetch("SELECT key FROM engram.tenants")] == [tenant]
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.fetch(f"SELECT name FROM {b_schema}.entities")
        async with conn.transaction():
            await _ctx(conn, a_id, a_schema)
            with pytest.raises(asyncpg.InsufficientPrivilegeError):  # Cypher on B's graph is refused too
                await conn.fetch(
                    f"SELECT * FROM ag_catalog.cypher('{b_schema}', $$ MATCH (n) RETURN n $$) AS (n ag_catalog.agtype)"
                )
        async with conn.transaction():  # a tenant id that does not match the role shows no shared rows
            await _ctx(conn, b_id, a_schema)
            assert [r["key"] for r in await conn.fetch("SELECT key FROM engram.tenants")] == [other]
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.fetch(f"SELECT name FROM {b_schema}.entities")
        assert await conn.fetchval("SELECT current_user") == "engram_app"  # the context ended with the transaction
    finally:
        await conn.close()
