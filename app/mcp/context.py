"""Tool registration: every tool checks its caller's scope, runs, and reports domain errors alike."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic.fields import FieldInfo

from app.auth.principal import Principal, principal_from_token
from app.errors import EngramError
from app.observability import metrics
from app.observability.context import CALL, Call
from app.services.fairness import Fairness
from app.store.database import InvalidTenant

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
ADDITIVE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)


def caller(tenant_claims: Sequence[str], scope: str) -> Principal:
    """The verified principal of this request, which must hold `scope`."""
    token = get_access_token()
    if token is None:
        raise EngramError("forbidden", "this call carries no verified token")
    principal = principal_from_token(token, tenant_claims)
    if scope not in principal.scopes:
        raise EngramError("forbidden", f"this tool needs the {scope!r} scope", required_scope=scope)
    return principal


@dataclass
class ToolSet:
    """Registers tools whose first parameter is the calling Principal (hidden from the schema)."""

    mcp: MCPServer
    tenant_claims: Sequence[str]
    prefix: str = ""
    scopes: dict[str, str] = field(default_factory=dict)  # tool name -> required scope
    fairness: Fairness | None = None  # each call within its tenant's rate and concurrent calls

    def __call__(
        self, scope: str, annotations: ToolAnnotations, *, name: str | None = None, title: str | None = None
    ) -> Callable[[Callable[..., Awaitable[Any]]], Callable[..., Awaitable[Any]]]:
        def register(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
            signature = inspect.signature(fn)
            renamed = _aliases(signature)

            @functools.wraps(fn)
            async def run(**kwargs: Any) -> Any:
                kwargs = {renamed.get(k, k): v for k, v in kwargs.items()}  # the SDK passes aliases ("from")
                call = CALL.get()
                try:
                    who = caller(self.tenant_claims, scope)
                    if call is not None:
                        call.subject, call.client_id, call.tenant = who.subject, who.client_id, who.tenant
                    async with self.fairness.admit(who) if self.fairness else contextlib.nullcontext():
                        result = await _with_retries(fn, who, kwargs)
                except EngramError as exc:
                    _ended(call, _OUTCOMES.get(exc.code, "tool_error"))
                    raise ToolError(str(exc)) from exc
                except InvalidTenant as exc:
                    _ended(call, "unauthorized")
                    raise ToolError(str(EngramError("forbidden", str(exc)))) from exc
                except Exception:
                    _ended(call, "internal")
                    raise
                _ended(call, "ok")
                return result

            run.__signature__ = signature.replace(parameters=list(signature.parameters.values())[1:])  # type: ignore[attr-defined]
            del run.__wrapped__  # the SDK must read the signature above, not fn's
            tool_name = self.prefix + (name or fn.__name__)
            self.mcp.add_tool(
                run,
                name=tool_name,
                description=inspect.getdoc(fn),
                title=title,
                annotations=annotations,
                meta={"engram/requiredScope": scope},  # tools/list shows every tool, marked with its scope
            )
            self.scopes[tool_name] = scope
            return fn

        return register


def _aliases(signature: inspect.Signature) -> dict[str, str]:
    """Parameter names by their schema alias, for parameters such as `from_` published as "from"."""
    out = {}
    for name, param in signature.parameters.items():
        for meta in getattr(param.annotation, "__metadata__", ()):
            if isinstance(meta, FieldInfo) and meta.alias:
                out[meta.alias] = name
    return out


_OUTCOMES = {"invalid": "invalid", "limit": "limited", "forbidden": "unauthorized"}
_RETRYABLE = (asyncpg.DeadlockDetectedError, asyncpg.SerializationError)
ATTEMPTS = 3


def _ended(call: Call | None, outcome: str) -> None:
    if call is not None:
        call.outcome = outcome


async def _with_retries(fn: Callable[..., Awaitable[Any]], who: Principal, kwargs: dict[str, Any]) -> Any:
    """Run a tool body; a call whose transaction lost a deadlock or serialization race runs again.

    Safe because each call is one transaction: the failed attempt left nothing behind.
    """
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return await fn(who, **kwargs)
        except _RETRYABLE:
            if attempt == ATTEMPTS:
                raise
            metrics.DB_RETRIES.inc()
            await asyncio.sleep(random.uniform(0.005, 0.05) * attempt)  # noqa: S311 - jitter, not security
    raise AssertionError("unreachable")
