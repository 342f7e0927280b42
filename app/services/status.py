"""server_status: what works right now, answered even when the database does not."""

from __future__ import annotations

import asyncio

import asyncpg

from app.auth.principal import Principal
from app.services import models
from app.services.base import Service

VERSION = "0.1.0"
_ALWAYS = {"server_status"}


class Status(Service):
    async def check(self, who: Principal, tools: list[str]) -> models.StatusResult:
        database = graph = "unavailable"
        try:
            async with asyncio.timeout(2):
                async with self.db.pool.acquire() as conn:
                    await conn.fetchval("SELECT 1")
                database = "ok"
                async with self.tx(who, readonly=True) as tx:
                    await tx.fetchval('SELECT count(*) FROM {s}."Entity" WHERE false')
                graph = "ok"
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
            pass
        usable = tools if graph == "ok" else [t for t in tools if t in _ALWAYS]
        return models.StatusResult(
            database=database, graph=graph, embeddings=self.indexer.state(), tools=usable, version=VERSION
        )
