"""Following the graph resources, per tenant: subscriptions/listen (2026-07-28) and
resources/subscribe with its notification stream (2025-11-25).

The SDK serves the stream (`ListenHandler`: the acknowledgement first, every frame stamped with
the subscription id, a bounded backlog) over a bus it is given. Its bus knows URIs only, and every
tenant has a `memory://knowledge-graph`; so the bus here is `TenantBus`, which registers each
stream for its caller's tenant, and the middleware `ListenGuard` opens the stream's subscription
(the caller's scope and tenant, the bounds per principal and per process) before the SDK's
handler runs, and closes it after a quiet spell (the client listens again and rereads).

2025-11-25 clients are served without server-held sessions (any replica answers any request), so
the SDK has no stream to push on. Here each handshake gets a session id of its own
(`Mcp-Session-Id` on the initialize answer; nothing about it is kept in a process), the client's
resources/subscribe is kept in the database under it (any replica may take it), and the client's GET
with that id is answered by `SessionStreams` with an SSE stream of `notifications/resources/updated`
for what the session follows. A quiet stream ends; the client's transport reconnects it."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import re
import secrets
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import orjson
from mcp.server.auth.provider import TokenVerifier
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.subscriptions import SUBSCRIPTION_ID_META_KEY, ResourceUpdated, ServerEvent
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    EmptyResult,
    SubscribeRequestParams,
    SubscriptionsListenResult,
    UnsubscribeRequestParams,
)
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from app.auth.principal import READ, principal_from_token
from app.errors import EngramError
from app.mcp.toolset import caller
from app.observability import metrics
from app.services.live import Live, Subscription

MAX_URIS = 100
MAX_URI_CHARS = 1000
_OPENING: contextvars.ContextVar[Subscription | None] = contextvars.ContextVar("engram_listen", default=None)


class TenantBus:
    """The SDK's `SubscriptionBus`, fed by the database (app/services/live.py), never by `publish`."""

    async def publish(self, event: ServerEvent) -> None:
        """Nothing in this server publishes through the SDK: changes come from the database feed."""

    def subscribe(self, listener: Callable[[ServerEvent], None]) -> Callable[[], None]:
        sub = _OPENING.get()
        if sub is None:  # a listen request that ListenGuard did not open: it hears nothing
            return lambda: None
        sub.deliver = lambda uri: listener(ResourceUpdated(uri=uri))
        return lambda: None  # the subscription is closed by ListenGuard, which opened it


class ListenGuard:
    """Middleware around subscriptions/listen: who may listen, to what, for how long."""

    def __init__(self, live: Live, claims: Sequence[str]) -> None:
        self.live = live
        self.claims = list(claims)

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method != "subscriptions/listen":
            return await call_next(ctx)
        uris = _requested_uris(ctx.params)
        try:
            sub = self.live.open(caller(self.claims, READ), uris)
        except EngramError as exc:
            raise MCPError(INVALID_REQUEST, str(exc)) from None
        token = _OPENING.set(sub)
        idle = self.live.idle_seconds
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + idle) as quiet:

                def touched() -> None:
                    quiet.deadline = anyio.current_time() + idle

                sub.touched = touched
                result = await call_next(ctx)
            if quiet.cancelled_caught:
                metrics.SUBSCRIPTIONS_IDLE_CLOSED.inc()
                return SubscriptionsListenResult(_meta={SUBSCRIPTION_ID_META_KEY: ctx.request_id})
            return result
        finally:
            _OPENING.reset(token)
            self.live.close(sub)

    def serve_subscribe(self, mcp: MCPServer) -> None:
        """resources/subscribe and unsubscribe (2025-11-25) on `mcp`. MCPServer has no public way to
        add a request handler; its low-level server does (and then advertises `subscribe`)."""
        low = mcp._lowlevel_server
        low.add_request_handler("resources/subscribe", SubscribeRequestParams, self._follow)
        low.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, self._follow)

    async def _follow(self, ctx: ServerRequestContext[Any, Any], params: Any) -> EmptyResult:
        """resources/subscribe and unsubscribe: kept under the session id this server gave at
        initialize (a request without one, or with a malformed one, follows nothing)."""
        session = ctx.request.headers.get("mcp-session-id") if isinstance(ctx.request, Request) else None
        if session is None or not SESSION.fullmatch(session):
            raise MCPError(INVALID_REQUEST, "resources/subscribe needs the Mcp-Session-Id given at initialize")
        uri = str(params.uri)
        if not isinstance(uri, str) or not 0 < len(uri) <= MAX_URI_CHARS or "\x00" in uri:
            raise MCPError(INVALID_PARAMS, f"invalid: uri: 1-{MAX_URI_CHARS} characters")
        try:
            who = caller(self.claims, READ)
            await self.live.follow(who, session, [uri], on=ctx.method == "resources/subscribe")
        except EngramError as exc:
            raise MCPError(INVALID_REQUEST, str(exc)) from None
        return EmptyResult()


SESSION = re.compile(r"^[A-Za-z0-9_-]{32,64}$")


class SessionStreams:
    """ASGI, around one endpoint: a session id on each 2025-11-25 initialize answer, and the GET
    stream of a session's notifications. Everything else passes to `app`."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        path: str,
        live: Live,
        verifier: TokenVerifier,
        claims: Sequence[str],
        security: TransportSecuritySettings,
        metadata_url: str,
    ) -> None:
        self.app = app
        self.path = path
        self.live = live
        self.verifier = verifier
        self.claims = list(claims)
        self.security = TransportSecurityMiddleware(security)
        self.metadata_url = metadata_url

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != self.path:
            await self.app(scope, receive, send)
        elif scope["method"] == "GET":
            await self._stream(Request(scope, receive), send)
        else:
            await self.app(scope, receive, self._with_session(scope, send))

    def _with_session(self, scope: Scope, send: Send) -> Send:
        """A fresh session id on a handshake-era answer to a request that carried none: the first
        request of a session is its initialize, and the client sends the id on every one after."""
        headers = dict(scope["headers"])
        if b"mcp-session-id" in headers or headers.get(b"mcp-protocol-version", b"").startswith(b"2026"):
            return send
        session = secrets.token_urlsafe(32).encode()

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start" and message.get("status") == 200:
                ctype = dict(message.get("headers", [])).get(b"content-type", b"")
                if ctype.startswith(b"application/json"):  # the first answer: to initialize
                    message = {**message, "headers": [*message.get("headers", []), (b"mcp-session-id", session)]}
            await send(message)

        return sending

    async def _stream(self, request: Request, send: Send) -> None:
        refused = await self.security.validate_request(request, is_post=False)
        if refused is not None:
            await refused(request.scope, request.receive, send)
            return
        session = request.headers.get("mcp-session-id", "")
        bearer = request.headers.get("authorization", "")
        access = await self.verifier.verify_token(bearer[7:].strip()) if bearer[:7].lower() == "bearer " else None
        if access is None:
            challenge = f'Bearer error="invalid_token", resource_metadata="{self.metadata_url}"'
            await _answer(send, 401, {"error": "invalid_token"}, (b"www-authenticate", challenge.encode()))
            return
        if not SESSION.fullmatch(session):
            await _answer(send, 405, {"error": "this server streams only to sessions it began; POST requests"})
            return
        try:
            who = principal_from_token(access, self.claims)
            if READ not in who.scopes:
                raise EngramError("forbidden", "following resources needs the memory:read scope")
            sub = await self.live.open_session(who, session)
        except EngramError as exc:
            status = {"forbidden": 403, "limit": 429}.get(exc.code, 503)
            await _answer(send, status, {"error": exc.code, "error_description": exc.message})
            return
        try:
            await self._serve(request, send, sub)
        finally:
            self.live.close(sub)

    async def _serve(self, request: Request, send: Send, sub: Subscription) -> None:
        pending: asyncio.Queue[str] = asyncio.Queue(maxsize=1024)
        overflow = asyncio.Event()

        def deliver(uri: str) -> None:
            try:
                pending.put_nowait(uri)
            except asyncio.QueueFull:  # a client that stopped reading: end its stream
                overflow.set()

        sub.deliver = deliver
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-store")],
            }
        )
        gone = asyncio.ensure_future(_disconnected(request.receive))
        try:
            while not gone.done() and not overflow.is_set():
                getting = asyncio.ensure_future(pending.get())
                done, _ = await asyncio.wait(
                    {getting, gone}, timeout=self.live.idle_seconds, return_when=asyncio.FIRST_COMPLETED
                )
                if getting not in done:
                    getting.cancel()
                    if not done:
                        metrics.SUBSCRIPTIONS_IDLE_CLOSED.inc()
                    break
                note = {
                    "jsonrpc": "2.0",
                    "method": "notifications/resources/updated",
                    "params": {"uri": getting.result()},
                }
                await send(
                    {
                        "type": "http.response.body",
                        "body": b"event: message\ndata: " + orjson.dumps(note) + b"\n\n",
                        "more_body": True,
                    }
                )
        finally:
            gone.cancel()
            with contextlib.suppress(Exception):
                await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _answer(send: Send, status: int, body: dict[str, Any], *extra: tuple[bytes, bytes]) -> None:
    content = orjson.dumps(body)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(content)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": content})


def _requested_uris(params: Any) -> frozenset[str]:
    """The resource URIs a listen request names, bounded; anything else about it is the SDK's to check."""
    notifications = params.get("notifications") if isinstance(params, dict) else None
    uris = notifications.get("resourceSubscriptions") if isinstance(notifications, dict) else None
    if uris is None:
        return frozenset()
    if not isinstance(uris, list) or len(uris) > MAX_URIS:
        raise MCPError(INVALID_PARAMS, f"invalid: resourceSubscriptions: at most {MAX_URIS} URIs")
    if not all(isinstance(u, str) and 0 < len(u) <= MAX_URI_CHARS and "\x00" not in u for u in uris):
        raise MCPError(INVALID_PARAMS, f"invalid: resourceSubscriptions: URIs of 1-{MAX_URI_CHARS} characters")
    return frozenset(uris)
