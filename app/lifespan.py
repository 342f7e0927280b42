"""The server's start-up and shutdown around serving requests: the pool opened (waiting for a
database that is still starting) and closed, the schema checked, the metrics port, the built-in
authorization server and the embedding model started and stopped, and the background tasks
(usage counts written, the database watched, the event loop's lag measured)."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any
from wsgiref.simple_server import WSGIServer

import asyncpg
import httpx2
from mcp.server import MCPServer
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import start_http_server
from starlette.applications import Starlette

from app.authserver.server import AuthServer
from app.config import Settings
from app.embeddings.embedder import Embedder
from app.errors import EngramError
from app.health import readiness
from app.observability import metrics, tracing
from app.observability.context import deadline
from app.observability.loop_lag import probe_lag
from app.observability.usage import Usage
from app.services.indexing import Indexer
from app.services.live import Live
from app.store import audit, migrate
from app.store.database import Database
from app.version import VERSION

logger = logging.getLogger("engram")

DRAIN_SECONDS = 5.0  # how long shutdown waits for the turns hooks are still keeping after their answers


class Lifespan:
    """The Starlette lifespan: `app.state.accepting` (read by /readyz) is true between start-up
    and the beginning of shutdown; shutdown ends with the pool closed."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        *,
        indexer: Indexer,
        usage: Usage,
        mcp: Sequence[MCPServer],
        auth: AuthServer | None,
        http: httpx2.AsyncClient,
        live: Live | None = None,
        sweep: Callable[[], Awaitable[object]] | None = None,
        drain: Callable[[float], Awaitable[object]] | None = None,
    ) -> None:
        self._settings = settings
        self._db = db
        self._indexer = indexer
        self._usage = usage
        self._mcp = list(mcp)  # one server per endpoint
        self._auth = auth
        self._http = http
        self._live = live  # the subscriptions' feed of changes from every server
        self._sweep = sweep  # soft-deleted entities past their retention, erased
        self._drain = drain  # the work hooks go on with after answering (services/hook_tasks.py)
        self._metrics_server: WSGIServer | None = None
        self._background: list[asyncio.Task[None]] = []
        self._tracing: TracerProvider | None = None

    @asynccontextmanager
    async def __call__(self, app: Starlette) -> AsyncIterator[None]:
        await self._start()
        app.state.accepting = True
        try:
            async with AsyncExitStack() as sessions:
                for server in self._mcp:
                    await sessions.enter_async_context(server.session_manager.run())
                yield
        finally:
            app.state.accepting = False  # readiness drops first
            await self._stop()

    async def _start(self) -> None:
        settings, db = self._settings, self._db
        await _open_when_reachable(db, settings.database_wait_seconds)
        try:
            problem = await readiness(db, settings.migrations_dir)
        except migrate.MigrationError:
            await db.close()
            raise  # a schema this code does not know: refuse to serve
        _watch_pool(db)
        watch_breaker(self._indexer.embedder)
        self._metrics_server = _serve_metrics(settings.metrics_port, settings.host)
        if settings.otlp_endpoint:
            self._tracing = tracing.start(
                settings.otlp_endpoint, version=VERSION, sample_ratio=settings.trace_sample_ratio
            )
        try:
            if self._auth is not None:
                await self._auth.start()
            await self._indexer.start()  # loads the embedding model; a broken model setting stops the server here
        except Exception:
            self._stop_metrics()
            await db.close()
            raise
        logger.info(
            "engram %s listening on %s",
            VERSION,
            ", ".join(settings.endpoint_urls.values()),
            extra={"config": settings.redacted(), "not_ready": problem},
        )
        if self._live is not None:
            self._live.start()
            if not await self._live.ready(10):  # it keeps trying; changes meanwhile reach nobody here
                logger.warning("the change feed is not listening yet")
        self._background = [
            asyncio.create_task(
                self._usage.flush_every(settings.usage_flush_seconds, functools.partial(_add_usage, db))
            ),
            asyncio.create_task(_watch_database(db)),
            asyncio.create_task(probe_lag()),
        ]
        if self._sweep is not None:
            self._background.append(asyncio.create_task(_every(settings.retention_sweep_seconds, self._sweep)))

    async def _stop(self) -> None:
        if self._drain is not None:
            await self._drain(DRAIN_SECONDS)
        if self._live is not None:
            await self._live.stop()
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self._stop_metrics()
        await self._indexer.stop()
        if self._auth is not None:
            await self._auth.stop()
        await self._http.aclose()
        await self._db.close()
        if self._tracing is not None:
            self._tracing.shutdown()  # sends what is still batched

    def _stop_metrics(self) -> None:
        if self._metrics_server is not None:
            self._metrics_server.shutdown()


async def _open_when_reachable(db: Database, seconds: float) -> None:
    """Open the pool, waiting up to `seconds` for a database that is still starting (a bundled one, say)."""
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        try:
            await db.open()
            return
        except (OSError, asyncpg.CannotConnectNowError, asyncpg.PostgresConnectionError) as exc:
            if asyncio.get_running_loop().time() >= deadline:
                raise
            logger.warning("database not reachable yet (%s); retrying", type(exc).__name__)
            await asyncio.sleep(2)


def _watch_pool(db: Database) -> None:
    """engram_db_pool_connections: the control database's pool, read at each scrape."""
    control = db.control
    metrics.DB_POOL.labels("open").set_function(lambda: control.pool.get_size())
    metrics.DB_POOL.labels("in_use").set_function(lambda: control.pool.get_size() - control.pool.get_idle_size())
    metrics.DB_POOL.labels("waiting").set_function(lambda: control.waiting)
    metrics.DB_POOL.labels("max").set_function(lambda: control.pool.get_max_size())


def watch_breaker(embedder: Embedder | None) -> None:
    """engram_embedding_breaker_state, read at each scrape (a pause ends by the clock, not by a call)."""

    def is_in(state: str) -> Callable[[], float]:
        return lambda: float((embedder.breaker if embedder else "closed") == state)

    for state in metrics.BREAKER_STATES:
        metrics.EMBED_BREAKER.labels(state).set_function(is_in(state))
    metrics.EMBED_BREAKER_FAILURES.set_function(lambda: embedder.failures if embedder else 0)


def _serve_metrics(port: int, host: str) -> WSGIServer | None:
    """/metrics on its own port, so it is not public through the ingress that exposes /mcp (0: none;
    the app serves it on the main port)."""
    if port == 0:
        return None
    server, _ = start_http_server(port, addr=host, registry=metrics.REGISTRY)
    return server


async def _add_usage(db: Database, counts: list[dict[str, Any]]) -> None:
    async with db.connection() as lease:
        await audit.add_usage(lease.conn, counts)


async def _every(seconds: float, job: Callable[[], Awaitable[object]]) -> None:
    """`job` every `seconds` (the first after one period); a failed run waits for the next."""
    while True:
        await asyncio.sleep(seconds)
        try:
            await job()
        except Exception as exc:  # the next run tries again; the database may be away
            logger.warning("background job %s failed: %s", getattr(job, "__name__", "job"), str(exc)[:200])


async def _watch_database(db: Database, every: float = 15, budget: float = 5) -> None:
    """Keeps engram_database_up and engram_tenants current (alerts read the first). Each check ends
    within `budget`, answered or not (a stalled database does not stall the watch)."""
    while True:
        try:
            with deadline(budget):
                async with db.connection() as lease:
                    metrics.TENANTS.set(await audit.tenant_count(lease.conn))
            metrics.DB_UP.set(1)
        except Exception as exc:  # any failure means: not up; the loop must go on
            logger.warning("database check failed: %s", exc if isinstance(exc, EngramError) else type(exc).__name__)
            metrics.DB_UP.set(0)
        await asyncio.sleep(every)
