"""query_graph: read-only Cypher on the caller's own graph (native endpoint)."""

# No `from __future__ import annotations`: the schemas use bounds known only at registration.
from typing import Annotated

from pydantic import Field

from app.answers import graph_query as shown
from app.answers.form import Detail
from app.auth.principal import READ, Principal
from app.mcp.toolset import READ_ONLY, ToolSet
from app.services import Services
from app.services.graph_query import FUNCTION_NAMES, QueryResult, QueryText

DESCRIPTION = """Read-only Cypher (MATCH, OPTIONAL MATCH, WHERE, WITH, UNWIND, ORDER BY, SKIP, LIMIT,
RETURN) for pattern questions. Entities `(n:Entity)` have id, name, type; relations `[r:REL]` have
type ("works at"), strength, notes: `WHERE r.type = 'advises'`, not `[:advises]`. One hop per
pattern step (no `*1..3`: use neighbors). Functions: {functions}.
"""


def register(tool: ToolSet, services: Services) -> None:
    cap = services.limits.query_rows

    async def query_graph(
        who: Principal,
        query: Annotated[
            QueryText,
            Field(description="Ends in RETURN.", examples=["MATCH (n:Entity) RETURN n.name LIMIT 5"]),
        ],
        limit: Annotated[int, Field(ge=1, le=cap)] = cap,
        detail: Detail = "concise",
    ) -> QueryResult:
        return await services.queries.query(who, query, limit)

    query_graph.__doc__ = DESCRIPTION.format(functions=", ".join(FUNCTION_NAMES))
    tool(READ, READ_ONLY, title="Cypher query", answer=shown.query_rows)(query_graph)
