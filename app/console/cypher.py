"""The query page: a tenant's reader asks its graph in read-only Cypher, as query_graph does.

The query is posted (with the session's CSRF token), not put in the URL, so that it stays out of
access logs and browser history; the answer is the page itself."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict
from starlette.requests import Request
from starlette.responses import Response

from app.auth.principal import READ
from app.console.calls import parse
from app.errors import EngramError, http_problem
from app.services.graph_query import FUNCTION_NAMES, QueryText

if TYPE_CHECKING:
    from app.console.kit import Kit, Visit
    from app.services.graph_query import GraphQueries

SHOWN_ROWS = 100
EXAMPLE = (
    "MATCH (a:Entity)-[r:REL]->(b:Entity)\nWHERE r.type = 'works at'\nRETURN a.name AS person, b.name AS place\n"
    "ORDER BY person LIMIT 20"
)


class QueryForm(BaseModel):
    model_config = ConfigDict(extra="ignore")

    query: QueryText


class QueryPage:
    def __init__(self, kit: Kit, queries: GraphQueries) -> None:
        self.c = kit
        self.queries = queries

    async def show(self, request: Request, visit: Visit) -> Response:
        visit.require(READ)
        return self._page(request, visit, EXAMPLE, None, None)

    async def run(self, request: Request, visit: Visit) -> Response:
        visit.require(READ)
        fields = await self.c.form(request, visit)
        text = fields.get("query", "")
        try:
            form = parse(QueryForm, {"query": text})
            queries = self.queries
            result = await self.c.run(visit.who, "query_graph", queries.query, form.query, SHOWN_ROWS, writes=False)
        except EngramError as exc:  # every refusal (a busy or unreachable database too) on this page
            return self._page(request, visit, text, None, exc, status=http_problem(exc)[0])
        return self._page(request, visit, text, result, None)

    def _page(
        self, request: Request, visit: Visit, text: str, result: Any, error: EngramError | None, status: int = 200
    ) -> Response:
        context = {
            "query": text,
            "result": result,
            "error": error,
            "where": error.details if error is not None else {},
            "functions": FUNCTION_NAMES,
            "shown": SHOWN_ROWS,
        }
        return self.c.page(request, "query.html", context, visit, status)
