"""Measures every MCP request: counts by method and outcome, and for tool calls the latency,
outcome, per-tenant usage and one log line. The tool wrapper (context.ToolSet) fills in who called
and how the call ended; a tools/call that never reached it failed validation."""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult

from app.observability import metrics
from app.observability.context import CALL, Call
from app.observability.usage import Usage

logger = logging.getLogger("engram.tools")

_METHODS = {
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "prompts/list",
    "prompts/get",
    "notifications/initialized",
    "notifications/cancelled",
    "subscriptions/listen",
    "completion/complete",
    "logging/setLevel",
}


class Observe:
    def __init__(self, tools: Mapping[str, str], usage: Usage, tenant_labels: Collection[str]) -> None:
        self.tools = tools  # tool name -> its `tool` label (bounded: only the endpoint's own tools)
        self.usage = usage
        self.tenant_labels = set(tenant_labels)

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        method = ctx.method if ctx.method in _METHODS else "other"
        if method != "tools/call":
            try:
                result = await call_next(ctx)
            except Exception:
                metrics.child(metrics.MCP_REQUESTS, method, "error").inc()
                raise
            metrics.child(metrics.MCP_REQUESTS, method, "ok").inc()
            return result
        name = ctx.params.get("name") if isinstance(ctx.params, dict) else None
        tool = self.tools.get(name, "unknown") if isinstance(name, str) else "unknown"
        call = Call(tool=tool, subject="", client_id="", started=time.perf_counter())
        token = CALL.set(call)
        try:
            result = await call_next(ctx)
            failed = _is_error(result)
            outcome = call.outcome or ("invalid" if failed else "ok")  # unset: refused before the tool ran
        except MCPError:
            outcome = "invalid"
            raise
        except Exception:
            outcome = "internal"
            raise
        finally:
            CALL.reset(token)
            self._record(call, outcome)
        metrics.child(metrics.MCP_REQUESTS, method, "ok").inc()
        return result

    def _record(self, call: Call, outcome: str) -> None:
        elapsed = time.perf_counter() - call.started
        metrics.child(metrics.TOOL_CALLS, call.tool, outcome).inc()
        metrics.child(metrics.TOOL_LATENCY, call.tool, outcome).observe(elapsed)
        if call.tenant:
            self.usage.count(call.tenant, call.tool, ok=outcome == "ok")
        if call.tenant in self.tenant_labels:
            metrics.TENANT_TOOL_CALLS.labels(call.tenant, call.tool, outcome).inc()
        if not logger.isEnabledFor(logging.INFO):
            return
        logger.info(
            "tool call %s %s",
            call.tool,
            outcome,
            extra={
                "tool": call.tool,
                "outcome": outcome,
                "duration_ms": round(elapsed * 1000, 2),
                "tenant": call.tenant or None,
                "subject": call.subject or None,
            },
        )


def _is_error(result: HandlerResult) -> bool:
    """Whether a tools/call result reports a failure (results arrive as models or as wire dicts)."""
    if isinstance(result, CallToolResult):
        return bool(result.is_error)
    if isinstance(result, dict):
        return bool(result.get("isError") or result.get("is_error"))
    return bool(getattr(result, "is_error", False))
