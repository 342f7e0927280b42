"""Tenant administration tools (memory:admin)."""

# No `from __future__ import annotations`: the schemas use bounds known only at registration.
from typing import Annotated

from pydantic import Field

from app.answers import admin as shown
from app.answers.form import Detail
from app.auth.principal import ADMIN, Principal
from app.mcp.toolset import READ_ONLY, ToolSet
from app.services import Services, models
from app.services.audit import AuditPage


def register(tool: ToolSet, services: Services) -> None:
    @tool(ADMIN, READ_ONLY, title="Audit log", answer=shown.audit)
    async def audit_log(
        who: Principal,
        tool_name: Annotated[models.TypeName | None, Field(description="Only calls of this tool.")] = None,
        limit: Annotated[int, Field(ge=1, le=services.limits.max_results)] = 50,
        cursor: models.Cursor | None = None,
        detail: Detail = "concise",
    ) -> AuditPage:
        """Who changed this tenant's memory: each write call, newest first, with caller, tool, ids changed."""
        return await services.audit.page(who, tool_name, limit, cursor)
