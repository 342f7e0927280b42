"""Bounds on whole HTTP requests, before any of them reaches the MCP transport.

Only the MCP endpoints' paths (`paths`: /mcp, /mcp/memory, /mcp/neo4j, those served) are guarded.

- `GET` on an endpoint answers 405, except a session's notification stream (`Mcp-Session-Id`) on an
  endpoint that serves the graph resources (app/mcp/live.py, bounded and closed when quiet).
- Request headers over ENGRAM_HTTP_MAX_HEADER_BYTES in total answer 431.
- Each credential (the bearer token or API key presented, keyed by its hash) may send
  ENGRAM_TOKEN_RATE MCP requests per second, bursts of ENGRAM_TOKEN_BURST; more answer 429 with
  Retry-After. Counted per replica. Unauthenticated requests are left to the 401 of the SDK.
- Each client address may fail authentication ENGRAM_AUTH_FAILURE_BURST times, then once per
  1/ENGRAM_AUTH_FAILURE_RATE seconds; past that its MCP requests answer 429 before any credential
  is looked up, so guessing tokens or API keys costs the guesser, not the database.

`OutageAnswers` turns a database outage met outside a tool call (verifying an API key, a step of the
authorization server) into 503 with Retry-After, the HTTP form of the `unavailable` a tool answers.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import EngramError
from app.observability import metrics
from app.services.fairness import Buckets


class HttpGuard:
    def __init__(
        self,
        app: ASGIApp,
        *,
        paths: Collection[str] = ("/mcp",),
        stream_paths: Collection[str] = (),
        token_rate: float,
        token_burst: int,
        max_header_bytes: int,
        failure_rate: float = 1.0,
        failure_burst: int = 30,
    ) -> None:
        self.app = app
        self.paths = frozenset(paths)
        self.stream_paths = frozenset(stream_paths)
        self.token_rate = token_rate
        self.token_burst = token_burst
        self.max_header_bytes = max_header_bytes
        self.failure_rate = failure_rate
        self.failure_burst = failure_burst
        self._buckets = Buckets()
        self._failures = Buckets()  # by client address: refused credentials

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if sum(len(k) + len(v) for k, v in scope["headers"]) > self.max_header_bytes:
            metrics.LIMIT_REFUSALS.labels("header_size").inc()
            await _answer(send, 431, {"error": "request headers too large"})
            return
        if scope["path"] in self.paths:
            streaming = scope["path"] in self.stream_paths and any(k == b"mcp-session-id" for k, _ in scope["headers"])
            if scope["method"] == "GET" and not streaming:
                await _answer(send, 405, {"error": "this server sends no event stream; POST requests"}, allow="POST")
                return
            address = scope["client"][0] if scope.get("client") else "-"
            if wait := self._failures.waiting(address, self.failure_rate, self.failure_burst):
                metrics.LIMIT_REFUSALS.labels("auth_failures").inc()
                body = {"error": "too many refused credentials", "retry_after": round(wait, 3)}
                await _answer(send, 429, body, retry_after=str(max(1, math.ceil(wait))))
                return
            send = self._counting_refusals(send, address)
            credential = next((v for k, v in scope["headers"] if k == b"authorization"), None)
            if credential is not None:
                key = hashlib.sha256(credential).hexdigest()[:32]
                wait = self._buckets.take(key, self.token_rate, self.token_burst)
                if wait:
                    metrics.LIMIT_REFUSALS.labels("token_rate").inc()
                    body = {"error": "rate_limited", "retry_after": round(wait, 3)}
                    await _answer(send, 429, body, retry_after=str(max(1, math.ceil(wait))))
                    return
        await self.app(scope, receive, send)

    def _counting_refusals(self, send: Send, address: str) -> Send:
        async def counting(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 401:
                self._failures.take(address, self.failure_rate, self.failure_burst)
            await send(message)

        return counting


class OutageAnswers:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except EngramError as exc:
            if exc.code != "unavailable" or started or scope["type"] != "http":
                raise
            wait = float(exc.details.get("retry_after", 5))
            body = {"error": "temporarily_unavailable", "error_description": exc.message, "retry_after": wait}
            await _answer(send, 503, body, retry_after=str(max(1, math.ceil(wait))))


async def _answer(send: Send, status: int, body: dict[str, object], **headers: str) -> None:
    data = orjson.dumps(body)
    extra = [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()), *extra],
        }
    )
    await send({"type": "http.response.body", "body": data})
