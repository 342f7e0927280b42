"""The hook endpoints, one per client (`POST /hooks/claude-code`): a client's hooks post each event's
JSON input here, and read the answer as they read a command hook's output (docs/clients.md). What
is a client's own (its input, its events, its answer's JSON) is its adapter's (client.py); the rest,
the same for every client, is here.

Authenticated as the MCP endpoints are: a bearer token for any served endpoint, or an API key of
the tenant (`Authorization: Bearer egk_…`); the tenant is the credential's, never the input's.
Reading (context injected) needs `memory:read`, keeping turns `memory:write`; a credential with
neither is refused (403).

What it answers:
- a refused credential 401/403, a body over ENGRAM_HOOK_MAX_BYTES 413, a body that is no JSON
  object or whose fields break their bounds 400 (`invalid: field: rule`), over a rate 429: the
  client treats every non-2xx as a non-blocking error, and nothing is stored;
- anything else 200: the client's answer with the brief (app/answers/brief.py) when there is
  context to add, `{}` otherwise — also when the database is slow, down or failing in any way: past
  ENGRAM_HOOK_DEADLINE_SECONDS the answer is `{}`, so the assistant never waits on memory, while the
  turn it posted is still kept after the answer (services/hook_tasks.py).
Unknown events and fields are ignored; no field is ever a path the server opens.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.answers.brief import BRIEF
from app.auth.principal import READ, WRITE, Principal, principal_from_token
from app.auth.verifier import TokenVerifier
from app.config import Settings
from app.errors import EngramError, http_problem
from app.hooks.claude_code import CLAUDE_CODE
from app.hooks.client import Client, E
from app.observability.context import calling
from app.services import DATABASE_ERRORS
from app.services.calls import retrying, within
from app.services.fairness import Fairness
from app.services.hook_models import HookCall, HookOutcome
from app.services.hooks import Hooks
from app.web import invalid_token

logger = logging.getLogger(__name__)

CLIENTS: tuple[Client[Any], ...] = (CLAUDE_CODE,)  # a client's hooks: one adapter module, listed here
PATHS = frozenset(c.path for c in CLIENTS)
EMPTY = b"{}"


class HookRoutes:
    def __init__(
        self,
        settings: Settings,
        hooks: Hooks,
        verifier: TokenVerifier,
        metadata_url: str,
        fairness: Fairness | None = None,
        clients: Sequence[Client[Any]] = CLIENTS,
    ) -> None:
        self.hooks = hooks
        self.clients = clients
        self.verifier = verifier
        self.fairness = fairness
        self.claims: Sequence[str] = [settings.tenant_claim, *settings.tenant_fallback_claims]
        self.scopes = settings.scope_names
        self.metadata_url = metadata_url
        self.max_bytes = settings.hook_max_bytes
        self.seconds = settings.hook_deadline_seconds

    def routes(self) -> list[Route]:
        return [Route(c.path, self._endpoint(c), methods=["POST"]) for c in self.clients]

    def _endpoint(self, client: Client[E]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            return await self._serve(client, request)

        return endpoint

    async def _serve(self, client: Client[E], request: Request) -> Response:
        try:
            async with asyncio.timeout(self.seconds):
                return await self._answer(client, request)
        except TimeoutError:
            logger.warning("hook answered empty: no answer within %.2f s", self.seconds)
        except DATABASE_ERRORS as exc:
            logger.warning("hook answered empty: the database failed (%s)", type(exc).__name__)
        except Exception:  # a fault of this code: logged in full, and still nothing blocks the client
            logger.exception("hook answered empty: the event failed")
        return _json(EMPTY)

    async def _answer(self, client: Client[E], request: Request) -> Response:
        who = await self._caller(request)
        if isinstance(who, Response):
            return who
        body = await self._body(request)
        if isinstance(body, Response):
            return body
        event = _parse(client, body)
        if isinstance(event, Response):
            return event
        try:
            with calling("hooks:" + client.name(event), who.subject, who.client_id, who.tenant):
                outcome = await self._run(who, client.call(event))
        except EngramError as exc:
            if exc.code == "unavailable":
                return _json(EMPTY)
            status, message = http_problem(exc)
            headers = {"Retry-After": str(max(1, math.ceil(float(exc.details["retry_after"]))))} if (
                "retry_after" in exc.details
            ) else None  # fmt: skip
            return JSONResponse({"error": message}, status_code=status, headers=headers)
        if outcome.brief is None or outcome.brief.empty:
            return _json(EMPTY)
        return _json(client.answer(event, BRIEF(outcome.brief)))

    async def _run(self, who: Principal, call: HookCall) -> HookOutcome:
        # The turn's capture starts before anything else, so it is kept even when the answer cannot
        # wait for it (a new tenant is made by it too); a call refused over a rate keeps nothing.
        capture = self.hooks.capture(who, call)

        async def body() -> HookOutcome:
            # The brief's facts and its episodes are each measured as the brief prints them.
            return await retrying(self.hooks.handle, who, call, BRIEF.sizes, capture)

        if self.fairness is None:
            return await within(self.seconds, body, writes=True)
        try:
            async with self.fairness.admit(who):
                return await within(self.seconds, body, writes=True)
        except EngramError as exc:
            if exc.code == "limit" and capture.task is not None:
                capture.task.cancel()
            raise

    # --- who is asking, what they sent

    async def _caller(self, request: Request) -> Principal | Response:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return self._unauthorized("send an access token or API key as `Authorization: Bearer ...`")
        access = await self.verifier.verify_token(token.strip())
        if access is None:
            return self._unauthorized("the access token is not valid")
        try:
            who = principal_from_token(access, self.claims)
        except EngramError as exc:
            return JSONResponse({"error": exc.message}, status_code=403)
        if not who.scopes & {READ, WRITE}:
            wanted = f"{self.scopes[READ]} {self.scopes[WRITE]}"
            challenge = f'Bearer error="insufficient_scope", scope="{wanted}", resource_metadata="{self.metadata_url}"'
            refusal = {"error": "insufficient_scope", "scope": wanted}
            return JSONResponse(refusal, status_code=403, headers={"WWW-Authenticate": challenge})
        return who

    def _unauthorized(self, description: str) -> Response:
        return invalid_token(self.metadata_url, description)

    async def _body(self, request: Request) -> bytes | Response:
        length = request.headers.get("content-length")
        too_large = JSONResponse({"error": f"a hook input is at most {self.max_bytes} bytes"}, status_code=413)
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            return too_large
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > self.max_bytes:
                return too_large
        return bytes(body)


def _parse(client: Client[E], body: bytes) -> E | Response:
    """The client's input, or the refusal (a Response) of a body that is not one."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _invalid("the body is not JSON")
    if not isinstance(data, dict):
        return _invalid("the body is not a JSON object")
    try:
        return client.model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        return _invalid(f"{where}: {first['msg']}")


def _invalid(message: str) -> Response:
    return JSONResponse({"error": f"invalid: {message}"}, status_code=400)


def _json(body: bytes) -> Response:
    return Response(body, media_type="application/json", headers={"Cache-Control": "no-store"})
