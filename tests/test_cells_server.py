"""A server with cells main, b and c (real clusters): tools over HTTP with the SDK client for tenants
on b and c, the embedding filler reaching a tenant on c, /readyz naming a cell this server has no
URL for, and `engram migrate` / `engram cell` / `engram tenant show` over every cell."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator

import asyncpg
import httpx2
import pytest

from app.config import Settings
from app.devdb import localcells, provision
from app.store.standby import STANDBY_PROBE_SECONDS
from tests.support.cells import CellDatabase, cell_env, fetchval, set_states
from tests.support.client import connect, error_code, ok
from tests.support.server import Server, engram, serve, server_env

# Alone, after the suite's parallel workers (`make test`):
# it reads the standby every suite's cells share while another pauses it.
pytestmark = pytest.mark.serial

SECONDS = 120  # a bound on waiting for the filler on a loaded machine, not a timing assertion


@pytest.fixture(scope="module")
def cells(db_settings: Settings, cell_b: CellDatabase, cell_c: CellDatabase) -> dict[str, CellDatabase]:
    return {"b": cell_b, "c": cell_c}


@pytest.fixture(scope="module")
def cell_server(db_settings: Settings, cells: dict[str, CellDatabase]) -> Iterator[Server]:
    """Texts are left to the filler (none embedded by the write itself), so it must reach every cell."""
    asyncio.run(set_states(db_settings, main="full", b="open", c="open"))
    try:
        with serve(db_settings, ENGRAM_EMBED_SYNC_TEXTS="0", **cell_env(cells)) as running:
            yield running
    finally:
        asyncio.run(set_states(db_settings, main="open", b="draining", c="draining"))


async def _cell_of(settings: Settings, key: str) -> object:
    return await fetchval(settings.admin_dsn(), "SELECT cell FROM engram.tenants WHERE key = $1", key)


async def test_tools_work_for_tenants_on_b_and_c(
    cell_server: Server, db_settings: Settings, cells: dict[str, CellDatabase]
) -> None:
    placed: dict[object, str] = {}
    for only, full in (("b", "c"), ("c", "b")):  # one tenant placed on each
        await set_states(db_settings, main="full", **{only: "open", full: "full"})
        key = f"cells-{uuid.uuid4().hex[:10]}"
        async with cell_server.client(key) as c:
            ok(await c.call_tool("server_status", {}))
        placed[await _cell_of(db_settings, key)] = key
    await set_states(db_settings, main="full", b="open", c="open")
    assert set(placed) == {"b", "c"}
    for cell, key in placed.items():
        assert isinstance(cell, str)
        schema = await fetchval(cells[cell].admin_url, "SELECT schema_name FROM engram.tenants WHERE key = $1", key)
        assert await fetchval(cells[cell].admin_url, "SELECT count(*) FROM pg_roles WHERE rolname = $1", schema) == 1
        assert await fetchval(db_settings.admin_dsn(), "SELECT count(*) FROM pg_roles WHERE rolname = $1", schema) == 0
        async with cell_server.client(key) as c:
            made = ok(
                await c.call_tool(
                    "upsert_entities",
                    {
                        "entities": [
                            {"name": "Ada Lovelace", "type": "person", "observations": ["wrote the first program"]},
                            {"name": "Analytical Engine", "type": "machine", "observations": [f"lives on {cell}"]},
                        ]
                    },
                )
            )
            assert made["embeddings_pending"] >= 2
            ok(
                await c.call_tool(
                    "connect_entities",
                    {"relations": [{"from": "Ada Lovelace", "to": "Analytical Engine", "type": "programmed"}]},
                )
            )
            got = ok(await c.call_tool("get_entity", {"name": "Ada Lovelace"}))
            assert got["observations"] == ["wrote the first program"] and len(got["relations"]) == 1
            found = ok(await c.call_tool("search", {"query": "Analytical", "mode": "keyword"}))
            assert [h["entity"]["name"] for h in found["hits"]][:1] == ["Analytical Engine"]
            near = ok(await c.call_tool("neighbors", {"entity": "Ada Lovelace"}))
            assert [n["entity"]["name"] for n in near["neighbors"]] == ["Analytical Engine"]
            facts = ok(await c.call_tool("recall", {"query": "first program", "mode": "keyword"}))
            assert any("first program" in f["text"] for f in facts["facts"])
            listed = ok(await c.call_tool("find_entities", {"name_contains": "engine"}))
            assert listed["total"] == 1
            assert error_code(await c.call_tool("get_entity", {"name": "Nobody"})) == "not_found"
        # the rows are on the cell, not in the control database
        entities = f"SELECT count(*) FROM {schema}.entities"
        assert await fetchval(cells[cell].admin_url, entities) == 2


async def test_the_filler_embeds_pending_texts_of_a_tenant_on_c(
    cell_server: Server, db_settings: Settings, cells: dict[str, CellDatabase]
) -> None:
    await set_states(db_settings, main="full", b="full", c="open")
    try:
        key = f"cells-{uuid.uuid4().hex[:10]}"
        async with cell_server.client(key) as c:
            made = ok(
                await c.call_tool(
                    "upsert_entities",
                    {"entities": [{"name": "Grace Hopper", "type": "person", "observations": ["built a compiler"]}]},
                )
            )
    finally:
        await set_states(db_settings, main="full", b="open", c="open")
    assert made["embeddings_pending"] >= 2 and await _cell_of(db_settings, key) == "c"
    schema = await fetchval(cells["c"].admin_url, "SELECT schema_name FROM engram.tenants WHERE key = $1", key)
    waiting = f"SELECT count(*) FROM {schema}.search_docs WHERE model_id IS NULL"
    async with asyncio.timeout(SECONDS):
        pending = True
        while pending:
            pending = bool(await fetchval(cells["c"].admin_url, waiting))
            await asyncio.sleep(0.2 if pending else 0)
    assert await fetchval(cells["c"].admin_url, f"SELECT count(*) FROM {schema}.search_docs") >= 2
    async with cell_server.client(key) as c:  # found by meaning now
        found = ok(await c.call_tool("search", {"query": "programming language tools", "mode": "semantic"}))
        assert [h["entity"]["name"] for h in found["hits"]] == ["Grace Hopper"]


async def test_a_cell_this_server_has_no_url_for(cell_server: Server, db_settings: Settings) -> None:
    """In the directory, not configured here: /readyz names it (and stays ready for the other
    cells' tenants), and a tenant placed there is `unavailable` (cell_unconfigured)."""
    await set_states(db_settings, main="full", b="full", c="full", d="open")
    key = f"cells-{uuid.uuid4().hex[:10]}"
    try:
        ready = httpx2.get(f"{cell_server.base}/readyz", timeout=10)
        assert ready.status_code == 200
        assert ready.json()["cells"] == {"b": "ready", "c": "ready", "d": "unconfigured"}
        async with cell_server.client(key) as c:
            refused = await c.call_tool("get_entity", {"name": "anyone"})
            assert error_code(refused) == "unavailable"
            assert "cell_unconfigured" in str(refused.structured_content) or "cell" in str(refused.content)
    finally:
        await fetchval(db_settings.admin_dsn(), "DELETE FROM engram.tenants WHERE cell = 'd'")
        await fetchval(db_settings.admin_dsn(), "DELETE FROM engram.cells WHERE name = 'd'")
        await set_states(db_settings, main="full", b="open", c="open")


def _standby_reads(server: Server) -> float:
    scraped = httpx2.get(f"http://127.0.0.1:{server.env['ENGRAM_METRICS_PORT']}/metrics", timeout=10).text
    return float(next(x for x in scraped.splitlines() if x.startswith("engram_db_standby_reads_total ")).split()[1])


async def test_over_http_a_writer_reads_its_writes_while_others_read_the_standby(
    db_settings: Settings, cells: dict[str, CellDatabase], standby_b: CellDatabase
) -> None:
    await set_states(db_settings, main="full", b="open", c="full")
    env = cell_env(cells) | {"ENGRAM_CELL_B_READ_URL": standby_b.url, "ENGRAM_STANDBY_MAX_LAG_SECONDS": "3600"}
    standby_admin = await asyncpg.connect(standby_b.cluster.url(admin=True, database="postgres"))
    key = f"cells-{uuid.uuid4().hex[:10]}"
    try:
        with serve(db_settings, ENGRAM_EMBEDDING_PROVIDER="none", **env) as server:
            async with (
                connect(server.url, server.token(key, subject="alice")) as alice,
                connect(server.url, server.token(key, subject="bob")) as bob,
            ):
                ok(await alice.call_tool("upsert_entities", {"entities": [{"name": "Seed", "type": "thing"}]}))
                assert await _cell_of(db_settings, key) == "b"
                await localcells.caught_up(cells["b"].cluster, standby_b.cluster)
                # reads until the standby serves one: the server then holds a sample of the primary's
                # position that the standby has reached (its lag is known from there on)
                async with asyncio.timeout(SECONDS):
                    while not _standby_reads(server):
                        assert ok(await bob.call_tool("get_entity", {"name": "Seed"}))["name"] == "Seed"
                        await asyncio.sleep(STANDBY_PROBE_SECONDS)
                await standby_admin.execute("SELECT pg_wal_replay_pause()")
                ok(await alice.call_tool("upsert_entities", {"entities": [{"name": "Ada", "type": "person"}]}))
                assert ok(await alice.call_tool("get_entity", {"name": "Ada"}))["name"] == "Ada"  # her own write
                await asyncio.sleep(STANDBY_PROBE_SECONDS)
                # bob reads the paused standby: what it replayed, not alice's newest write
                assert ok(await bob.call_tool("get_entity", {"name": "Seed"}))["name"] == "Seed"
                assert error_code(await bob.call_tool("get_entity", {"name": "Ada"})) == "not_found"
                await standby_admin.execute("SELECT pg_wal_replay_resume()")
                await localcells.caught_up(cells["b"].cluster, standby_b.cluster)
                await asyncio.sleep(STANDBY_PROBE_SECONDS)
                assert ok(await bob.call_tool("get_entity", {"name": "Ada"}))["name"] == "Ada"
            assert _standby_reads(server) >= 2
    finally:
        await standby_admin.execute("SELECT pg_wal_replay_resume()")
        await standby_admin.close()
        await set_states(db_settings, main="full", b="open", c="open")


# --- the command line ---------------------------------------------------------------------------


@pytest.fixture
def fresh_c(db_settings: Settings, cells: dict[str, CellDatabase]) -> Iterator[str]:
    """An empty database on cluster c, not migrated; yields its owner URL."""
    name = f"{os.environ.get('ENGRAM_TEST_DB', 'engram_test')}_fresh"
    admin = cells["c"].cluster.url(admin=True)
    asyncio.run(provision.recreate_database(admin, name))
    yield cells["c"].cluster.url(admin=True, database=name)
    asyncio.run(fetchval(admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def test_migrate_and_cell_commands_reach_every_cell(
    db_settings: Settings, cells: dict[str, CellDatabase], fresh_c: str
) -> None:
    env = server_env(db_settings, 8000) | cell_env(cells) | {"ENGRAM_CELL_C_ADMIN_URL": fresh_c}
    migrated = engram(env, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert "cell main: database schema is up to date" in migrated.stdout
    assert "cell b: database schema is up to date" in migrated.stdout
    assert "cell c: applied: 0001_" in migrated.stdout  # the fresh database got every file
    count = "SELECT count(*) FROM engram.schema_migrations"
    assert asyncio.run(fetchval(fresh_c, count)) == asyncio.run(fetchval(db_settings.admin_dsn(), count))

    env_c = env | {"ENGRAM_CELL_C_ADMIN_URL": cells["c"].admin_url}
    for name in cells:
        added = engram(env_c, "cell", "add", name)
        assert added.returncode == 0 and f"cell {name}: database schema is up to date" in added.stdout, added.stderr
    assert "registered already" in engram(env_c, "cell", "add", "b").stdout
    cleaned = engram(env_c, "audit", "cleanup")  # audit rows are written on each tenant's cell
    assert cleaned.returncode == 0, cleaned.stderr
    assert [line.rsplit(" ", 1)[-1] for line in cleaned.stdout.splitlines()] == ["main", "b", "c"]
    listed = engram(env, "cell", "list")
    assert listed.returncode == 0 and listed.stdout.startswith("b\t")
    assert engram(env, "cell", "set", "b", "--state", "draining", "--capacity", "5").returncode == 0
    line = next(x for x in engram(env, "cell", "list").stdout.splitlines() if x.startswith("b\t"))
    assert line.split("\t")[1:3] == ["draining", "capacity 5"]
    assert engram(env, "cell", "set", "b", "--state", "open", "--capacity", "none").returncode == 0
    line = next(x for x in engram(env, "cell", "list").stdout.splitlines() if x.startswith("b\t"))
    assert line.split("\t")[1:3] == ["open", "capacity -"]

    # a tenant made by the CLI is placed, and `tenant show` says where
    asyncio.run(set_states(db_settings, main="full", b="full", c="open"))
    key = f"cells-cli-{uuid.uuid4().hex[:8]}"
    try:
        made = engram(env_c, "tenant", "create", key)
        assert made.returncode == 0 and made.stdout.strip().endswith("(cell c)"), made.stderr
        shown = engram(env_c, "tenant", "show", key)
        assert "cell: c" in shown.stdout.splitlines() and "entities: 0" in shown.stdout.splitlines()
        # its audit and usage live in its schema on c: the reports read them there
        schema = asyncio.run(
            fetchval(cells["c"].admin_url, "SELECT schema_name FROM engram.tenants WHERE key = $1", key)
        )
        for row in (
            f"INSERT INTO {schema}.audit (subject, client_id, tool, outcome, duration_ms, request_id)"
            " VALUES ('someone', 'cli', 'probe_tool', 'ok', 1, 'r')",
            f"INSERT INTO {schema}.usage (day, tool, calls, errors) VALUES (current_date, 'probe_tool', 3, 0)",
        ):
            asyncio.run(fetchval(cells["c"].admin_url, row))
        audited = engram(env_c, "audit", "--tenant", key)
        assert audited.returncode == 0 and "probe_tool" in audited.stdout, audited.stderr
        used = engram(env_c, "usage", "--tenant", key, "--days", "1")
        assert used.returncode == 0 and "probe_tool\t3 calls" in used.stdout, used.stderr
        assert engram(env_c, "tenant", "delete", key).returncode == 0
        assert (
            asyncio.run(fetchval(cells["c"].admin_url, "SELECT count(*) FROM engram.tenants WHERE key = $1", key)) == 0
        )
    finally:
        asyncio.run(set_states(db_settings, main="open", b="draining", c="draining"))


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("cell", "add", "B"), "lowercase letters"),
        (("cell", "add", "main"), "control database"),
        (("cell", "add", "a" * 32), "lowercase letters"),
        (("cell", "add", "x\x01y"), "lowercase letters"),
        (("cell", "add", "zz"), "not configured"),
        (("cell", "set", "nosuch", "--state", "open"), "no cell 'nosuch'"),
        (("cell", "set", "b", "--state", "closed"), "invalid choice"),
        (("cell", "set", "b", "--capacity", "-1"), "0 to 10,000,000"),
        (("cell", "set", "b", "--capacity", "99999999999"), "0 to 10,000,000"),
        (("cell", "set", "b", "--capacity", "many"), "number of tenants"),
        (("cell", "set", "b"), "--state and/or --capacity"),
        (("cell", "add"), "give the cell's name"),
    ],
)
def test_cell_commands_refuse_bad_input(
    db_settings: Settings, cells: dict[str, CellDatabase], args: tuple[str, ...], says: str
) -> None:
    env = server_env(db_settings, 8000) | cell_env(cells)
    before = asyncio.run(fetchval(db_settings.admin_dsn(), "SELECT string_agg(name || state, ',') FROM engram.cells"))
    refused = engram(env, *args)
    assert refused.returncode != 0 and says in refused.stderr, refused.stderr
    after = asyncio.run(fetchval(db_settings.admin_dsn(), "SELECT string_agg(name || state, ',') FROM engram.cells"))
    assert after == before
