"""query_graph: a tenant's reader asks its graph in read-only Cypher (docs/tools.md, "query_graph")."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from pydantic import BaseModel, Field, StringConstraints

from app.auth.principal import Principal
from app.errors import EngramError
from app.observability.context import DEADLINE
from app.services.base import Service
from app.services.fairness import refuse
from app.services.models import Clean
from app.store import cypher_read, graph_query

FUNCTION_NAMES = [spelled for spelled, _, _ in cypher_read.FUNCTIONS.values()]
MAX_QUERY_CHARS = 4000
QueryText = Annotated[str, StringConstraints(min_length=1, max_length=MAX_QUERY_CHARS), Clean]


class QueryResult(BaseModel):
    columns: list[str] = Field(description="Column names: each RETURN item's alias, or its text.")
    rows: list[list[Any]] = Field(description="One list per row, in column order; entities and relations as AGE maps.")
    truncated: bool = Field(description="More rows (or more bytes) than the bounds: narrow the query or add LIMIT.")


# Time the call keeps for itself after the statement's bound: to roll back and answer.
_MARGIN_SECONDS = 0.25


class GraphQueries(Service):
    async def query(self, who: Principal, text: str, limit: int | None = None) -> QueryResult:
        """Rows of the query as JSON, at most `limit` (and the configured bounds), in a READ ONLY
        transaction as the tenant's role, the statement cut at its time bound (`limit` error)."""
        try:
            parsed = cypher_read.parse(text)
        except cypher_read.CypherError as e:
            raise EngramError("invalid", f"query: {e.reason}", line=e.line, column=e.column) from None
        rows_bound = min(limit or self.limits.query_rows, self.limits.query_rows)
        timeout_ms = self._timeout_ms()
        async with self.tx(who, readonly=True) as tx:
            try:
                got = await graph_query.run(
                    tx, parsed, limit=rows_bound, max_bytes=self.limits.query_bytes, timeout_ms=timeout_ms
                )
            except graph_query.TimeBound:
                raise refuse("query_time", f"the query ran past its time bound of {timeout_ms} ms") from None
            except graph_query.Refused as e:
                raise EngramError("invalid", f"query: the graph database refused it ({e})") from None
        return QueryResult(columns=parsed.columns, rows=got.rows, truncated=got.truncated)

    def _timeout_ms(self) -> int:
        """The configured bound, or less: what is left of the call's deadline."""
        bound = self.limits.query_ms
        at = DEADLINE.get()
        if at is not None:
            left = (at - asyncio.get_running_loop().time() - _MARGIN_SECONDS) * 1000
            bound = min(bound, max(int(left), 1))
        return bound
