"""Moving a tenant between two real clusters (cells b and c) by logical replication: under a write
loop over HTTP (no acknowledged write lost, reads never wrong), a second server that cached the
old cell fenced and recovering, a stop after each step and the move resumed, `--dry-run`,
`--status`, `--finish`, `--abort`, and refused input."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator

import asyncpg
import pytest
from pydantic import SecretStr

from app.config import CellUrls, Settings
from app.errors import EngramError
from app.services.moves import STEP_NAMES, Interrupted, Mover, Timing
from tests.support.cells import CellDatabase, cell_env, fetchval, set_states
from tests.support.client import ok
from tests.support.server import ROOT, Server, engram, serve, server_env
from tests.support.terminal import at_a_terminal


@pytest.fixture(scope="module")
def cells(db_settings: Settings, cell_b: CellDatabase, cell_c: CellDatabase) -> Iterator[dict[str, CellDatabase]]:
    """Cells b and c open; `main` full, so that new tenants go to b or c."""
    asyncio.run(set_states(db_settings, main="full", b="open", c="open"))
    yield {"b": cell_b, "c": cell_c}
    asyncio.run(set_states(db_settings, main="open", b="draining", c="draining"))
    for cell in (cell_b, cell_c):  # a subscription left by a failed test would keep its database in use
        asyncio.run(_drop_subscriptions(cell.admin_url))


# The replication slots of this suite's database on a cell (the standby of `b` keeps a slot of its own).
OWN_SLOTS = "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()"


async def _drop_subscriptions(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        for (name,) in await conn.fetch(
            "SELECT subname FROM pg_subscription WHERE subdbid = (SELECT oid FROM pg_database"
            " WHERE datname = current_database())"
        ):
            await conn.execute(f"ALTER SUBSCRIPTION {name} DISABLE")
            await conn.execute(f"ALTER SUBSCRIPTION {name} SET (slot_name = NONE)")
            await conn.execute(f"DROP SUBSCRIPTION {name}")
    finally:
        await conn.close()


@pytest.fixture(scope="module")
def servers(db_settings: Settings, cells: dict[str, CellDatabase]) -> Iterator[tuple[Server, Server]]:
    """Two servers over the same cells: one writes, the other (a replica) keeps the old cell cached."""
    # reading back every acknowledged write, one call each, outruns the default 50 calls/s
    env = {"ENGRAM_EMBEDDING_PROVIDER": "none", "ENGRAM_TENANT_RATE": "10000", **cell_env(cells)}
    with serve(db_settings, **env) as first, serve(db_settings, **env) as second:
        yield first, second


def _mover(settings: Settings, cells: dict[str, CellDatabase], **kw: object) -> Mover:
    urls = {"main": CellUrls(admin_url=SecretStr(settings.admin_dsn()))}
    urls |= {
        name: CellUrls(url=SecretStr(cell.url), admin_url=SecretStr(cell.admin_url)) for name, cell in cells.items()
    }
    return Mover(settings.admin_dsn(), urls, timing=Timing(copy_seconds=120, poll_seconds=0.02), **kw)  # type: ignore[arg-type]


async def _cell_of(settings: Settings, key: str) -> str:
    found = await fetchval(settings.admin_dsn(), "SELECT cell FROM engram.tenants WHERE key = $1", key)
    assert isinstance(found, str)
    return found


async def _schema_on(cell: CellDatabase, key: str) -> int:
    return int(
        await fetchval(  # type: ignore[arg-type]
            cell.admin_url,
            "SELECT count(*) FROM pg_namespace n JOIN engram.tenants t ON t.schema_name = n.nspname WHERE t.key = $1",
            key,
        )
    )


async def _seeded(server: Server, settings: Settings, prefix: str, n: int) -> tuple[str, str, str]:
    """A new tenant with `n` entities in a chain: its key, its cell, and the other cell."""
    key = f"{prefix}-{uuid.uuid4().hex[:10]}"
    await _seed(server, key, n)
    source = await _cell_of(settings, key)
    return key, source, "c" if source == "b" else "b"


async def _seed(server: Server, key: str, n: int) -> None:
    async with server.client(key) as c:
        ok(
            await c.call_tool(
                "upsert_entities",
                {
                    "entities": [
                        {"name": f"seed {i}", "type": "thing", "observations": [f"seed fact {i}"]} for i in range(n)
                    ]
                },
            )
        )
        ok(
            await c.call_tool(
                "connect_entities",
                {"relations": [{"from": f"seed {i}", "to": f"seed {i + 1}", "type": "next"} for i in range(n - 1)]},
            )
        )


async def test_a_move_under_writes_loses_nothing_and_a_stale_server_recovers(
    servers: tuple[Server, Server], db_settings: Settings, cells: dict[str, CellDatabase]
) -> None:
    writer, replica = servers
    key, source, target = await _seeded(writer, db_settings, "move", 30)
    async with replica.client(key) as r:  # the replica resolves (and caches) the tenant on its old cell
        assert ok(await r.call_tool("get_entity", {"name": "seed 0"}))["name"] == "seed 0"

    acknowledged: list[str] = []
    wrong: list[str] = []
    refused: list[str] = []
    stop = asyncio.Event()

    async def write_loop() -> None:
        async with writer.client(key) as c:
            i = 0
            while not stop.is_set() and i < 2000:  # bounded
                name = f"live {i}"
                got = await c.call_tool(
                    "upsert_entities", {"entities": [{"name": name, "type": "thing", "observations": [f"fact {i}"]}]}
                )
                if got.is_error:
                    refused.append(str(got.content)[:300])
                else:
                    acknowledged.append(name)
                i += 1

    async def read_loop() -> None:
        async with replica.client(key) as c:
            while not stop.is_set():
                if not acknowledged:
                    await asyncio.sleep(0.01)
                    continue
                name = acknowledged[-1]
                got = await c.call_tool("get_entity", {"name": name})
                if got.is_error or ok(got)["name"] != name:
                    wrong.append(f"{name}: {got.content}")

    loops = [asyncio.create_task(write_loop()), asyncio.create_task(read_loop())]
    await asyncio.sleep(0.5)
    lines: list[str] = []
    mover = _mover(db_settings, cells, progress=lines.append)
    move = await mover.move(key, target)
    await asyncio.sleep(0.5)  # writes after the switch, on the target
    stop.set()
    await asyncio.gather(*loops)

    assert move.step == "unsubscribe" and move.switched_at is not None
    assert await _cell_of(db_settings, key) == target
    assert len(acknowledged) > 10, lines
    assert wrong == []
    assert refused == []  # writes met the fence, waited and went to the target within their deadline
    # every acknowledged write is on the target, and new rows there get fresh ids (sequences set)
    async with writer.client(key) as c:
        for name in acknowledged:
            assert ok(await c.call_tool("get_entity", {"name": name}))["name"] == name
        ok(
            await c.call_tool(
                "upsert_entities", {"entities": [{"name": "after", "type": "thing", "observations": ["x"]}]}
            )
        )
        ok(await c.call_tool("connect_entities", {"relations": [{"from": "after", "to": "seed 0", "type": "next"}]}))
    async with replica.client(key) as r:  # the replica, stale until fenced, now reads the target
        assert ok(await r.call_tool("get_entity", {"name": "after"}))["name"] == "after"
    # the source stays (fenced) until finished, then is dropped; the replication objects are gone
    assert await _schema_on(cells[source], key) == 1
    await mover.finish(key)
    assert await fetchval(cells[source].admin_url, "SELECT count(*) FROM engram.tenants WHERE key = $1", key) == 0
    assert await fetchval(cells[source].admin_url, "SELECT count(*) FROM pg_publication") == 0
    assert await fetchval(cells[source].admin_url, OWN_SLOTS) == 0
    assert await fetchval(cells[target].admin_url, "SELECT count(*) FROM pg_subscription") == 0
    status = await mover.status()
    assert any(m.key == key and m.finished_at is not None for m in status)


async def test_a_move_stopped_after_each_step_resumes(
    servers: tuple[Server, Server], db_settings: Settings, cells: dict[str, CellDatabase]
) -> None:
    writer, _ = servers
    key, source, target = await _seeded(writer, db_settings, "resume", 10)
    for step in STEP_NAMES[:-1]:
        with pytest.raises(Interrupted):
            await _mover(db_settings, cells, stop_after=step).move(key, target)
        plan = await _mover(db_settings, cells).plan(key, target)
        assert plan.done == STEP_NAMES[: STEP_NAMES.index(step) + 1]
        if step in ("fence_writes", "fence_reads"):
            assert await _refused(cells[source], key) == (["write"] if step == "fence_writes" else ["write", "read"])
        # before the switch the tenant is still served from its source (writes refused while fenced)
        assert await _cell_of(db_settings, key) == (
            target if plan.done[-1] in STEP_NAMES[STEP_NAMES.index("switch") :] else source
        )
    moved = await _mover(db_settings, cells).move(key, target)
    assert moved.step == STEP_NAMES[-1]
    async with writer.client(key) as c:
        got = ok(await c.call_tool("get_entity", {"name": "seed 3"}))
        assert got["observations"] == ["seed fact 3"]
        ok(await c.call_tool("upsert_entities", {"entities": [{"name": "later", "type": "thing"}]}))
    await _mover(db_settings, cells).finish(key)
    assert await _schema_on(cells[source], key) == 0


def test_a_move_killed_mid_step_is_continued_by_the_same_command(
    servers: tuple[Server, Server], db_settings: Settings, cells: dict[str, CellDatabase]
) -> None:
    """The command killed (SIGKILL, nothing cleaned up) while it waits for the copy, then while it
    waits for the catch-up inside the write fence: running it again ends the move, data whole."""
    writer, _ = servers
    key, source, target = asyncio.run(_seeded(writer, db_settings, "kill", 20))
    env = server_env(db_settings, 8000) | cell_env(cells)
    command = [sys.executable, "-u", "-m", "app.cli", "tenant", "move", key, target]
    for killed_after in ("  subscribe done", "  fence_writes done"):
        running = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
        assert running.stdout is not None
        try:
            for line in running.stdout:
                if line.startswith(killed_after):
                    running.send_signal(signal.SIGKILL)
                    break
        finally:
            running.kill()
            running.wait(timeout=60)
        assert running.returncode == -signal.SIGKILL, f"the move ended before {killed_after!r}"
        assert asyncio.run(_cell_of(db_settings, key)) == source
    assert asyncio.run(_refused(cells[source], key)) == ["write"]  # killed inside the fence
    done = engram(env, "tenant", "move", key, target)
    assert done.returncode == 0 and "continuing the move" in done.stdout, done.stderr
    assert asyncio.run(_cell_of(db_settings, key)) == target

    async def read_back() -> None:
        async with writer.client(key) as c:
            for i in (0, 19):
                got = ok(await c.call_tool("get_entity", {"name": f"seed {i}"}))
                assert got["observations"] == [f"seed fact {i}"]
            ok(await c.call_tool("upsert_entities", {"entities": [{"name": "after the kill", "type": "thing"}]}))

    asyncio.run(read_back())
    asyncio.run(_mover(db_settings, cells).finish(key))


async def test_an_aborted_move_leaves_the_tenant_served_where_it_was_and_nothing_behind(
    servers: tuple[Server, Server], db_settings: Settings, cells: dict[str, CellDatabase]
) -> None:
    writer, replica = servers
    key, source, target = await _seeded(writer, db_settings, "abort", 10)
    async with replica.client(key) as c:  # the replica caches the tenant before the fence
        ok(await c.call_tool("get_entity", {"name": "seed 1"}))
    with pytest.raises(Interrupted):
        await _mover(db_settings, cells, stop_after="compare").move(key, target)
    assert await _refused(cells[source], key) == ["write"]
    assert await _schema_on(cells[target], key) == 1

    aborted = await _mover(db_settings, cells).abort(key)
    assert (aborted.step, aborted.switched_at) == ("aborted", None) and aborted.finished_at is not None
    assert await _cell_of(db_settings, key) == source
    assert await _refused(cells[source], key) == []
    assert await _schema_on(cells[target], key) == 0
    schema = await fetchval(db_settings.admin_dsn(), "SELECT schema_name FROM engram.tenants WHERE key = $1", key)
    assert await fetchval(cells[target].admin_url, "SELECT count(*) FROM pg_roles WHERE rolname = $1", schema) == 0
    assert await fetchval(cells[target].admin_url, "SELECT count(*) FROM pg_subscription") == 0
    assert await fetchval(cells[source].admin_url, "SELECT count(*) FROM pg_publication") == 0
    assert await fetchval(cells[source].admin_url, OWN_SLOTS) == 0
    assert await fetchval(cells[source].admin_url, f"SELECT to_regclass('{schema}.engram_move_mark') IS NULL")
    # least privilege as before: the tenant appends to its audit log and changes none of it
    grants = "SELECT has_table_privilege($1, $2, 'UPDATE'), has_table_privilege($1, $2, 'INSERT')"
    conn = await asyncpg.connect(cells[source].admin_url)
    try:
        assert tuple(await conn.fetchrow(grants, schema, f"{schema}.audit")) == (False, True)
    finally:
        await conn.close()
    for i, server in enumerate((writer, replica)):  # both serve it, writes included, from where it was
        async with server.client(key) as c:
            ok(
                await c.call_tool(
                    "append_observations", {"items": [{"entity": "seed 2", "observations": [f"after {i}"]}]}
                )
            )
            assert len(ok(await c.call_tool("get_entity", {"name": "seed 2"}))["observations"]) >= 2

    # it may be moved afterwards as if never tried; an ended move cannot be aborted
    with pytest.raises(EngramError, match="no move to abort"):
        await _mover(db_settings, cells).abort(key)
    moved = await _mover(db_settings, cells).move(key, target)
    with pytest.raises(EngramError, match="served from cell"):
        await _mover(db_settings, cells).abort(key)
    assert moved.step == STEP_NAMES[-1] and await _cell_of(db_settings, key) == target
    async with writer.client(key) as c:
        assert len(ok(await c.call_tool("get_entity", {"name": "seed 2"}))["observations"]) == 3
    await _mover(db_settings, cells).finish(key)


async def test_an_abort_stopped_part_way_is_ended_by_running_it_again(
    servers: tuple[Server, Server], db_settings: Settings, cells: dict[str, CellDatabase]
) -> None:
    writer, _ = servers
    key, source, target = await _seeded(writer, db_settings, "abort2", 3)
    with pytest.raises(Interrupted):
        await _mover(db_settings, cells, stop_after="fence_writes").move(key, target)
    stopped = await _mover(db_settings, cells).status()
    move_id = next(m.id for m in stopped if m.key == key and m.finished_at is None)
    # as if the abort died after its first part: recorded as aborting, replication dropped
    await fetchval(db_settings.admin_dsn(), "UPDATE engram.tenant_moves SET step = 'aborting' WHERE id = $1", move_id)
    await _drop_subscriptions(cells[target].admin_url)
    with pytest.raises(EngramError, match="being undone"):
        await _mover(db_settings, cells).move(key, target)
    assert (await _mover(db_settings, cells).abort(key)).step == "aborted"
    assert await _refused(cells[source], key) == [] and await _schema_on(cells[target], key) == 0
    assert await fetchval(cells[source].admin_url, OWN_SLOTS) == 0


async def _refused(cell: CellDatabase, key: str) -> list[str]:
    """What the tenant's role may no longer do on `cell`, as the server runs it."""
    schema = await fetchval(cell.admin_url, "SELECT schema_name FROM engram.tenants WHERE key = $1", key)
    conn = await asyncpg.connect(cell.url)
    refused = []
    try:
        for what, statement in (
            ("write", f"DELETE FROM {schema}.entities WHERE false"),
            ("read", f"SELECT count(*) FROM {schema}.entities"),
        ):
            try:
                async with conn.transaction():
                    await conn.execute(f"SET LOCAL ROLE {schema}")
                    await conn.execute(statement)
            except asyncpg.InsufficientPrivilegeError:
                refused.append(what)
    finally:
        await conn.close()
    return refused


def test_the_command_plans_reports_and_refuses(
    servers: tuple[Server, Server], db_settings: Settings, cells: dict[str, CellDatabase]
) -> None:
    writer, _ = servers
    key, source, target = asyncio.run(_seeded(writer, db_settings, "cli", 3))
    env = server_env(db_settings, 8000) | cell_env(cells)
    moves = "SELECT count(*) FROM engram.tenant_moves m JOIN engram.tenants t ON t.id = m.tenant_id WHERE t.key = $1"

    planned = engram(env, "tenant", "move", key, target, "--dry-run")
    assert planned.returncode == 0, planned.stderr
    assert f"would move tenant {key} from cell {source} to cell {target}" in planned.stdout
    assert "prepare, publish, subscribe" in planned.stdout and "nothing was changed" in planned.stdout
    assert asyncio.run(fetchval(db_settings.admin_dsn(), moves, key)) == 0

    for args, says in [
        (("tenant", "move", "no-such-tenant", target), "no tenant"),
        (("tenant", "move", key, "nowhere"), "no cell 'nowhere'"),
        (("tenant", "move", key, "Bad!"), "a cell is named by"),
        (("tenant", "move", key, "x" * 5000), "a cell is named by"),
        (("tenant", "move", key, source), "lives on cell"),
        (("tenant", "move", key), "give the cell"),
        (("tenant", "move", key, "--finish"), "has no move to finish"),
        (("tenant", "move", key, "--abort"), "has no move to abort"),
        (("tenant", "show", key, target), "takes no cell"),
    ]:
        refused = engram(env, *args)
        assert refused.returncode != 0 and says in refused.stderr, (args, refused.stderr)
    assert asyncio.run(fetchval(db_settings.admin_dsn(), moves, key)) == 0

    # a move running now (its runner holds the tenant's lock) is not run twice at once
    async def while_running() -> subprocess.CompletedProcess[str]:
        conn = await asyncpg.connect(db_settings.admin_dsn())
        try:
            tenant_id = await conn.fetchval("SELECT id::text FROM engram.tenants WHERE key = $1", key)
            await conn.execute("SELECT pg_advisory_lock(hashtext('engram.move'), hashtext($1))", tenant_id)
            return await asyncio.to_thread(engram, env, "tenant", "move", key, target)
        finally:
            await conn.close()

    refused = asyncio.run(while_running())
    assert refused.returncode != 0 and "is running now" in refused.stderr, refused.stderr
    assert asyncio.run(fetchval(db_settings.admin_dsn(), moves, key)) == 0

    # a move stopped part-way: another target is refused; --status shows it; the command continues it
    with pytest.raises(Interrupted):
        asyncio.run(_mover(db_settings, cells, stop_after="subscribe").move(key, target))
    refused = engram(env, "tenant", "move", key, "main")
    assert refused.returncode != 0 and f"being moved to cell {target!r} already" in refused.stderr
    refused = engram(env, "tenant", "move", key, "--finish")
    assert refused.returncode != 0 and "run it to its end first" in refused.stderr
    status = engram(env, "tenant", "move", "--status")
    assert status.returncode == 0 and f"{key}\t{source} -> {target}\trunning\tstep subscribe" in status.stdout
    aborted = engram(env, "tenant", "move", key, "--abort")
    assert aborted.returncode == 0 and f"it stays on cell {source}" in aborted.stdout, aborted.stderr
    status = engram(env, "tenant", "move", "--status")
    assert f"{key}\t{source} -> {target}\taborted\tstep aborted" in status.stdout, status.stdout
    with pytest.raises(Interrupted):
        asyncio.run(_mover(db_settings, cells, stop_after="subscribe").move(key, target))
    done = engram(env, "tenant", "move", key, target)
    assert done.returncode == 0, done.stderr
    assert "continuing the move" in done.stdout and f"now lives on cell {target}" in done.stdout
    assert "  copy done in" in done.stdout and "  switch done in" in done.stdout
    assert "\r" not in done.stderr + done.stdout and f"moving {key}" not in done.stderr  # no bar in a pipe
    finished = engram(env, "tenant", "move", key, "--finish")
    assert finished.returncode == 0, finished.stderr
    assert "dropped; move finished" in finished.stdout
    cleaned = engram(env, "cell", "cleanup")
    assert cleaned.returncode == 0 and "old copies dropped" in cleaned.stdout


def test_a_move_at_a_terminal_draws_its_steps(
    servers: tuple[Server, Server], db_settings: Settings, cells: dict[str, CellDatabase]
) -> None:
    """At a terminal (a pty), the move's steps are a bar (docs/operations.md, "Progress"); the line
    each step ends with is printed above it all the same."""
    writer, _ = servers
    key, _, target = asyncio.run(_seeded(writer, db_settings, "tty", 3))
    code, shown = at_a_terminal(server_env(db_settings, 8000) | cell_env(cells), "tenant", "move", key, target)
    assert code == 0, shown.decode(errors="replace")[-2000:]
    assert f"moving {key}".encode() in shown and f"{len(STEP_NAMES)}/{len(STEP_NAMES)}".encode() in shown
    assert b"\r" in shown and b"  copy done in" in shown and f"now lives on cell {target}".encode() in shown
    asyncio.run(_mover(db_settings, cells).finish(key))
