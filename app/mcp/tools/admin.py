"""Tenant administration tools (memory:admin)."""

# No `from __future__ import annotations`: the schemas use bounds known only at registration.
from typing import Annotated

from pydantic import Field

from app.auth.principal import ADMIN, Principal
from app.mcp import answers
from app.mcp.answers import graph
from app.mcp.toolset import READ_ONLY, ToolSet
from app.services import Services, models


def register(tool: ToolSet, services: Services) -> None:
    @tool(ADMIN, READ_ONLY, title="Audit log", render=graph.audit)
    async def audit_log(
        who: Principal,
        tool_name: Annotated[models.TypeName | None, Field(description="Only calls of this tool.")] = None,
        limit: Annotated[int, Field(ge=1, le=services.limits.max_results)] = 50,
        cursor: models.Cursor | None = None,
        detail: answers.DetailArg = "concise",
    ) -> models.AuditPage:
        """Who changed this tenant's memory: each write call, newest first, with caller, tool, ids changed."""
        return await services.audit.page(who, tool_name, limit, cursor)
