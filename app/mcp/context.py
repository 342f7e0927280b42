"""The caller of a tool call, and how domain errors reach the model."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver.exceptions import ToolError

from app.auth.principal import Principal, principal_from_token
from app.errors import EngramError
from app.store.database import InvalidTenant

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


def caller(tenant_claim: str, scope: str) -> Principal:
    """The verified principal of this request, which must hold `scope`."""
    token = get_access_token()
    if token is None:
        raise EngramError("forbidden", "this call carries no verified token")
    principal = principal_from_token(token, tenant_claim)
    if scope not in principal.scopes:
        raise EngramError("forbidden", f"this tool needs the {scope!r} scope", required_scope=scope)
    return principal


def tool_errors(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Report domain errors to the model as `isError` results carrying a code and a message."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except EngramError as exc:
            raise ToolError(str(exc)) from exc
        except InvalidTenant as exc:
            raise ToolError(str(EngramError("forbidden", str(exc)))) from exc

    return wrapper
