"""The tenant administrators' HTTP routes: `GET /admin/export` and `POST /admin/import`.

They take a bearer token any served MCP endpoint takes (its `aud` may name any of them), checked
by the same verifier; the tenant is the
token's, and the token must carry `memory:admin`. Cookies never authorize them (a request with a
cookie and no bearer token is refused like any other without a token), so a page a signed-in
person visits cannot make their browser export or import. Both run through the same service as
`engram export` / `engram import`; an import's body is bounded by ENGRAM_TRANSFER_MAX_BYTES (larger
files: the CLI). docs/import-export.md.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import AsyncIterator, Sequence
from typing import TypeVar, get_args

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.auth.principal import ADMIN, Principal, principal_from_token
from app.auth.verifier import TokenVerifier
from app.config import Settings
from app.errors import EngramError, http_problem
from app.observability.context import deadline
from app.services.fairness import Buckets
from app.services.transfer import NAMES, Format, ImportSummary, Source, Transfer
from app.services.writer import OnExisting
from app.web import invalid_token

_MEDIA = {"engram": "application/x-ndjson", "memory": "application/x-ndjson", "neo4j": "application/json"}


class AdminRoutes:
    def __init__(self, settings: Settings, transfer: Transfer, verifier: TokenVerifier, metadata_url: str) -> None:
        self.transfer = transfer
        self.verifier = verifier
        self.claims: Sequence[str] = [settings.tenant_claim, *settings.tenant_fallback_claims]
        self.admin_scope = settings.scope_names[ADMIN]
        self.metadata_url = metadata_url
        self.max_bytes = settings.transfer_max_bytes
        self.seconds = settings.transfer_deadline_seconds
        self.failure_rate = settings.auth_failure_rate
        self.failure_burst = settings.auth_failure_burst
        self._failures = Buckets()  # refused credentials by client address, as on /mcp

    def routes(self) -> list[Route]:
        return [
            Route("/admin/export", self.export, methods=["GET"]),
            Route("/admin/import", self.import_, methods=["POST"]),
        ]

    # --- who is asking

    async def _caller(self, request: Request) -> Principal | Response:
        address = request.client.host if request.client else "-"
        if wait := self._failures.waiting(address, self.failure_rate, self.failure_burst):
            return _error(429, "too many refused credentials", {"Retry-After": str(max(1, math.ceil(wait)))})
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            why = "cookies do not authorize this endpoint; " if "cookie" in request.headers else ""
            return self._unauthorized(f"{why}send an access token as `Authorization: Bearer ...`")
        access = await self.verifier.verify_token(token.strip())
        if access is None:
            self._failures.take(address, self.failure_rate, self.failure_burst)
            return self._unauthorized("the access token is not valid")
        try:
            who = principal_from_token(access, self.claims)
        except EngramError as exc:
            return _error(403, exc.message)
        if ADMIN not in who.scopes:
            challenge = (
                f'Bearer error="insufficient_scope", scope="{self.admin_scope}", '
                f'resource_metadata="{self.metadata_url}"'
            )
            return JSONResponse(
                {"error": "insufficient_scope", "scope": self.admin_scope},
                status_code=403,
                headers={"WWW-Authenticate": challenge},
            )
        return who

    def _unauthorized(self, description: str) -> Response:
        return invalid_token(self.metadata_url, description)

    # --- the routes

    async def export(self, request: Request) -> Response:
        who = await self._caller(request)
        if isinstance(who, Response):
            return who
        q = request.query_params
        fmt = _one_of(q.get("format", "engram"), NAMES)
        if fmt is None:
            return _error(400, f"format: one of {', '.join(NAMES)}")
        try:
            deleted, history = _flag(q.get("include_deleted")), _flag(q.get("history"))
        except ValueError as exc:
            return _error(400, str(exc))
        try:
            return await export_response(
                self.transfer, who, fmt, deleted=deleted, history=history, seconds=self.seconds
            )
        except EngramError as exc:
            return _error(*http_problem(exc))

    async def import_(self, request: Request) -> Response:
        who = await self._caller(request)
        if isinstance(who, Response):
            return who
        q = request.query_params
        given = q.get("format")
        fmt = _one_of(given, NAMES)
        on_existing = _one_of(q.get("on_existing", "merge"), get_args(OnExisting))
        if given is not None and fmt is None:
            return _error(400, f"format: one of {', '.join(NAMES)}")
        if on_existing is None:
            return _error(400, "on_existing: one of merge, skip, error")
        try:
            dry_run = _flag(q.get("dry_run"))
        except ValueError as exc:
            return _error(400, str(exc))
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            return self._too_large()
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > self.max_bytes:
                return self._too_large()
        try:
            summary = await run_import(
                self.transfer,
                who,
                bytes(body),
                fmt,
                on_existing=on_existing,
                dry_run=dry_run,
                seconds=self.seconds,
            )
        except EngramError as exc:
            return _error(*http_problem(exc))
        return Response(
            orjson.dumps(summary.model_dump(mode="json")),
            media_type="application/json",
            headers={"X-Content-SHA256": hashlib.sha256(body).hexdigest()},
        )

    def _too_large(self) -> Response:
        return _error(413, f"at most {self.max_bytes} bytes over HTTP; import larger files with `engram import`")


C = TypeVar("C", bound=str)


def _one_of(value: str | None, choices: Sequence[C]) -> C | None:
    """`value` as the one of `choices` it equals (typed as they are), or None."""
    return next((choice for choice in choices if choice == value), None)


async def export_response(
    transfer: Transfer, who: Principal, fmt: Format, *, deleted: bool, history: bool, seconds: float
) -> StreamingResponse:
    """The tenant's export as a streamed download (here and in the console). Refusals (format,
    tenant, database) raise before any byte is sent; the rest streams within `seconds`."""
    lines = transfer.export(who, fmt, deleted=deleted, history=history)
    with deadline(seconds):
        first = await anext(lines)

    async def rest() -> AsyncIterator[bytes]:
        yield first
        with deadline(seconds):
            async for chunk in lines:
                yield chunk

    name = f"engram-export.{'json' if fmt == 'neo4j' else 'jsonl'}"
    return StreamingResponse(
        rest(),
        media_type=_MEDIA[fmt],
        headers={"Content-Disposition": f'attachment; filename="{name}"', "Cache-Control": "no-store"},
    )


async def run_import(
    transfer: Transfer,
    who: Principal,
    data: bytes,
    fmt: Format | None,
    *,
    on_existing: OnExisting,
    dry_run: bool,
    seconds: float,
) -> ImportSummary:
    """An uploaded file imported into the caller's tenant (here and in the console), within `seconds`."""
    with deadline(seconds):
        return await transfer.import_(who, Source(data=data), fmt, on_existing=on_existing, dry_run=dry_run)


def _flag(value: str | None) -> bool:
    if value is None or value in ("", "0", "false"):
        return False
    if value in ("1", "true"):
        return True
    raise ValueError("flags are true or false")


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse({"error": message}, status_code=status, headers=headers)
