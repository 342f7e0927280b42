"""The database wall: what a tenant transaction cannot do even with SQL of its own.

Asked of PostgreSQL itself (privilege functions), then tried as the run-time role inside a real
tenant transaction, where every attempt must fail with `permission denied` and change nothing.
"""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from app.store.connect import init_connection
from tests.support.client import ok

# AGE's graph DDL and bulk loaders, and the large-object and WAL-message functions (docs/security.md).
AGE_DDL = (
    "create_graph",
    "drop_graph",
    "alter_graph",
    "create_vlabel",
    "create_elabel",
    "drop_label",
    "load_labels_from_file",
    "load_edges_from_file",
    "create_complete_graph",
    "age_create_barbell_graph",
)
LARGE_OBJECTS = ("lo_create", "lo_creat", "lo_from_bytea", "lo_put", "lo_open", "lo_get", "lo_unlink")
SERVER_FILES = ("pg_read_file", "pg_read_binary_file", "pg_ls_dir", "pg_stat_file", "lo_import", "lo_export")


async def _tenants(db_settings, client_for, *keys: str) -> list[tuple[str, str]]:
    """Tenants made the normal way (a tool call each); their (id, schema)."""
    for key in keys:
        async with client_for(key) as c:
            ok(await c.call_tool("upsert_entities", {"entities": [{"name": f"{key} secret", "type": "t"}]}))
    admin = await asyncpg.connect(db_settings.admin_dsn())
    try:
        rows = {
            r["key"]: (str(r["id"]), r["schema_name"])
            for r in await admin.fetch("SELECT id, key, schema_name FROM engram.tenants WHERE key = ANY($1)", keys)
        }
    finally:
        await admin.close()
    return [rows[k] for k in keys]


async def _enter(conn: asyncpg.Connection, tenant_id: str, role: str) -> None:
    """The server's tenant context (store.database.Database.transaction), opened by hand."""
    await conn.execute("SELECT set_config('engram.tenant_id', $1, true), set_config('role', $2, true)", tenant_id, role)


async def test_postgres_says_tenant_roles_hold_none_of_it(db_settings, client_for, tenant):
    [(_, schema)] = await _tenants(db_settings, client_for, tenant)
    conn = await asyncpg.connect(db_settings.runtime_dsn())
    try:
        roles = ["engram_app", "engram_tenant", schema]
        executable = await conn.fetch(
            """
            SELECT r AS role, p.oid::regprocedure::text AS fn
            FROM pg_proc p, unnest($1::text[]) AS r
            WHERE (p.pronamespace = 'ag_catalog'::regnamespace AND p.proname = ANY($2))
               OR (p.pronamespace = 'pg_catalog'::regnamespace AND p.proname = ANY($3))
               OR p.pronamespace = 'engram'::regnamespace AND p.proname LIKE 'tenant_step_%'
            GROUP BY r, p.oid HAVING bool_or(has_function_privilege(r, p.oid, 'EXECUTE'))
            """,
            roles,
            list(AGE_DDL),
            [*LARGE_OBJECTS, *SERVER_FILES, "pg_logical_emit_message"],
        )
        assert [tuple(r) for r in executable] == []
        # Every overload was looked at: AGE 1.5 has one of each DDL function.
        found = await conn.fetchval(
            "SELECT count(DISTINCT proname) FROM pg_proc WHERE pronamespace = 'ag_catalog'::regnamespace"
            " AND proname = ANY($1)",
            list(AGE_DDL),
        )
        assert found == len(AGE_DDL)
        for role in roles:
            for privilege in ("TEMPORARY", "CREATE"):
                assert not await conn.fetchval(
                    "SELECT has_database_privilege($1, current_database(), $2)", role, privilege
                ), (role, privilege)
            assert not await conn.fetchval("SELECT has_schema_privilege($1, 'ag_catalog', 'CREATE')", role)
            assert not await conn.fetchval("SELECT has_schema_privilege($1, 'public', 'CREATE')", role)
        # What a tenant transaction still needs: Cypher and AGE's types.
        assert await conn.fetchval(
            "SELECT has_function_privilege($1, 'ag_catalog.cypher(name, cstring, ag_catalog.agtype)', 'EXECUTE')",
            schema,
        )
    finally:
        await conn.close()


async def test_a_tenant_transaction_is_refused_everything_outside_its_graph(db_settings, client_for, tenant):
    (a_id, a_schema), (_, b_schema) = await _tenants(db_settings, client_for, tenant, tenant + "-b")
    attempts = [
        "SELECT ag_catalog.create_graph('t_00000000000000000000000000000000')",
        f"SELECT ag_catalog.drop_graph('{b_schema}', true)",
        f"SELECT ag_catalog.drop_graph('{a_schema}', true)",
        f"SELECT ag_catalog.create_vlabel('{b_schema}', 'Planted')",
        f"SELECT ag_catalog.create_elabel('{b_schema}', 'PLANTED')",
        f"SELECT ag_catalog.drop_label('{b_schema}', 'Entity', true)",
        f"SELECT ag_catalog.alter_graph('{b_schema}', 'RENAME', 't_ffffffffffffffffffffffffffffffff')",
        # Arguments that could not hurt even if the call ran: a missing file.
        f"SELECT ag_catalog.load_labels_from_file('{b_schema}', 'Entity', '/nonexistent/engram.csv', true)",
        f"SELECT ag_catalog.load_edges_from_file('{b_schema}', 'REL', '/nonexistent/engram.csv')",
        "SELECT ag_catalog.create_complete_graph('t_eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee', 3, 'E', 'V')",
        "SELECT lo_create(0)",
        "SELECT lo_from_bytea(0, 'x'::bytea)",
        "SELECT pg_logical_emit_message(false, 'engram', 'x')",
        "SELECT pg_read_file('/etc/hostname')",
        "SELECT lo_import('/etc/hostname')",
        "COPY (SELECT 1) TO '/tmp/engram-wall-test'",
        "CREATE TEMP TABLE planted (x int)",
        "CREATE TABLE public.planted (x int)",
        f"CREATE TABLE {a_schema}.planted (x int)",
        "CREATE SCHEMA planted",
        "CREATE EXTENSION dblink",
        "CREATE EXTENSION file_fdw",
        f"SELECT engram.tenant_step_0002('{b_schema}')",
        "SELECT * FROM ag_catalog.ag_graph",
        "SELECT name FROM engram.server_secrets",
    ]
    conn = await asyncpg.connect(db_settings.runtime_dsn())
    try:
        for sql in attempts:
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                async with conn.transaction():
                    await _enter(conn, a_id, a_schema)
                    await conn.execute(sql)
            assert await conn.fetchval("SELECT current_user") == "engram_app", sql
        # Nothing moved: both graphs and their labels are as the server made them.
        admin = await asyncpg.connect(db_settings.admin_dsn())
        try:
            labels = await admin.fetch(
                "SELECT g.name::text AS graph, l.name::text AS label FROM ag_catalog.ag_label l"
                " JOIN ag_catalog.ag_graph g ON g.graphid = l.graph WHERE g.name = ANY($1) ORDER BY 1, 2",
                [a_schema, b_schema],
            )
            assert [tuple(r) for r in labels] == sorted(
                (g, lbl)
                for g in (a_schema, b_schema)
                for lbl in ("Entity", "REL", "_ag_label_edge", "_ag_label_vertex")
            )
            assert await admin.fetchval("SELECT count(*) FROM pg_largeobject_metadata") == 0
        finally:
            await admin.close()
    finally:
        await conn.close()


async def test_tools_still_work_behind_the_wall(client_for, tenant):
    async with client_for(tenant) as c:
        ok(
            await c.call_tool(
                "upsert_entities", {"entities": [{"name": "Ada", "type": "person"}, {"name": "Acme", "type": "org"}]}
            )
        )
        ok(await c.call_tool("connect_entities", {"relations": [{"from": "Ada", "to": "Acme", "type": "works at"}]}))
        got = ok(await c.call_tool("neighbors", {"entity": "Ada"}))
        assert [n["entity"]["name"] for n in got["neighbors"]] == ["Acme"]
        assert ok(await c.call_tool("search", {"query": "Ada", "mode": "keyword"}))["hits"]


_CYPHER_TRUE = "pg_catalog.bool(pg_catalog.int4(1::pg_bigint))"


def _cypher_text(word: str) -> str:
    """A SQL text value built inside Cypher from numbers (AGE casts numbers to SQL types, not strings)."""
    chars = [f"pg_catalog.chr(pg_catalog.int4({ord(c)}::pg_bigint))" for c in word]
    built = chars[0]
    for c in chars[1:]:
        built = f"pg_catalog.textcat({built}, {c})"
    return built


async def test_a_tenant_transaction_cannot_change_role_or_tenant_setting(db_settings, client_for, tenant):
    """Every way one query can change the role or the tenant setting is refused to a tenant role
    (docs/auth.md, "Switching tenants"): set_config directly, qualified, nested in a query that a
    function runs (query_to_xml, ts_stat), through the pg_settings update rule, a DO block, and from
    Cypher; session_authorization is the superuser's alone. The run-time role still opens the context."""
    (a_id, a_schema), (b_id, b_schema) = await _tenants(db_settings, client_for, tenant, tenant + "-b")
    # Built as the server builds its pool's connections, so that only the attempts touch set_config.
    conn = await asyncpg.connect(db_settings.runtime_dsn(), server_settings={"jit": "off"})
    await init_connection(conn)
    nested = f"SELECT set_config(''role'', ''{b_schema}'', true)"
    attempts = [
        f"SELECT set_config('role', '{b_schema}', true)",
        f"SELECT pg_catalog.set_config('role', '{b_schema}', false)",
        f"SELECT set_config('engram.tenant_id', '{b_id}', true)",
        "SELECT set_config('session_authorization', 'engram_app', true)",
        "SELECT set_config('role', 'none', true)",
        f"UPDATE pg_settings SET setting = '{b_schema}' WHERE name = 'role'",
        f"UPDATE pg_settings SET setting = '{b_id}' WHERE name = 'engram.tenant_id'",
        f"SELECT query_to_xml('{nested}', true, false, '')",
        f"SELECT ts_stat('SELECT to_tsvector(set_config(''role'', ''{b_schema}'', true))')",
        f"DO $$ BEGIN PERFORM set_config('role', '{b_schema}', true); END $$",
        # AGE calls any qualified SQL function; text arguments can be built from numbers.
        f"SELECT * FROM ag_catalog.cypher('{a_schema}', $$ RETURN pg_catalog.int8(pg_catalog.length("
        f"pg_catalog.set_config({_cypher_text('role')}, {_cypher_text('none')}, {_CYPHER_TRUE})))"
        " $$) AS (r ag_catalog.agtype)",
    ]
    try:
        for sql in attempts:
            with pytest.raises(asyncpg.InsufficientPrivilegeError, match="permission denied for function set_config"):
                async with conn.transaction():
                    await _enter(conn, a_id, a_schema)
                    await conn.execute(sql)
        async with conn.transaction():
            await _enter(conn, a_id, a_schema)
            assert await conn.fetchval("SELECT current_user") == a_schema
            assert await conn.fetchval("SELECT current_setting('engram.tenant_id')") == a_id
        assert await conn.fetchval("SELECT current_user") == "engram_app"
        # Asked of PostgreSQL: no tenant role holds set_config; the run-time role does.
        assert not await conn.fetchval(
            "SELECT bool_or(has_function_privilege(r.oid, 'pg_catalog.set_config(text, text, boolean)', 'EXECUTE'))"
            " FROM pg_roles r WHERE r.rolname ~ '^t_[0-9a-f]{32}$' OR r.rolname IN ('engram_tenant', 'public')"
        )
    finally:
        await conn.close()


async def test_residual_a_separate_statement_can_still_switch_roles(db_settings, client_for, tenant):
    """What the database still does not stop (docs/auth.md): the SET ROLE, RESET ROLE and SET SESSION
    AUTHORIZATION *statements* (no privilege governs them) are checked against the session user,
    engram_app, a member of every tenant role. No query reaches them (a Cypher query is one SELECT);
    only a statement text of the server's own could. If this test fails, the gap was closed: update
    docs/auth.md and docs/security.md."""
    (a_id, a_schema), (_, b_schema) = await _tenants(db_settings, client_for, tenant, tenant + "-b")
    conn = await asyncpg.connect(db_settings.runtime_dsn())
    try:
        for statement, becomes in (
            (f"SET LOCAL ROLE {b_schema}", b_schema),
            ("RESET ROLE", "engram_app"),
            ("SET SESSION AUTHORIZATION engram_app", "engram_app"),
        ):
            async with conn.transaction():
                await _enter(conn, a_id, a_schema)
                await conn.execute(statement)
                assert await conn.fetchval("SELECT current_user") == becomes
            await conn.execute("RESET SESSION AUTHORIZATION")
        # ... but no query reaches them: functions that run SQL text run it read-only.
        for query in (
            f"SELECT query_to_xml('SET ROLE {b_schema}', true, false, '')",
            "SELECT query_to_xml('SELECT 1; RESET ROLE', true, false, '')",
            "SELECT query_to_xml('SET SESSION AUTHORIZATION engram_app', true, false, '')",
            f"SELECT ts_stat('SET ROLE {b_schema}')",
        ):
            with pytest.raises((asyncpg.FeatureNotSupportedError, asyncpg.InvalidCursorDefinitionError)):
                async with conn.transaction():
                    await _enter(conn, a_id, a_schema)
                    await conn.execute(query)
    finally:
        await conn.close()


KEY_FUNCTIONS = (
    "engram.create_api_key(text, bytea, text, text[], timestamptz, text, text, text, real, text)",
    "engram.revoke_api_key(text, text, text, text, real, text)",
)
CREATE_KEY = (
    "SELECT engram.create_api_key($1, $2, 'k', ARRAY['memory:read'], NULL, 'someone', 'c', 'console:x', 1, 'r')"
)


def _create_sql(
    key_id: str = "'cccccccccccc'",
    name: str = "'k'",
    scopes: str = "ARRAY['memory:read']",
    expires: str = "NULL",
    subject: str = "'s'",
    tool: str = "'console:x'",
) -> str:
    """engram.create_api_key() with one argument spoiled (SQL literals; the hash is $1)."""
    return f"SELECT engram.create_api_key({key_id}, $1, {name}, {scopes}, {expires}, {subject}, 'c', {tool}, 1, 'r')"


async def test_api_keys_are_written_only_through_functions_bound_to_the_tenant_transaction(
    db_settings, client_for, tenant
):
    """The run-time role reads engram.api_keys and cannot write it; the definer functions the
    console uses act only on the tenant its transaction is pinned to, refuse without one (or with
    a tenant id whose role was not entered), and refuse out-of-bounds keys."""
    (a_id, a_schema), (b_id, b_schema) = await _tenants(db_settings, client_for, tenant, tenant + "-b")
    conn = await asyncpg.connect(db_settings.runtime_dsn())
    admin = await asyncpg.connect(db_settings.admin_dsn())
    try:
        for role in ("engram_app", "engram_tenant", a_schema):
            for privilege in ("INSERT", "UPDATE", "DELETE", "TRUNCATE"):
                assert not await conn.fetchval(
                    "SELECT has_table_privilege($1, 'engram.api_keys', $2)", role, privilege
                ), (role, privilege)
        for fn in (
            *KEY_FUNCTIONS,
            "engram.pinned_tenant()",
            "engram.key_audit(uuid, text, text, text, text, real, text)",
        ):
            assert not await conn.fetchval("SELECT has_function_privilege('public', $1, 'EXECUTE')", fn), fn
        assert not await conn.fetchval(
            "SELECT has_function_privilege($1, 'engram.pinned_tenant()', 'EXECUTE')", a_schema
        )
        definers = await admin.fetch(
            "SELECT p.oid::regprocedure::text AS fn, p.prosecdef, p.proconfig FROM pg_proc p"
            " WHERE p.oid = ANY($1::regprocedure[]::oid[])",
            list(KEY_FUNCTIONS),
        )
        assert len(definers) == 2
        assert all(r["prosecdef"] and r["proconfig"] == ["search_path=pg_catalog, engram"] for r in definers)

        # Writing the table directly, inside a real tenant transaction: refused.
        for sql in (
            "INSERT INTO engram.api_keys (id, tenant_id, secret_hash, scopes)"
            f" VALUES ('aaaaaaaaaaaa', '{a_id}', '\\x00', '{{memory:admin}}')",
            "UPDATE engram.api_keys SET revoked_at = NULL",
            "DELETE FROM engram.api_keys",
        ):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                async with conn.transaction():
                    await _enter(conn, a_id, a_schema)
                    await conn.execute(sql)

        digest = bytes(32)
        # No tenant pinned, a tenant pinned without its role, another tenant's id under this role.
        for setup in (
            None,
            ("SELECT set_config('engram.tenant_id', $1, true)", a_id),
            ("SELECT set_config('engram.tenant_id', $1, true), set_config('role', $2, true)", b_id, a_schema),
            ("SELECT set_config('engram.tenant_id', 'not-a-uuid', true)",),
        ):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                async with conn.transaction():
                    if setup:
                        await conn.execute(setup[0], *setup[1:])
                    await conn.execute(CREATE_KEY, "bbbbbbbbbbbb", digest)
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                async with conn.transaction():
                    if setup:
                        await conn.execute(setup[0], *setup[1:])
                    await conn.fetchval("SELECT engram.revoke_api_key('bbbbbbbbbbbb', 's', 'c', 'console:x', 1, 'r')")

        # Out of bounds, inside the tenant's transaction: refused as invalid.
        hostile = [
            (_create_sql(key_id="'BAD'"), digest),
            (_create_sql(), b"x"),  # not a SHA-256
            (_create_sql(name="repeat('n', 201)"), digest),
            (_create_sql(name="E'a\\nb'"), digest),
            (_create_sql(scopes="ARRAY['memory:root']"), digest),
            (_create_sql(scopes="ARRAY[]::text[]"), digest),
            (_create_sql(scopes="ARRAY['memory:read', 'memory:read']"), digest),
            (_create_sql(expires="now() - interval '1 day'"), digest),
            (_create_sql(expires="now() + interval '20 years'"), digest),
            (_create_sql(subject="''"), digest),
            (_create_sql(tool="'T; x'"), digest),
        ]
        for sql, value in hostile:
            with pytest.raises(asyncpg.InvalidParameterValueError):
                async with conn.transaction():
                    await _enter(conn, a_id, a_schema)
                    await conn.execute(sql, value)

        # In its own transaction the function works, for that tenant, with its audit row.
        async with conn.transaction():
            await _enter(conn, a_id, a_schema)
            await conn.execute(CREATE_KEY, "dddddddddddd", digest)
        row = await admin.fetchrow("SELECT tenant_id::text, scopes FROM engram.api_keys WHERE id = 'dddddddddddd'")
        assert row is not None and row["tenant_id"] == a_id and row["scopes"] == ["memory:read"]
        audit = await admin.fetchval(
            f"SELECT count(*) FROM {a_schema}.audit WHERE affected = ARRAY['api-key:dddddddddddd']"
        )
        assert audit == 1
        # Tenant B's transaction cannot revoke tenant A's key: it is not found there.
        async with conn.transaction():
            await _enter(conn, b_id, b_schema)
            assert not await conn.fetchval(
                "SELECT engram.revoke_api_key('dddddddddddd', 's', 'c', 'console:x', 1, 'r')"
            )
        assert await admin.fetchval("SELECT revoked_at FROM engram.api_keys WHERE id = 'dddddddddddd'") is None
        nothing = await admin.fetchval(
            "SELECT count(*) FROM engram.api_keys WHERE id IN ('aaaaaaaaaaaa', 'bbbbbbbbbbbb', 'cccccccccccc')"
        )
        assert nothing == 0
    finally:
        await admin.execute("DELETE FROM engram.api_keys WHERE id = 'dddddddddddd'")
        await admin.close()
        await conn.close()


async def test_a_tenant_holds_at_most_100_unrevoked_api_keys(db_settings, client_for, tenant):
    [(tenant_id, schema)] = await _tenants(db_settings, client_for, tenant)
    conn = await asyncpg.connect(db_settings.runtime_dsn())
    try:
        with pytest.raises(asyncpg.ProgramLimitExceededError):
            async with conn.transaction():
                await _enter(conn, tenant_id, schema)
                for i in range(101):
                    await conn.execute(CREATE_KEY, f"limit{i:07d}", bytes(32))
    finally:
        await conn.close()
    admin = await asyncpg.connect(db_settings.admin_dsn())
    try:  # the refusal rolled the whole transaction back: none of the 100 stayed
        assert await admin.fetchval("SELECT count(*) FROM engram.api_keys WHERE id LIKE 'limit%'") == 0
    finally:
        await admin.close()


async def test_a_refused_role_entry_is_unavailable_and_changes_nothing(db_settings, client_for):
    """When the database refuses the server's entry into a tenant's role (a grant being changed),
    the call is tried again and then answered `unavailable` (never an internal error), nothing
    written; once the role may be entered again, the tenant works as before."""
    from tests.support.client import error_code

    key = f"wall-refused-{uuid.uuid4().hex[:8]}"
    async with client_for(key) as c:
        ok(await c.call_tool("upsert_entities", {"entities": [{"name": "Ada", "type": "person"}]}))
    admin = await asyncpg.connect(db_settings.admin_dsn())
    try:
        schema = await admin.fetchval("SELECT schema_name FROM engram.tenants WHERE key = $1", key)
        await admin.execute(f"REVOKE {schema} FROM engram_app")
        async with client_for(key) as c:
            refused = await c.call_tool("upsert_entities", {"entities": [{"name": "Grace", "type": "person"}]})
            assert error_code(refused) == "unavailable", refused
            assert "tenant_role_refused" in refused.content[0].text
        await admin.execute(f"GRANT {schema} TO engram_app WITH INHERIT FALSE, SET TRUE")
        async with client_for(key) as c:
            found = ok(await c.call_tool("find_entities", {}))
            assert "Ada" in str(found) and "Grace" not in str(found)
    finally:
        await admin.close()
