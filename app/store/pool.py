"""One database's pool of connections: every pooled connection is leased under the call's deadline,
and every way the database fails to be there comes out as `Unavailable`.

The control database and each cell's primary and standby get one `Pool` each (app/store/database.py
holds them); only this module opens asyncpg pools.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Concatenate, ParamSpec, TypeVar

import asyncpg
from prometheus_client import Gauge

from app.errors import EngramError
from app.observability.context import CALL, DEADLINE
from app.store.connect import init_connection, on_acquire
from app.store.errors import OUTAGES, Unavailable, is_outage

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Recycling:
    """How long a pooled connection lives and what it keeps: prepared statements cached, queries
    before it is closed, seconds idle before it is closed."""

    statements: int = 100
    queries: int = 10_000
    idle_seconds: float = 300.0


# The run-time role's settings that Engram relies on (migration 0022): each must read exactly so.
ROLE_SETTINGS = {
    "search_path": "ag_catalog, public",
    "max_parallel_workers_per_gather": "0",
    "jit": "off",
    "client_connection_check_interval": "1000",
}
# ... and these must be bounded (not 0), whatever the bound.
ROLE_BOUNDS = ("statement_timeout", "idle_in_transaction_session_timeout")


async def wrong_settings(conn: asyncpg.Connection) -> list[str]:
    """The run-time role's session settings that differ from what Engram needs, each with the
    statement that fixes it; empty when all are right."""
    rows = await conn.fetch(
        "SELECT name, setting, current_user, current_database() FROM pg_settings WHERE name = ANY($1::text[])",
        [*ROLE_SETTINGS, *ROLE_BOUNDS],
    )
    wrong = []
    for name, value, user, database in rows:
        want = ROLE_SETTINGS.get(name)
        if (value != want) if want is not None else value == "0":
            fix = want if want is not None else "10000"
            wrong.append(f"{name} is {value!r}: ALTER ROLE {user} IN DATABASE {database} SET {name} = {fix}")
    return wrong


def _refusal(exc: BaseException) -> EngramError | None:
    """A database error about what the call sent, not about the database or the code: a stable
    code instead of an internal error. Class 22 (data: a value out of range, a malformed one) and
    23 (a constraint: a unique one is a `conflict`) are `invalid`, class 54 (program limits: too
    many arguments, a value too large) is `limit`; its first line only, never the statement."""
    if not isinstance(exc, asyncpg.PostgresError):
        return None
    state = exc.sqlstate or ""
    line = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
    if state == "23505":
        return EngramError("conflict", f"the database refused it as a duplicate ({line})")
    if state[:2] in ("22", "23"):
        return EngramError("invalid", f"the database refused a value ({line})")
    if state[:2] == "54":
        return EngramError("limit", f"past a database limit ({line})", reason="database_limit")
    return None


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


class Lease:
    """A pooled connection held by one piece of work, and what that work has got to."""

    __slots__ = ("committing", "conn", "expired", "writes")

    def __init__(self, conn: asyncpg.Connection, *, writes: bool) -> None:
        self.conn = conn
        self.writes = writes  # a read-write transaction runs on it
        self.committing = False  # COMMIT was sent and not yet answered
        self.expired = False  # the deadline passed and the connection was terminated

    def discard(self) -> None:
        """Close the connection instead of returning it to the pool (its backend's state is not to be
        trusted, e.g. its cached view of role memberships): the pool opens a fresh one in its place."""
        _terminate(self.conn)

    async def commit(self) -> None:
        """COMMIT, marked as under way here and on the call: a connection lost meanwhile may have
        committed (`committed: "unknown"`)."""
        self.committing = True
        call = CALL.get()
        if call is not None:
            call.committing = True
        await self.conn.execute("COMMIT")
        self.committing = False
        if call is not None:
            call.committing = False


class Pool:
    """The pool of connections to one database (`dsn`, the run-time role's URL).

    It holds `min_size`..`max_size` connections, recycled as `recycling` says; a caller waits at
    most `acquire_seconds` for a free one, and work with no deadline of its own gets `call_deadline`
    seconds. `on_demand`: opened by the first call that needs it (a cell's, a standby's) rather
    than by `open` at start. `up`: the gauge that shows whether it answers (the control database's
    `engram_database_up`; a cell's state is in /readyz instead).
    """

    def __init__(
        self,
        dsn: str,
        *,
        name: str,
        min_size: int,
        max_size: int,
        acquire_seconds: float,
        call_deadline: float,
        recycling: Recycling | None = None,
        on_demand: bool = False,
        up: Gauge | None = None,
    ) -> None:
        self._dsn = dsn
        self.name = name
        self._min_size = min_size
        self._max_size = max_size
        self.acquire_seconds = acquire_seconds
        self.call_deadline = call_deadline
        self._recycling = recycling or Recycling()
        self._on_demand = on_demand
        self._up = up
        self._pool: asyncpg.Pool | None = None
        self._opening = asyncio.Lock()
        self.waiting = 0  # callers waiting for a pooled connection
        # Monotonic time of the first failure since the database last answered; None while it answers.
        self.down_since: float | None = None

    def like(self, dsn: str, name: str) -> Pool:
        """A pool of the same sizes on another database (a cell's, a standby's), opened on first use."""
        return Pool(
            dsn,
            name=name,
            min_size=self._min_size,
            max_size=self._max_size,
            acquire_seconds=self.acquire_seconds,
            call_deadline=self.call_deadline,
            recycling=self._recycling,
            on_demand=True,
        )

    async def open(self) -> None:
        # No startup parameters: PgBouncer refuses them. The session settings are the run-time
        # role's own (migration 0022, checked by `wrong_settings`); a tenant transaction sets its
        # timeouts in its opening statement.
        self._pool = await asyncpg.create_pool(
            self._dsn,
            init=init_connection,
            setup=on_acquire,
            reset=_keep_session,
            min_size=self._min_size,
            max_size=self._max_size,
            timeout=self.acquire_seconds,  # to connect (a server that accepts but never answers)
            # Prepared statements kept per connection; behind PgBouncer its max_prepared_statements
            # must be at least this (docs/scaling.md, "Connections").
            statement_cache_size=self._recycling.statements,
            # Each backend keeps a relation cache for every tenant table it touched: a connection is
            # closed after this many queries, or this long idle, so that cache stays bounded.
            max_queries=self._recycling.queries,
            max_inactive_connection_lifetime=self._recycling.idle_seconds,
        )

    async def _open_on_demand(self, wait: float) -> None:
        """Opened by the first call that needs it, within that call's wait."""
        async with asyncio.timeout(wait), self._opening:
            if self._pool is None:
                await self.open()

    async def close(self, seconds: float = 10) -> None:
        """Close the pool gracefully, or terminate its connections if the database does not answer."""
        if self._pool is not None:
            pool, self._pool = self._pool, None
            try:
                async with asyncio.timeout(seconds):
                    await pool.close()
            except OUTAGES:  # TimeoutError among them
                pool.terminate()

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError("the database pool is not open")
        return self._pool

    @property
    def unreachable(self) -> bool:
        """Whether the last attempt to use the database failed for want of an answer."""
        return self.down_since is not None

    def _failed(self) -> None:
        if self.down_since is None:
            self.down_since = time.monotonic()
            if self._up is not None:
                self._up.set(0)

    def _answered(self) -> None:
        if self.down_since is not None:
            self.down_since = None
            if self._up is not None:
                self._up.set(1)

    @asynccontextmanager
    async def connection(self, *, writes: bool = False) -> AsyncIterator[Lease]:
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
            if self._pool is None and self._on_demand:
                await self._open_on_demand(wait)
            # asyncio.timeout rather than acquire(timeout=...), which runs the wait in a task of its own.
            async with asyncio.timeout(wait):
                conn = await self.pool.acquire()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            if not is_outage(exc):
                raise
            raise self._unavailable(exc, None) from None
        finally:
            self.waiting -= 1
        lease = Lease(conn, writes=writes)
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
            if isinstance(exc, asyncpg.QueryCanceledError):  # a statement ran past its time limit
                raise self._timed_out(lease) from None
            if (refusal := _refusal(exc)) is not None:
                raise refusal from None
            raise
        if watchdog is not None:
            watchdog.cancel()
        self._answered()
        await self.pool.release(conn)

    async def run(
        self, fn: Callable[Concatenate[asyncpg.Connection, P], Awaitable[R]], *args: P.args, **kwargs: P.kwargs
    ) -> R:
        """`fn(connection, ...)` on a pooled connection under the current deadline: for work outside a
        tenant's transaction (the authorization server's state, server secrets)."""
        async with self.connection() as lease:
            return await fn(lease.conn, *args, **kwargs)

    def _exhausted(self) -> bool:
        """Every connection the pool may open is open and in use (rather than stuck connecting)."""
        pool = self._pool
        return pool is not None and pool.get_size() >= pool.get_max_size() and pool.get_idle_size() == 0

    def _expire(self, lease: Lease) -> None:
        """The deadline passed with the connection still held: drop it, and with it its transaction."""
        lease.expired = True
        self._failed()
        _terminate(lease.conn)

    @staticmethod
    def _timed_out(lease: Lease) -> Unavailable:
        """A statement cancelled by its statement_timeout (or an administrator): the transaction is
        rolled back, so a write wrote nothing. Usually a database too busy or a lock held long."""
        message = "a database statement ran past its time limit"
        if lease.writes:
            message += "; nothing was written"
        return Unavailable("statement_timeout", message, committed=False if lease.writes else None)

    def _unavailable(self, exc: BaseException, lease: Lease | None) -> Unavailable:
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
