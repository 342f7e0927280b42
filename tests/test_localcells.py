"""The local clusters the tests of several cells run on: separate clusters, and a standby that
replays its primary."""

from __future__ import annotations

import asyncio

import asyncpg

from app import localcells
from tests.cells_fixtures import CellDatabase


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
