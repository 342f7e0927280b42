"""server_status: what works right now, answered even when the database does not."""

from __future__ import annotations

import asyncio

from app import version
from app.auth.principal import Principal
from app.errors import EngramError
from app.observability.context import deadline
from app.services import models
from app.services.base import Service
from app.store import health

_ALWAYS = {"server_status"}
# The whole check ends within this (the tool promises an answer within 2 s); a database that does
# not answer by then is reported unavailable, and the connection that waited for it is dropped.
BUDGET = 1.5


class Status(Service):
    _probe: asyncio.Task[None] | None = None

    async def check(self, who: Principal, tools: list[str]) -> models.StatusResult:
        database = graph = "unavailable"
        if self.db.unreachable:
            # Known down: answer at once, and let one probe in the background find out whether it is back.
            self._probe_in_background()
        else:
            try:
                with deadline(BUDGET):
                    await health.ping(self.db)
                    database = "ok"
                    async with self.tx(who, readonly=True, primary=True) as tx:
                        await health.read_graph(tx)
                    graph = "ok"
            except EngramError:  # unavailable, or a tenant the store refuses
                pass
        usable = tools if graph == "ok" else [t for t in tools if t in _ALWAYS]
        return models.StatusResult(
            database=database, graph=graph, embeddings=self.indexer.state(), tools=usable, version=version.VERSION
        )

    def _probe_in_background(self) -> None:
        if self._probe is None or self._probe.done():
            self._probe = asyncio.create_task(self._ping(), name="database probe")

    async def _ping(self) -> None:
        try:
            with deadline(BUDGET):
                await health.ping(self.db)
        except EngramError:
            pass
