"""tools/list as its caller may use it: only the tools its token's scopes allow, each as the tool set
publishes it (ToolSet.listed). A read-only token is not shown tools it could never call, which
also keeps its list short; a call to a hidden tool still gets the step-up challenge
(app/mcp/scope_guard.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.types import ListToolsResult, Tool


class Listing:
    def __init__(self, tools: Sequence[Tool], scopes: Mapping[str, str]) -> None:
        self.tools = tuple(tools)
        self.scopes = scopes  # tool name -> the scope it needs

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method != "tools/list":
            return await call_next(ctx)
        token = get_access_token()
        if token is None:  # in-process use (no HTTP, no token): every tool
            return ListToolsResult(tools=list(self.tools))
        held = set(token.scopes)
        return ListToolsResult(tools=[t for t in self.tools if self.scopes[t.name] in held])
