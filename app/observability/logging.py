"""JSON-lines logs on stdout, an access log in the same format, and request ids.

What is logged: time, level, logger, message, request id, the trace id inside a trace, and per
line the fields a caller adds (tenant, tool, duration_ms, outcome, ...). Never tokens, keys,
passwords or observation text.
"""

from __future__ import annotations

import logging
import sys
import time
from datetime import UTC, datetime
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.observability import metrics, tracing
from app.observability.context import REQUEST_ID, accept_request_id

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "color_message"}
access_log = logging.getLogger("engram.access")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": REQUEST_ID.get(),
        }
        if (trace_id := tracing.current_trace_id()) is not None:
            line["trace_id"] = trace_id
        line.update({k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


def configure(level: str) -> None:
    """Every logger, ours and the libraries', writes JSON lines to stdout."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True
    logging.getLogger("uvicorn.access").disabled = True  # replaced by engram.access below
    logging.getLogger("httpx2").setLevel(logging.WARNING)


FIXED_ROUTES = frozenset({"/mcp", "/healthz", "/readyz", "/metrics"})


def route_of(scope: Scope, fixed: frozenset[str] = FIXED_ROUTES) -> str:
    """The route label: the path template of the route that answered (`/console/entity/{id}`,
    `/token`), so its values are the app's own routes, a bounded set, never a raw path. A request
    answered before routing (a refused header, a wrong host, a rate limit) is labelled by its path
    if that is one of the `fixed` routes (the MCP endpoints, the probes), and any other is `other`."""
    template = getattr(scope.get("route"), "path", None)
    if isinstance(template, str) and template.startswith("/"):
        return template
    path = scope["path"]
    return path if path in fixed else "other"


class RequestLog:
    """ASGI middleware: request id (from X-Request-ID or new, echoed back), access log, HTTP metrics."""

    def __init__(self, app: ASGIApp, fixed: frozenset[str] = FIXED_ROUTES) -> None:
        self.app = app
        self.fixed = fixed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"x-request-id"), None)
        request_id = accept_request_id(incoming)
        token = REQUEST_ID.set(request_id)
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", request_id.encode())]
            await send(message)

        metrics.HTTP_IN_FLIGHT.inc()
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            metrics.HTTP_IN_FLIGHT.dec()
            elapsed = time.perf_counter() - started
            route = route_of(scope, self.fixed)
            metrics.child(metrics.HTTP_REQUESTS, route, scope["method"], f"{status // 100}xx").inc()
            if status == 401 and not any(k == b"authorization" for k, _ in scope["headers"]):
                metrics.AUTH_FAILURES.labels("missing").inc()
            metrics.child(metrics.HTTP_LATENCY, route).observe(elapsed)
            if access_log.isEnabledFor(logging.INFO):
                access_log.info(
                    "%s %s %s",
                    scope["method"],
                    scope["path"],
                    status,
                    extra={"status": status, "duration_ms": round(elapsed * 1000, 2), "route": route},
                )
            REQUEST_ID.reset(token)
