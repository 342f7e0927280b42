"""The probes behind `server_status`: does the database answer, can the tenant's graph be read."""

from __future__ import annotations

from app.store.database import Database, Tx, timed


@timed
async def ping(db: Database) -> None:
    async with db.connection() as lease:
        await lease.conn.fetchval("SELECT 1")


@timed
async def read_graph(tx: Tx) -> None:
    """Reads the tenant's graph label table without returning a row: its schema and grants are there."""
    await tx.fetchval('SELECT count(*) FROM {s}."Entity" WHERE false')
