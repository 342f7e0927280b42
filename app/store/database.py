"""The connection pool and the tenant transaction every store call runs in."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Concatenate, ParamSpec, TypeVar

import asyncpg
import orjson
from cachetools import TTLCache

from app.config import Settings
from app.errors import EngramError
from app.observability import metrics, tracing
from app.observability.context import CALL, DEADLINE
from app.store.errors import OUTAGES, Unavailable, is_outage

logger = logging.getLogger("engram.database")

P = ParamSpec("P")
R = TypeVar("R")

# AGE's operators (@> for {k: v} patterns, =) resolve through the search path.
_SEARCH_PATH = "ag_catalog, public"
_SCHEMA = re.compile(r"^t_[0-9a-f]{32}$")
# The cursor signing keys among the server secrets: the first, and those `engram cursor-key rotate` adds.
CURSOR_KEY = "^cursor(-[0-9a-f]{8})?$"
_TENANT_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@|-]{0,199}$")


# Tenants resolved to their schema, per server: bounded, and read again after an hour, so a tenant
# deleted and made again under the same id is found within that time (at once when the role is gone).
TENANT_CACHE_SIZE = 10_000
TENANT_CACHE_SECONDS = 3600.0


class InvalidTenant(EngramError):
    """A tenant key that the server refuses (`forbidden`): malformed, unknown while tenants are managed, or deleted."""

    def __init__(self, message: str) -> None:
        super().__init__("forbidden", message)


@dataclass(frozen=True, slots=True)
class Tenant:
    """A tenant as the store sees it. `schema` holds its AGE graph and search tables."""

    id: str
    key: str
    schema: str

    def __post_init__(self) -> None:
        if not _SCHEMA.fullmatch(self.schema):  # the only identifier ever built into query text
            raise InvalidTenant(f"refusing schema name {self.schema!r}")


def timed(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Record a store operation's latency under its name (e.g. ``entities.resolve``), and trace it."""
    operation = f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__name__}"
    histogram = metrics.DB_LATENCY.labels(operation)

    @functools.wraps(fn)
    async def run(*args: P.args, **kwargs: P.kwargs) -> R:
        started = time.perf_counter()
        try:
            if tracing.enabled:
                with tracing.db_span(operation):
                    return await fn(*args, **kwargs)
            return await fn(*args, **kwargs)
        finally:
            histogram.observe(time.perf_counter() - started)

    return run


@dataclass(slots=True)
class Growth:
    """What a transaction added to its tenant's usage (negative: freed), for the quotas."""

    entities: int = 0
    observations: int = 0
    text_bytes: int = 0

    def __bool__(self) -> bool:
        return bool(self.entities or self.observations or self.text_bytes)


class Tx:
    """One transaction, pinned to one tenant. Query text may contain ``{s}`` for the schema."""

    __slots__ = ("affected", "conn", "entities", "growth", "pending", "tenant")

    def __init__(self, conn: asyncpg.Connection, tenant: Tenant) -> None:
        self.conn = conn
        self.tenant = tenant
        self.affected: list[str] = []  # ids of what this transaction changed, for the audit row
        self.entities: list[str] = []  # entities whose texts it may have changed, for the search index
        self.pending = 0  # texts it left waiting for an embedding
        self.growth = Growth()  # kept by the store functions that add or remove entities and observations

    def _sql(self, query: str) -> str:
        return query.replace("{s}", self.tenant.schema)

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        return await self.conn.fetch(self._sql(query), *args)

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None:
        return await self.conn.fetchrow(self._sql(query), *args)

    async def fetchval(self, query: str, *args: Any) -> Any:
        return await self.conn.fetchval(self._sql(query), *args)

    async def execute(self, query: str, *args: Any) -> str:
        return await self.conn.execute(self._sql(query), *args)


async def init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec(
        "jsonb",
        schema="pg_catalog",
        format="text",
        encoder=lambda v: orjson.dumps(v).decode(),
        decoder=orjson.loads,
    )


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Nothing to reset: every setting and lock the server takes is transaction-scoped."""


def _terminate(conn: asyncpg.Connection) -> None:
    """Close the socket now, sending nothing; the pool then drops the connection and opens a new one."""
    with contextlib.suppress(asyncpg.InterfaceError):  # already gone (closed, or back in the pool)
        conn.terminate()


class _QuietOutages(logging.Filter):
    """asyncpg's pool logs a traceback each time it fails to reopen a connection; while the database
    is down that is one traceback a second saying the same thing. Keep the line, drop the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None and is_outage(record.exc_info[1]):
            record.msg = f"{record.msg} ({type(record.exc_info[1]).__name__})"
            record.exc_info = None
            record.exc_text = None
        return True


logging.getLogger("asyncpg.pool").addFilter(_QuietOutages())


class _Lease:
    """A pooled connection held by one piece of work, and what that work has got to."""

    __slots__ = ("committing", "conn", "expired", "writes")

    def __init__(self, conn: asyncpg.Connection, *, writes: bool) -> None:
        self.conn = conn
        self.writes = writes  # a read-write transaction runs on it
        self.committing = False  # COMMIT was sent and not yet answered
        self.expired = False  # the deadline passed and the connection was terminated


class Database:
    """The pool of connections to one database, and the tenant transactions taken from it.

    `dsn` names the run-time role; the pool holds `min_size`..`max_size` connections, each
    statement ends after `statement_timeout_ms`, a caller waits at most `acquire_seconds` for a free
    connection, and work with no deadline of its own gets `call_deadline` seconds. With
    `create_tenants`, a tenant is created on first use; otherwise only existing tenants are served.
    """

    def __init__(
        self,
        dsn: str,
        *,
        min_size: int,
        max_size: int,
        statement_timeout_ms: int,
        acquire_seconds: float,
        call_deadline: float,
        create_tenants: bool,
    ) -> None:
        self._dsn = dsn
        self._min_size = min_size
        self._max_size = max_size
        self._statement_timeout_ms = statement_timeout_ms
        self._pool: asyncpg.Pool | None = None
        self._tenants: TTLCache[str, Tenant] = TTLCache(maxsize=TENANT_CACHE_SIZE, ttl=TENANT_CACHE_SECONDS)
        self._create_tenants = create_tenants
        self.waiting = 0  # callers waiting for a pooled connection
        self.call_deadline = call_deadline
        self.acquire_seconds = acquire_seconds
        # Monotonic time of the first failure since the database last answered; None while it answers.
        self.down_since: float | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> Database:
        return cls(
            settings.runtime_dsn(),
            min_size=settings.pool_min_size,
            max_size=settings.pool_max_size,
            statement_timeout_ms=settings.statement_timeout_ms,
            acquire_seconds=settings.pool_acquire_seconds,
            call_deadline=settings.call_deadline,
            create_tenants=settings.tenant_policy == "auto",
        )

    async def open(self) -> None:
        self._pool = await asyncpg.create_pool(
            self._dsn,
            init=init_connection,
            reset=_keep_session,
            min_size=self._min_size,
            max_size=self._max_size,
            timeout=self.acquire_seconds,  # to connect (a server that accepts but never answers)
            server_settings={
                "search_path": _SEARCH_PATH,
                "statement_timeout": str(self._statement_timeout_ms),
                "idle_in_transaction_session_timeout": str(self._statement_timeout_ms * 2),
                "application_name": "engram",
                # Short OLTP queries: starting parallel workers costs more than they save (10-20 ms).
                "max_parallel_workers_per_gather": "0",
                # A backend notices soon that its client dropped the connection (a missed deadline)
                # and stops its query, instead of running it to the end for no one.
                "client_connection_check_interval": "1000",
            },
        )

    async def close(self, seconds: float = 10) -> None:
        """Close the pool gracefully, or terminate its connections if the database does not answer."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            try:
                async with asyncio.timeout(seconds):
                    await pool.close()
            except (TimeoutError, *OUTAGES):
                pool.terminate()

    @property
    def unreachable(self) -> bool:
        """Whether the last attempt to use the database failed for want of an answer."""
        return self.down_since is not None

    def _failed(self) -> None:
        if self.down_since is None:
            self.down_since = time.monotonic()
            metrics.DB_UP.set(0)

    def _answered(self) -> None:
        if self.down_since is not None:
            self.down_since = None
            metrics.DB_UP.set(1)

    @asynccontextmanager
    async def connection(self, *, writes: bool = False) -> AsyncIterator[_Lease]:
        """A pooled connection for work that must end by the current deadline (DEADLINE, else
        the call deadline from now): the wait for it is bounded, and if the deadline passes while it
        is held, it is terminated at once (no goodbye to a server that may not answer) and leaves
        the pool, which opens a fresh one in its place. Every way the database fails to be there
        comes out as `Unavailable`.
        """
        loop = asyncio.get_running_loop()
        at = DEADLINE.get()
        if at is None:
            at = loop.time() + self.call_deadline
        wait = min(self.acquire_seconds, max(at - loop.time(), 0.0))
        self.waiting += 1
        try:
            conn = await self.pool.acquire(timeout=wait)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            if not is_outage(exc):
                raise
            raise self._unavailable(exc, None) from None
        finally:
            self.waiting -= 1
        lease = _Lease(conn, writes=writes)
        watchdog = loop.call_at(at, self._expire, lease) if at != math.inf else None
        try:
            yield lease
        except BaseException as exc:
            if watchdog is not None:
                watchdog.cancel()
            if lease.expired or isinstance(exc, asyncio.CancelledError) or is_outage(exc):
                _terminate(conn)  # its state is unknown; nothing more is sent on it
                await self.pool.release(conn)  # returns at once: the pool drops a closed connection
                if isinstance(exc, asyncio.CancelledError):
                    raise
                raise self._unavailable(exc, lease) from None
            self._answered()  # it answered, with an error
            await self.pool.release(conn)
            raise
        if watchdog is not None:
            watchdog.cancel()
        self._answered()
        await self.pool.release(conn)

    def _exhausted(self) -> bool:
        """Every connection the pool may open is open and in use (rather than stuck connecting)."""
        pool = self.pool
        return pool.get_size() >= pool.get_max_size() and pool.get_idle_size() == 0

    def _expire(self, lease: _Lease) -> None:
        """The deadline passed with the connection still held: drop it, and with it its transaction."""
        lease.expired = True
        self._failed()
        _terminate(lease.conn)

    def _unavailable(self, exc: BaseException, lease: _Lease | None) -> Unavailable:
        committed: bool | str | None = None
        if lease is not None and lease.writes:
            committed = "unknown" if lease.committing else False
        if lease is not None and lease.expired:
            reason, message = "deadline", "the database did not answer in time"
        elif lease is None and isinstance(exc, TimeoutError) and self._exhausted():
            reason, message = "pool_exhausted", "no database connection was free in time"
        else:
            reason, message = "database_unreachable", f"the database is not reachable ({type(exc).__name__})"
        if reason != "pool_exhausted":
            self._failed()
        if committed == "unknown":
            message += "; the write was sent for commit and may or may not have been applied"
        elif committed is False:
            message += "; nothing was written"
        return Unavailable(reason, message, committed=committed)

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError("the database pool is not open")
        return self._pool

    async def run(
        self, fn: Callable[Concatenate[asyncpg.Connection, P], Awaitable[R]], *args: P.args, **kwargs: P.kwargs
    ) -> R:
        """`fn(connection, ...)` on a pooled connection under the current deadline: for work outside a
        tenant's transaction (the authorization server's state, server secrets)."""
        async with self.connection() as lease:
            return await fn(lease.conn, *args, **kwargs)

    def cached_tenant(self, key: str) -> Tenant | None:
        """The tenant for `key` if this server resolved it lately; never asks the database."""
        return self._tenants.get(key)

    async def tenant(self, key: str) -> Tenant:
        """The tenant for `key`; under the `auto` policy it is created with its graph on first use."""
        if (cached := self._tenants.get(key)) is not None:
            return cached
        if not _TENANT_KEY.fullmatch(key):  # not match(): "$" would let a final newline through
            raise InvalidTenant("a tenant id is 1-200 letters, digits and . _ : @ | - (starting alphanumeric)")
        async with self.connection() as lease:
            row = await lease.conn.fetchrow(
                "SELECT tenant_id::text, schema_name FROM engram.tenant_schema($1, $2)", key, self._create_tenants
            )
        if row is None or row[0] is None:
            raise InvalidTenant(f"tenant {key!r} does not exist here; an administrator must create it")
        tenant = Tenant(row[0], key, row[1])
        self._tenants[key] = tenant
        return tenant

    async def secret(self, name: str) -> bytes:
        """A server-wide secret kept in the database, so every replica shares it."""
        async with self.connection() as lease:
            value = await lease.conn.fetchval("SELECT value FROM engram.server_secrets WHERE name = $1", name)
        if value is None:
            raise RuntimeError(f"server secret {name!r} is missing: run `engram migrate`")
        return value

    async def cursor_keys(self) -> list[tuple[str, bytes, float]]:
        """The cursor signing keys, oldest first: (id, key, seconds since it was added). Shared by every replica."""
        async with self.connection() as lease:
            rows = await lease.conn.fetch(
                "SELECT name, value, extract(epoch FROM now() - created_at)::float8 FROM engram.server_secrets"
                f" WHERE name ~ '{CURSOR_KEY}' ORDER BY created_at, name"
            )
        return [(r[0], r[1], r[2]) for r in rows]

    @asynccontextmanager
    async def transaction(self, tenant: Tenant, *, readonly: bool = False) -> AsyncIterator[Tx]:
        """One transaction in the tenant's context; commits on success.

        The context is the tenant's own role (the only one with privileges on its schema) and the
        setting that row-level security on shared tables reads; both end with the transaction.

        It is bound by the current deadline (`connection`): if that passes before COMMIT is sent,
        the connection is terminated and the server rolls the transaction back, so a call answered
        `unavailable` cannot commit later.
        """
        async with self.connection(writes=not readonly) as lease:
            conn = lease.conn
            transaction = conn.transaction(readonly=readonly)
            await transaction.start()
            try:
                try:
                    await conn.execute(
                        "SELECT set_config('engram.tenant_id', $1, true), set_config('role', $2, true)",
                        tenant.id,
                        tenant.schema,
                    )
                except asyncpg.InvalidParameterValueError:  # role "t_…" does not exist: deleted meanwhile
                    self._tenants.pop(tenant.key, None)
                    raise InvalidTenant(f"tenant {tenant.key!r} was deleted; call again to start anew") from None
                yield Tx(conn, tenant)
            except BaseException as exc:
                # A refusal (domain error, constraint, lost race) rolls back as usual; a connection that
                # failed or expired is terminated by `connection` instead, with no ROLLBACK to wait for.
                if not (lease.expired or isinstance(exc, asyncio.CancelledError) or is_outage(exc)):
                    await transaction.rollback()
                raise
            lease.committing = True
            call = CALL.get()
            if call is not None:
                call.committing = True
            await transaction.commit()
            lease.committing = False
            if call is not None:
                call.committing = False

    async def api_key(self, key_id: str) -> asyncpg.Record | None:
        """An API key's record by its public id, looked up before any tenant is known."""
        async with self.connection() as lease:
            return await lease.conn.fetchrow("SELECT * FROM engram.api_key($1)", key_id)
