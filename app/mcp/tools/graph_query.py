"""query_graph: read-only Cypher on the caller's own graph (native endpoint)."""

# No `from __future__ import annotations`: the schemas use bounds known only at registration.
from typing import Annotated

from pydantic import Field

from app.auth.principal import READ, Principal
from app.mcp.toolset import READ_ONLY, ToolSet
from app.services import Services
from app.services.graph_query import FUNCTION_NAMES, QueryResult, QueryText

DESCRIPTION = """Pattern questions in Cypher, on this tenant's graph only, read-only.

Accepted: MATCH, OPTIONAL MATCH, WHERE, WITH, UNWIND, RETURN (last), ORDER BY, SKIP, LIMIT.
Entities are `(n:Entity)` with n.id, n.name, n.type; relations are `[r:REL]` with r.type
("works at"), r.strength, r.notes: write `WHERE r.type = 'advises'`, not `[:advises]`. Write each
hop, e.g. `(a)-[:REL]->()-[:REL]->(b)`; variable-length patterns (`*1..3`) are refused (use
neighbors or shortest_path). Deleted entities are left out. Functions: {functions}.
Answers `columns`, `rows` and `truncated`; a refused query is `invalid` with line and column, one
running past its time bound is `limit`.
"""


def register(tool: ToolSet, services: Services) -> None:
    cap = services.limits.query_rows

    async def query_graph(
        who: Principal,
        query: Annotated[QueryText, Field(description="A read-only Cypher query ending in RETURN.")],
        limit: Annotated[int, Field(ge=1, le=cap, description="Rows at most.")] = cap,
    ) -> QueryResult:
        return await services.queries.query(who, query, limit)

    query_graph.__doc__ = DESCRIPTION.format(functions=", ".join(FUNCTION_NAMES))
    tool(READ, READ_ONLY)(query_graph)
