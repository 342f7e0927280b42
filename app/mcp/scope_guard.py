"""HTTP-level step-up: a tools/call whose tool needs a scope the token lacks gets 403 insufficient_scope.

Clients that support step-up authorization read the `scope` parameter of the challenge and ask the
user for a token with it. The tool's own check stays in place behind this (defence in depth).
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from mcp.server.auth.provider import TokenVerifier
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class ScopeGuard:
    def __init__(
        self,
        app: ASGIApp,
        verifier: TokenVerifier,
        tool_scopes: Mapping[str, str],
        scope_names: Mapping[str, str],
        resource_metadata_url: str,
        max_body: int,
    ) -> None:
        self.app = app
        self.verifier = verifier
        self.tool_scopes = tool_scopes
        self.scope_names = scope_names
        self.metadata_url = resource_metadata_url
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body, more = b"", True
        while more and len(body) <= self.max_body:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        needed = await self._missing_scopes(scope, body) if not more else None
        if needed is not None:
            await self._refuse(send, needed)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": more}
            return await receive()

        await self.app(scope, replay, send)

    async def _missing_scopes(self, scope: Scope, body: bytes) -> list[str] | None:
        """Every scope the call needs the token to carry, when it lacks one: the tool's, and those
        the token already holds (a client that asks for just the missing one would lose the others)."""
        try:
            request = orjson.loads(body)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(request, dict) or request.get("method") != "tools/call":
            return None
        params = request.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        needed = self.tool_scopes.get(name) if isinstance(name, str) else None
        if needed is None:
            return None
        token = _bearer(scope)
        access = await self.verifier.verify_token(token) if token else None
        if access is None or needed in access.scopes:
            return None  # unauthenticated requests get the SDK's 401
        held = [s for s in self.scope_names if s in access.scopes]
        return [s for s in self.scope_names if s in held or s == needed] or [needed]

    async def _refuse(self, send: Send, needed: list[str]) -> None:
        external = " ".join(self.scope_names.get(s, s) for s in needed)
        challenge = (
            f'Bearer error="insufficient_scope", scope="{external}", '
            f'error_description="this call needs the scopes {external}", resource_metadata="{self.metadata_url}"'
        )
        body = orjson.dumps({"error": "insufficient_scope", "scope": external})
        await send(
            {
                "type": "http.response.start",
                "status": 403,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"www-authenticate", challenge.encode()),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _bearer(scope: Scope) -> str | None:
    for key, value in scope["headers"]:
        if key == b"authorization":
            text = value.decode("latin-1")
            return text[7:] if text[:7].lower() == "bearer " else None
    return None
