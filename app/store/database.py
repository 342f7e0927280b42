"""The connection pool and the tenant transaction every store call runs in."""

from __future__ import annotations

import functools
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import asyncpg
import orjson
from cachetools import TTLCache

from app.config import Settings
from app.errors import EngramError
from app.observability import metrics

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
    """Record a store operation's latency under its name (e.g. ``entities.resolve``)."""
    histogram = metrics.DB_LATENCY.labels(f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__name__}")

    @functools.wraps(fn)
    async def run(*args: P.args, **kwargs: P.kwargs) -> R:
        started = time.perf_counter()
        try:
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


class Database:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._pool: asyncpg.Pool | None = None
        self._tenants: TTLCache[str, Tenant] = TTLCache(maxsize=TENANT_CACHE_SIZE, ttl=TENANT_CACHE_SECONDS)
        self._create_tenants = settings.tenant_policy == "auto"
        self.waiting = 0  # callers waiting for a pooled connection

    async def open(self) -> None:
        s = self._settings
        self._pool = await asyncpg.create_pool(
            s.runtime_dsn(),
            init=init_connection,
            reset=_keep_session,
            min_size=s.pool_min_size,
            max_size=s.pool_max_size,
            server_settings={
                "search_path": _SEARCH_PATH,
                "statement_timeout": str(s.statement_timeout_ms),
                "idle_in_transaction_session_timeout": str(s.statement_timeout_ms * 2),
                "application_name": "engram",
                # Short OLTP queries: starting parallel workers costs more than they save (10-20 ms).
                "max_parallel_workers_per_gather": "0",
            },
        )

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError("the database pool is not open")
        return self._pool

    async def tenant(self, key: str) -> Tenant:
        """The tenant for `key`; under the `auto` policy it is created with its graph on first use."""
        if (cached := self._tenants.get(key)) is not None:
            return cached
        if not _TENANT_KEY.fullmatch(key):  # not match(): "$" would let a final newline through
            raise InvalidTenant("a tenant id is 1-200 letters, digits and . _ : @ | - (starting alphanumeric)")
        async with self.pool.acquire() as conn:
            row = await conn.fetchrow(
                "SELECT tenant_id::text, schema_name FROM engram.tenant_schema($1, $2)", key, self._create_tenants
            )
        if row is None or row[0] is None:
            raise InvalidTenant(f"tenant {key!r} does not exist here; an administrator must create it")
        tenant = Tenant(row[0], key, row[1])
        self._tenants[key] = tenant
        return tenant

    async def secret(self, name: str) -> bytes:
        """A server-wide secret kept in the database, so every replica shares it."""
        value = await self.pool.fetchval("SELECT value FROM engram.server_secrets WHERE name = $1", name)
        if value is None:
            raise RuntimeError(f"server secret {name!r} is missing: run `engram migrate`")
        return value

    async def cursor_keys(self) -> list[tuple[str, bytes, float]]:
        """The cursor signing keys, oldest first: (id, key, seconds since it was added). Shared by every replica."""
        rows = await self.pool.fetch(
            "SELECT name, value, extract(epoch FROM now() - created_at)::float8 FROM engram.server_secrets"
            f" WHERE name ~ '{CURSOR_KEY}' ORDER BY created_at, name"
        )
        return [(r[0], r[1], r[2]) for r in rows]

    @asynccontextmanager
    async def transaction(self, tenant: Tenant, *, readonly: bool = False) -> AsyncIterator[Tx]:
        """One transaction in the tenant's context; commits on success.

        The context is the tenant's own role (the only one with privileges on its schema) and the
        setting that row-level security on shared tables reads; both end with the transaction.
        """
        self.waiting += 1
        try:
            conn = await self.pool.acquire()
        finally:
            self.waiting -= 1
        try:
            async with conn.transaction(readonly=readonly):
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
        finally:
            await self.pool.release(conn)

    async def api_key(self, key_id: str) -> asyncpg.Record | None:
        """An API key's record by its public id, looked up before any tenant is known."""
        return await self.pool.fetchrow("SELECT * FROM engram.api_key($1)", key_id)
