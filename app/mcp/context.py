"""Tool registration: every tool checks its caller's scope, runs, and reports domain errors alike."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from app.auth.principal import Principal, principal_from_token
from app.errors import EngramError
from app.store.database import InvalidTenant

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
ADDITIVE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)


def caller(tenant_claim: str, scope: str) -> Principal:
    """The verified principal of this request, which must hold `scope`."""
    token = get_access_token()
    if token is None:
        raise EngramError("forbidden", "this call carries no verified token")
    principal = principal_from_token(token, tenant_claim)
    if scope not in principal.scopes:
        raise EngramError("forbidden", f"this tool needs the {scope!r} scope", required_scope=scope)
    return principal


@dataclass
class ToolSet:
    """Registers tools whose first parameter is the calling Principal (hidden from the schema)."""

    mcp: MCPServer
    tenant_claim: str
    prefix: str = ""
    scopes: dict[str, str] = field(default_factory=dict)  # tool name -> required scope

    def __call__(
        self, scope: str, annotations: ToolAnnotations, *, name: str | None = None, title: str | None = None
    ) -> Callable[[Callable[..., Awaitable[Any]]], Callable[..., Awaitable[Any]]]:
        def register(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
            @functools.wraps(fn)
            async def run(*args: Any, **kwargs: Any) -> Any:
                try:
                    return await fn(caller(self.tenant_claim, scope), *args, **kwargs)
                except EngramError as exc:
                    raise ToolError(str(exc)) from exc
                except InvalidTenant as exc:
                    raise ToolError(str(EngramError("forbidden", str(exc)))) from exc

            signature = inspect.signature(fn)
            run.__signature__ = signature.replace(parameters=list(signature.parameters.values())[1:])  # type: ignore[attr-defined]
            del run.__wrapped__  # the SDK must read the signature above, not fn's
            tool_name = self.prefix + (name or fn.__name__)
            self.mcp.add_tool(run, name=tool_name, title=title, description=inspect.getdoc(fn), annotations=annotations)
            self.scopes[tool_name] = scope
            return fn

        return register
