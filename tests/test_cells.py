"""Cells: tenants placed on several real PostgreSQL clusters by the control database's directory,
each tenant's schema and role only on its cell, its transactions run there; cells that are
draining, full or not configured on this server."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterator

import asyncpg
import pytest

from app.config import Settings
from app.devdb import localcells, provision
from app.devdb.pooler import PgBouncer
from app.observability import metrics
from app.store.database import Database, Tenant, Unavailable
from app.store.standby import STANDBY_PROBE_SECONDS
from tests.support.cells import CellDatabase, fetchval
from tests.support.server import TEST_DB, free_port

# Alone, after the suite's parallel workers (`make test`):
# it pauses the replay of the standby every suite's cells share.
pytestmark = pytest.mark.serial


async def _directory(settings: Settings, *statements: str) -> None:
    """Statements on the control database, as its owner."""
    conn = await asyncpg.connect(settings.admin_dsn())
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


@pytest.fixture
def cells(db_settings: Settings, cell_b: CellDatabase, cell_c: CellDatabase) -> Iterator[dict[str, CellDatabase]]:
    """Cells b and c in the directory, open; `main` full, so that new tenants go to b and c only."""
    asyncio.run(
        _directory(
            db_settings,
            "INSERT INTO engram.cells (name) VALUES ('b'), ('c')"
            " ON CONFLICT (name) DO UPDATE SET state = 'open', capacity = NULL",
            "UPDATE engram.cells SET state = 'full' WHERE name = 'main'",
        )
    )
    yield {"b": cell_b, "c": cell_c}
    # as the rest of the suite needs it: its servers know no other cell, so new tenants go to `main`
    asyncio.run(
        _directory(
            db_settings,
            "UPDATE engram.cells SET capacity = NULL, state = CASE WHEN name = 'main' THEN 'open' ELSE 'draining' END",
        )
    )


def _database(
    settings: Settings, urls: dict[str, str], standbys: dict[str, str] | None = None, max_lag: float = 10
) -> Database:
    """A server's Database with these cells (and standbys), with test-sized bounds."""
    return Database(
        settings.runtime_dsn(),
        min_size=0,
        max_size=4,
        statement_timeout_ms=5000,
        acquire_seconds=10,
        call_deadline=30,
        create_tenants=True,
        cells=urls,
        standbys=standbys,
        standby_max_lag=max_lag,
    )


@pytest.fixture
async def db(db_settings: Settings, cells: dict[str, CellDatabase]) -> AsyncIterator[Database]:
    database = _database(db_settings, {name: cell.url for name, cell in cells.items()})
    await database.open()
    yield database
    await database.close()


async def _tenants_per_cell(settings: Settings) -> dict[str, int]:
    conn = await asyncpg.connect(settings.admin_dsn())
    try:
        return {r[0]: r[1] for r in await conn.fetch("SELECT cell, count(*)::int FROM engram.tenants GROUP BY cell")}
    finally:
        await conn.close()


async def test_new_tenants_spread_over_open_cells_and_live_only_on_theirs(
    db: Database, db_settings: Settings, cells: dict[str, CellDatabase]
) -> None:
    before = await _tenants_per_cell(db_settings)
    made = [await db.tenant(f"cell-{uuid.uuid4().hex[:10]}") for _ in range(4)]
    after = await _tenants_per_cell(db_settings)
    assert after.get("main", 0) == before.get("main", 0)  # full: took none
    assert after.get("b", 0) + after.get("c", 0) == before.get("b", 0) + before.get("c", 0) + 4
    assert abs(after.get("b", 0) - after.get("c", 0)) <= max(1, abs(before.get("b", 0) - before.get("c", 0)))
    for tenant in made:
        other = "c" if tenant.cell == "b" else "b"
        assert tenant.cell in ("b", "c")
        role = "SELECT count(*) FROM pg_roles WHERE rolname = $1"
        assert await fetchval(cells[tenant.cell].admin_url, role, tenant.schema) == 1
        assert await fetchval(cells[other].admin_url, role, tenant.schema) == 0
        assert await fetchval(db_settings.admin_dsn(), role, tenant.schema) == 0
        async with db.transaction(tenant) as tx:  # runs on its cell, as its role
            assert await tx.fetchval("SELECT current_user") == tenant.schema
            assert await tx.fetchval("SELECT inet_server_port()") == cells[tenant.cell].cluster.port
            assert await tx.fetchval("SELECT count(*) FROM {s}.entities") == 0
        # the same id, key and schema in the cell's own tenants table
        row = "SELECT key FROM engram.tenants WHERE id = $1::uuid AND schema_name = $2"
        assert await fetchval(cells[tenant.cell].admin_url, row, tenant.id, tenant.schema) == tenant.key
    # resolved again, from the directory (a fresh server): the same place
    again = _database(db_settings, {name: cell.url for name, cell in cells.items()})
    await again.open()
    try:
        assert await again.tenant(made[0].key) == made[0]
    finally:
        await again.close()


async def test_draining_and_full_cells_take_no_new_tenants(db: Database, db_settings: Settings) -> None:
    await _directory(db_settings, "UPDATE engram.cells SET state = 'draining' WHERE name = 'b'")
    assert {(await db.tenant(f"cell-{uuid.uuid4().hex[:10]}")).cell for _ in range(3)} == {"c"}
    counts = await _tenants_per_cell(db_settings)
    await _directory(db_settings, f"UPDATE engram.cells SET capacity = {counts.get('c', 0)} WHERE name = 'c'")
    with pytest.raises(Unavailable) as refused:
        await db.tenant(f"cell-{uuid.uuid4().hex[:10]}")
    assert refused.value.reason == "no_open_cell"
    assert await _tenants_per_cell(db_settings) == counts  # nothing written
    await _directory(db_settings, "UPDATE engram.cells SET state = 'open' WHERE name = 'b'")
    assert (await db.tenant(f"cell-{uuid.uuid4().hex[:10]}")).cell == "b"


async def test_a_cell_this_server_has_no_url_for_is_unavailable_and_finished_later(
    db_settings: Settings, cells: dict[str, CellDatabase]
) -> None:
    """A tenant placed on c by a server that cannot reach c: the directory row is written, the call
    is `unavailable` (cell_unconfigured); a server that reaches c finishes the schema there."""
    await _directory(db_settings, "UPDATE engram.cells SET state = 'draining' WHERE name = 'b'")
    key = f"cell-{uuid.uuid4().hex[:10]}"
    only_b = _database(db_settings, {"b": cells["b"].url})
    await only_b.open()
    try:
        with pytest.raises(Unavailable) as refused:
            await only_b.tenant(key)
        assert refused.value.reason == "cell_unconfigured"
        assert only_b.cached_tenant(key) is None
        with pytest.raises(Unavailable):
            async with only_b.transaction(Tenant(str(uuid.uuid4()), key, "t_" + "0" * 32, "c")):
                pass
    finally:
        await only_b.close()
    assert await fetchval(db_settings.admin_dsn(), "SELECT cell FROM engram.tenants WHERE key = $1", key) == "c"
    assert await fetchval(cells["c"].admin_url, "SELECT count(*) FROM engram.tenants WHERE key = $1", key) == 0
    both = _database(db_settings, {name: cell.url for name, cell in cells.items()})
    await both.open()
    try:
        tenant = await both.tenant(key)
        async with both.transaction(tenant, readonly=True) as tx:
            assert await tx.fetchval("SELECT count(*) FROM {s}.entities") == 0
    finally:
        await both.close()


async def test_an_unreachable_cell_is_unavailable_without_touching_the_others(
    db: Database, db_settings: Settings, cells: dict[str, CellDatabase]
) -> None:
    dead = _database(db_settings, {"b": cells["b"].url, "c": "postgresql://engram_app:x@127.0.0.1:1/engram"})
    await dead.open()
    try:
        await _directory(db_settings, "UPDATE engram.cells SET state = 'draining' WHERE name = 'b'")
        with pytest.raises(Unavailable) as refused:
            await dead.tenant(f"cell-{uuid.uuid4().hex[:10]}")
        assert refused.value.reason == "database_unreachable"
        assert dead.on("c").unreachable and not dead.unreachable  # each cell its own up/down state
        assert not db.on("c").unreachable
    finally:
        await dead.close()


# --- reads from a cell's standby ----------------------------------------------------------------


async def _where(db: Database, tenant: Tenant, principal: str) -> tuple[object, object]:
    """(the port of the server that answered, the tenant's entities) for a read by `principal`."""
    async with db.transaction(tenant, readonly=True, principal=principal, standby=True) as tx:
        return await tx.fetchval("SELECT inet_server_port()"), await tx.fetchval("SELECT count(*) FROM {s}.entities")


async def _write(db: Database, tenant: Tenant, principal: str, name: str) -> None:
    async with db.transaction(tenant, principal=principal) as tx:
        await tx.execute(
            "INSERT INTO {s}.entities (id, gid, name, name_key, type, created_by, updated_by)"
            " VALUES (gen_random_uuid(), (SELECT coalesce(max(gid::text::bigint), 0) + 1 FROM {s}.entities)::text::"
            "ag_catalog.graphid, $1, lower($1), 'probe', $2, $2)",
            name,
            principal,
        )


async def _on_standby(db: Database, tenant: Tenant, standby: CellDatabase) -> None:
    """Read until the standby serves a read (the probe then holds a sample of the primary's
    position that the standby has reached: its lag is known from there on). Other suites write
    on the same cluster, so the first probes may find the standby a little behind."""
    async with asyncio.timeout(60):
        primary = True
        while primary:
            primary = (await _where(db, tenant, "bob"))[0] != standby.cluster.port
            await asyncio.sleep(STANDBY_PROBE_SECONDS if primary else 0)


@pytest.fixture(params=["direct", "pgbouncer"])
def reach(request: pytest.FixtureRequest) -> Iterator[Callable[[CellDatabase], str]]:
    """How a server reaches a cell or standby: directly, or through a PgBouncer in transaction mode
    of its own (two server connections), as a deployment with a pooler per cluster does."""
    if request.param == "direct":
        yield lambda cell: cell.url
        return
    state = provision.LocalState.load()
    assert state is not None
    started: list[PgBouncer] = []

    def through(cell: CellDatabase) -> str:
        bouncer = PgBouncer(free_port(), cell.cluster.port, {provision.APP_ROLE: state.app_password})
        try:
            bouncer.start()
        except provision.ProvisionError as exc:
            pytest.skip(str(exc))
        started.append(bouncer)
        return bouncer.url(provision.APP_ROLE, TEST_DB)

    yield through
    for bouncer in started:
        bouncer.stop()


async def test_reads_go_to_the_standby_and_a_writer_reads_its_own_writes(
    db_settings: Settings, cells: dict[str, CellDatabase], standby_b: CellDatabase, reach: Callable[[CellDatabase], str]
) -> None:
    await _directory(db_settings, "UPDATE engram.cells SET state = 'draining' WHERE name = 'c'")
    b, standby = cells["b"], standby_b
    # lag is tested below; here a paused standby must stay in use
    db = _database(db_settings, {"b": reach(b), "c": cells["c"].url}, {"b": reach(standby)}, max_lag=3600)
    await db.open()
    standby_admin = await asyncpg.connect(standby.cluster.url(admin=True, database="postgres"))
    try:
        tenant = await db.tenant(f"cell-{uuid.uuid4().hex[:10]}")
        assert tenant.cell == "b"
        await _on_standby(db, tenant, standby)
        served = metrics.STANDBY_READS._value.get()

        await standby_admin.execute("SELECT pg_wal_replay_pause()")
        await _write(db, tenant, "alice", "Ada")
        # alice wrote: her reads go to the primary until the standby has replayed her commit ...
        assert await _where(db, tenant, "alice") == (b.cluster.port, 1)
        # ... while bob's go to the standby, which (paused) has not seen it: the read was the standby's
        await asyncio.sleep(STANDBY_PROBE_SECONDS)  # a fresh probe, taken after the write
        assert await _where(db, tenant, "bob") == (standby.cluster.port, 0)
        assert metrics.STANDBY_READS._value.get() == served + 1

        await standby_admin.execute("SELECT pg_wal_replay_resume()")
        await localcells.caught_up(b.cluster, standby.cluster)
        await asyncio.sleep(STANDBY_PROBE_SECONDS)
        assert await _where(db, tenant, "alice") == (standby.cluster.port, 1)  # replayed: her write is there
        assert await _where(db, tenant, "bob") == (standby.cluster.port, 1)
    finally:
        await standby_admin.execute("SELECT pg_wal_replay_resume()")
        await standby_admin.close()
        await db.close()


async def test_a_lagging_or_unreachable_standby_is_skipped(
    db_settings: Settings, cells: dict[str, CellDatabase], standby_b: CellDatabase
) -> None:
    await _directory(db_settings, "UPDATE engram.cells SET state = 'draining' WHERE name = 'c'")
    b, standby = cells["b"], standby_b

    strict = _database(db_settings, {"b": b.url}, {"b": standby.url}, max_lag=0.001)
    down = _database(db_settings, {"b": b.url}, {"b": "postgresql://engram_app:x@127.0.0.1:1/engram"}, max_lag=3600)
    await strict.open()
    await down.open()
    standby_admin = await asyncpg.connect(standby.cluster.url(admin=True, database="postgres"))
    try:
        tenant = await strict.tenant(f"cell-{uuid.uuid4().hex[:10]}")
        await _on_standby(strict, tenant, standby)
        await standby_admin.execute("SELECT pg_wal_replay_pause()")
        await _write(strict, tenant, "alice", "Ada")
        await asyncio.sleep(STANDBY_PROBE_SECONDS)
        lag = await fetchval(
            standby.cluster.url(admin=True, database="postgres"),
            "SELECT extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp())",
        )
        assert lag > 0.001  # behind by more than the bound: bob reads the primary, and sees the write
        assert await _where(strict, tenant, "bob") == (b.cluster.port, 1)
        assert await _where(down, tenant, "bob") == (b.cluster.port, 1)  # no standby there: the primary
        standby_of_b = down.cells["b"].standby
        assert standby_of_b is not None and standby_of_b.replica.unreachable
    finally:
        await standby_admin.execute("SELECT pg_wal_replay_resume()")
        await standby_admin.close()
        await strict.close()
        await down.close()


@pytest.mark.parametrize(
    "cells",
    ["main", "B", "b,b", "1b", "b-c", "b c", "a" * 32, "b\x00", ",".join(f"c{i}" for i in range(101))],
)
def test_cell_settings_refuse_bad_names(cells: str) -> None:
    with pytest.raises(ValueError, match="cell"):
        Settings(cells=cells)


def test_cell_urls_come_from_one_variable_each(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_CELLS", "b,c")
    monkeypatch.setenv("ENGRAM_CELL_B_URL", "postgresql://app@b/engram")
    monkeypatch.setenv("ENGRAM_CELL_B_READ_URL", "postgresql://app@b-standby/engram")
    monkeypatch.setenv("ENGRAM_CELL_C_ADMIN_URL", "postgresql://owner@c/engram")  # no run-time URL
    monkeypatch.setenv("ENGRAM_CELL_MAIN_READ_URL", "postgresql://app@main-standby/engram")
    settings = Settings(database_url="postgresql://app@main/engram")
    b = settings.cell("b")
    assert b is not None and b.admin() == "postgresql://app@b/engram" and b.listen() == b.admin()
    assert b.read_url is not None and b.read_url.get_secret_value() == "postgresql://app@b-standby/engram"
    assert settings.cell("c") is None  # not served without its run-time URL
    assert settings.cell("zz") is None
    main = settings.cell("main")
    assert main is not None and main.read_url is not None and main.admin() == "postgresql://app@main/engram"
    assert "app@b" not in str(settings.redacted())  # secrets stay masked


async def test_a_key_a_tenant_made_on_its_cell_is_found_from_the_control_database(db: Database) -> None:
    import hashlib

    from app.store import tenants

    tenant = await db.tenant(f"cell-key-{uuid.uuid4().hex[:10]}")
    assert tenant.cell in ("b", "c")
    key_id = uuid.uuid4().hex[:12]  # the form the server gives key ids
    audit = tenants.KeyAudit("someone", "console", "console:api_key", 1.0, "req")
    async with db.transaction(tenant) as tx:  # as the console makes it: on the tenant's cell
        await tenants.create_key_in_tenant(tx, key_id, hashlib.sha256(b"s").digest(), "k", ["memory:read"], None, audit)
    found = await tenants.api_key(db, key_id)
    assert found is not None and found.tenant_key == tenant.key and found.scopes == ["memory:read"]
    assert await tenants.api_key(db, uuid.uuid4().hex[:12]) is None  # a key nowhere is unknown
