"""query_graph: a tenant's reader asks its graph in read-only Cypher (docs/tools.md, "query_graph")."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from pydantic import BaseModel, Field, StringConstraints

from app.auth.principal import Principal
from app.errors import EngramError
from app.observability.context import DEADLINE
from app.services.base import Service
from app.services.fairness import refuse
from app.services.models import Clean
from app.store import cypher, graph_query

FUNCTION_NAMES = [spelled for spelled, _, _ in cypher.FUNCTIONS.values()]
MAX_QUERY_CHARS = 4000
QueryText = Annotated[str, StringConstraints(min_length=1, max_length=MAX_QUERY_CHARS), Clean]


class QueryResult(BaseModel):
    columns: list[str] = Field(description="Column names: each RETURN item's alias, or its text.")
    rows: list[list[Any]] = Field(description="One list per row, in column order; entities and relations as AGE maps.")
    truncated: bool = Field(description="More rows (or more bytes) than the bounds: narrow the query or add LIMIT.")


# Time the call keeps for itself after the statement's bound: to roll back and answer.
_MARGIN_SECONDS = 0.25
# The answer holds the rows' JSON as structured content and as text, and the transport serializes
# each once more: the rows read are a quarter of the bound, so that one call's memory in the server
# stays within about twice ENGRAM_QUERY_GRAPH_MAX_BYTES (measured: docs/benchmarks.md).
_COPIES = 4
# How long a call waits for one of the process's query slots.
_SLOT_WAIT_SECONDS = 2.0


class GraphQueries(Service):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A query's database backend may hold up to its stated memory bound (docs/security.md): at
        # most this many run at once in this process, and at most `query_tenant_running` per tenant.
        self._running = asyncio.Semaphore(self.limits.query_running)
        self._per_tenant: dict[str, int] = {}

    async def query(self, who: Principal, text: str, limit: int | None = None) -> QueryResult:
        """Rows of the query as JSON, at most `limit` (and the configured bounds), in a READ ONLY
        transaction as the tenant's role, the statement cut at its time bound (`limit` error)."""
        try:
            parsed = cypher.parse(text, rows_read=min(limit or self.limits.query_rows, self.limits.query_rows) + 1)
        except cypher.CypherLimit as e:
            raise refuse("query_size", f"query: {e.reason}", line=e.line, column=e.column) from None
        except cypher.CypherError as e:
            raise EngramError("invalid", f"query: {e.reason}", line=e.line, column=e.column) from None
        async with self._slot(who.tenant):
            return await self._run(who, parsed, limit)

    @asynccontextmanager
    async def _slot(self, tenant: str) -> AsyncIterator[None]:
        """One of the process's query slots and one of the tenant's, or `limit` (retry shortly)."""
        if self._per_tenant.get(tenant, 0) >= self.limits.query_tenant_running:
            raise refuse(
                "query_concurrency",
                f"this tenant already runs {self.limits.query_tenant_running} query_graph calls at once",
                retry_after=1.0,
            )
        self._per_tenant[tenant] = self._per_tenant.get(tenant, 0) + 1
        try:
            try:
                async with asyncio.timeout(_SLOT_WAIT_SECONDS):
                    await self._running.acquire()
            except TimeoutError:
                raise refuse(
                    "query_concurrency", "this server runs as many query_graph calls as it may", retry_after=1.0
                ) from None
            try:
                yield
            finally:
                self._running.release()
        finally:
            left = self._per_tenant[tenant] - 1
            if left:
                self._per_tenant[tenant] = left
            else:
                del self._per_tenant[tenant]

    async def _run(self, who: Principal, parsed: cypher.ReadQuery, limit: int | None) -> QueryResult:
        rows_bound = min(limit or self.limits.query_rows, self.limits.query_rows)
        timeout_ms = self._timeout_ms()
        async with self.tx(who, readonly=True) as tx:
            try:
                got = await graph_query.run(
                    tx,
                    parsed,
                    limit=rows_bound,
                    max_bytes=self.limits.query_bytes // _COPIES,
                    value_bytes=self.limits.query_value_bytes,
                    sort_rows=self.limits.query_sort_rows,
                    sort_key_bytes=self.limits.query_sort_key_bytes,
                    timeout_ms=timeout_ms,
                )
            except graph_query.TimeBound:
                raise refuse("query_time", f"the query ran past its time bound of {timeout_ms} ms") from None
            except graph_query.TooLarge as e:
                raise refuse("query_size", f"{e}: narrow the query (WHERE, LIMIT) or aggregate with count()") from None
            except graph_query.Refused as e:
                near = {"near": e.near} if e.near else {}
                raise EngramError("invalid", f"query: the graph database refused it ({e.message})", **near) from None
        return QueryResult(columns=parsed.columns, rows=got.rows, truncated=got.truncated)

    def _timeout_ms(self) -> int:
        """The configured bound, or less: what is left of the call's deadline."""
        bound = self.limits.query_ms
        at = DEADLINE.get()
        if at is not None:
            left = (at - asyncio.get_running_loop().time() - _MARGIN_SECONDS) * 1000
            bound = min(bound, max(int(left), 1))
        return bound
