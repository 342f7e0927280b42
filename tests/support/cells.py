"""Fixtures of several clusters (app/devdb/localcells.py): cells `b` and `c` and a streaming standby of
`b`, each with this suite's own database (ENGRAM_TEST_DB), made afresh and migrated once per run
and dropped at its end; and what the tests of cells share (a server's cell settings, the cells'
states in the directory, a value read as a cell's owner).

tests/conftest.py registers them (`pytest_plugins`); where the local clusters cannot run (no
trixie root, not root), the tests that ask for them skip.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import asyncpg
import pytest

from app.config import Settings
from app.devdb import localcells, provision
from app.store import migrate
from tests.support.server import TEST_DB

# Ports of this workplace's local cells: fixed, so a cluster made once is found again.
PORTS = {"b": 55441, "c": 55442, "b_standby": 55443}


class CellDatabase:
    """This suite's database on one local cluster: its run-time and owner URLs."""

    def __init__(self, cluster: localcells.Cluster) -> None:
        self.cluster = cluster
        self.name = cluster.name
        self.url = cluster.url(database=TEST_DB)
        self.admin_url = cluster.url(admin=True, database=TEST_DB)


def _cluster(name: str) -> localcells.Cluster:
    try:
        return localcells.cluster(name, port=PORTS[name])
    except provision.ProvisionError as exc:
        pytest.skip(str(exc))


def _fresh(cluster: localcells.Cluster, settings: Settings) -> CellDatabase:
    cell = CellDatabase(cluster)
    asyncio.run(provision.recreate_database(cluster.url(admin=True), TEST_DB))
    asyncio.run(migrate.migrate(cell.admin_url, settings.migrations_dir))
    return cell


def _drop(cell: CellDatabase) -> None:
    """This suite's database on the cell dropped at the end of the run, as the control database is
    (with the replication slots a stopped move may have left on it)."""

    async def drop() -> None:
        server = await asyncpg.connect(cell.cluster.url(admin=True, database="postgres"))
        try:
            await server.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                " WHERE database = $1 AND NOT active",
                TEST_DB,
            )
        finally:
            await server.close()
        await provision.drop_database(cell.cluster.url(admin=True), TEST_DB)

    asyncio.run(drop())


@pytest.fixture(scope="session")
def cell_b(db_settings: Settings) -> Iterator[CellDatabase]:
    cell = _fresh(_cluster("b"), db_settings)
    yield cell
    _drop(cell)


@pytest.fixture(scope="session")
def cell_c(db_settings: Settings) -> Iterator[CellDatabase]:
    cell = _fresh(_cluster("c"), db_settings)
    yield cell
    _drop(cell)


@pytest.fixture(scope="session")
def standby_b(cell_b: CellDatabase) -> Iterator[CellDatabase]:
    """A hot standby of cluster `b` (every database of it, this suite's among them)."""
    try:
        cluster = localcells.standby(cell_b.cluster, name="b_standby", port=PORTS["b_standby"])
    except provision.ProvisionError as exc:
        pytest.skip(str(exc))
    asyncio.run(localcells.caught_up(cell_b.cluster, cluster))  # this run's database made on b is there too
    yield CellDatabase(cluster)


async def fetchval(url: str, query: str, *args: object) -> object:
    """One value, read (or one statement run) on its own connection to `url`."""
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval(query, *args)
    finally:
        await conn.close()


async def set_states(settings: Settings, **states: str) -> None:
    """The cells' states in the directory (each registered if new), their capacity unbounded."""
    conn = await asyncpg.connect(settings.admin_dsn())
    try:
        for name in states:
            await conn.execute("INSERT INTO engram.cells (name) VALUES ($1) ON CONFLICT DO NOTHING", name)
        for name, state in states.items():
            await conn.execute("UPDATE engram.cells SET state = $2, capacity = NULL WHERE name = $1", name, state)
    finally:
        await conn.close()


def cell_env(cells: dict[str, CellDatabase]) -> dict[str, str]:
    """The ENGRAM_CELL* settings of a server that reaches these cells."""
    env = {"ENGRAM_CELLS": ",".join(cells)}
    for name, cell in cells.items():
        env[f"ENGRAM_CELL_{name.upper()}_URL"] = cell.url
        env[f"ENGRAM_CELL_{name.upper()}_ADMIN_URL"] = cell.admin_url
    return env
