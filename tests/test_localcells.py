"""The local clusters the tests of several cells run on: separate clusters, a standby that
replays its primary, and a throw-away cluster that comes back after a kill or damage."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

import asyncpg
import pytest

from app.devdb import localcells
from app.devdb.provision import Chroot
from tests.support.cells import CellDatabase

# Alone, after the suite's parallel workers (`make test`):
# it kills a local cluster and makes the standby of `b` anew.
pytestmark = pytest.mark.serial


async def _one(url: str, query: str) -> object:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval(query)
    finally:
        await conn.close()


def test_cells_are_separate_clusters_and_the_standby_replays(
    cell_b: CellDatabase, cell_c: CellDatabase, standby_b: CellDatabase
) -> None:
    marker = "engram_localcells_probe"

    async def check() -> None:
        conn = await asyncpg.connect(cell_b.cluster.url(admin=True, database="postgres"))
        try:
            await conn.execute(f"DROP ROLE IF EXISTS {marker}")
            await conn.execute(f"CREATE ROLE {marker} NOLOGIN")
        finally:
            await conn.close()
        # a role is cluster-wide: on b, not on c
        assert (
            await _one(
                cell_c.cluster.url(admin=True, database="postgres"),
                f"SELECT count(*) FROM pg_roles WHERE rolname = '{marker}'",
            )
            == 0
        )
        await localcells.caught_up(cell_b.cluster, standby_b.cluster)
        assert await _one(standby_b.url, "SELECT pg_is_in_recovery()") is True
        assert await _one(standby_b.url, f"SELECT count(*) FROM pg_roles WHERE rolname = '{marker}'") == 1
        assert await _one(cell_b.url, "SELECT current_setting('wal_level')") == "logical"
        assert await _one(cell_b.admin_url, "SELECT count(*) FROM engram.schema_migrations") == await _one(
            cell_c.admin_url, "SELECT count(*) FROM engram.schema_migrations"
        )

    asyncio.run(check())


def test_a_killed_or_damaged_throw_away_cluster_comes_back(cell_b: CellDatabase) -> None:
    """Killed with its lock file naming a live process, it recovers; damaged (its control file
    gone, as a crash with `fsync` off may leave it), it is made anew."""
    name, port = "scratch_crash", 55449
    localcells.drop(name)
    made = localcells.cluster(name, port=port)
    url = made.url(admin=True, database="postgres")
    try:
        asyncio.run(_one(url, "CREATE TABLE kept (x int)"))
        asyncio.run(_one(url, "CHECKPOINT"))  # commits are asynchronous here: on disk before the kill
        data = Chroot().root / "var/lib/engram/clusters" / name
        postmaster = int((data / "postmaster.pid").read_text().split("\n", 1)[0])
        children = subprocess.run(["pgrep", "-P", str(postmaster)], capture_output=True, text=True).stdout.split()
        other = subprocess.Popen(["sleep", "300"])
        try:
            os.kill(postmaster, signal.SIGKILL)
            while any(Path(f"/proc/{pid}").exists() for pid in [postmaster, *children]):
                time.sleep(0.1)
            lines = (data / "postmaster.pid").read_text().split("\n")
            (data / "postmaster.pid").write_text("\n".join([str(other.pid), *lines[1:]]))
            localcells.cluster(name, port=port)
        finally:
            other.kill()
            other.wait()
        assert asyncio.run(_one(url, "SELECT to_regclass('kept') IS NOT NULL")) is True  # recovered, not remade

        made.stop()
        (data / "global" / "pg_control").unlink()
        localcells.cluster(name, port=port)
        assert asyncio.run(_one(url, "SELECT to_regclass('kept') IS NULL")) is True  # made anew, and serving
    finally:
        localcells.drop(name)


def test_a_standby_whose_wal_is_gone_is_made_anew(cell_b: CellDatabase, standby_b: CellDatabase) -> None:
    """Its slot keeps the primary's WAL while it is stopped; with the slot gone (a standby made
    before slots, or one past the bound), the next start makes it anew instead of waiting forever."""
    primary = cell_b.cluster.url(admin=True, database="postgres")
    slot = "SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'b_standby'"
    assert asyncio.run(_one(primary, slot)) in ("reserved", "extended")
    standby_b.cluster.stop()
    asyncio.run(_one(primary, "SELECT pg_drop_replication_slot('b_standby')"))
    asyncio.run(_one(primary, "SELECT pg_switch_wal()"))
    again = localcells.standby(cell_b.cluster, name="b_standby", port=standby_b.cluster.port)
    assert asyncio.run(_one(primary, slot)) in ("reserved", "extended")
    asyncio.run(localcells.caught_up(cell_b.cluster, again))
    assert asyncio.run(_one(standby_b.url, "SELECT pg_is_in_recovery()")) is True
