"""The Engram console: a web page where people see and tend what their assistants remember.

A transport-level layer like app/mcp: it calls the services (never the store) as the signed-in
person, and signs people in through the built-in authorization server (docs/console.md).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from app.auth.principal import ADMIN, READ, WRITE
from app.auth.verifier import TokenVerifier
from app.authserver.server import AuthServer
from app.config import Settings
from app.console.calls import Runner
from app.console.console import PREFIX, Console
from app.console.web import secure
from app.services import Services

__all__ = ["Console", "console_routes"]

OFF_IN_OIDC_MODE = (
    "The Engram console signs people in through Engram's built-in authorization server, which does not "
    "run in the oidc auth mode (an external identity provider issues the tokens). Use the assistants, "
    "the CLI or /admin/export with a token from your identity provider instead."
)


def console_routes(
    settings: Settings, services: Services, auth: AuthServer | None, verifier: TokenVerifier
) -> list[BaseRoute]:
    """/console and below: the console (ENGRAM_CONSOLE=true, modes builtin and dev), a page saying
    why it is off (oidc mode), or nothing at all (ENGRAM_CONSOLE=false)."""
    if not settings.console:
        return []
    if auth is None:

        async def off(request: Request) -> Response:
            return secure(Response(OFF_IN_OIDC_MODE, status_code=404, media_type="text/plain; charset=utf-8"))

        return [Route(PREFIX, off, methods=["GET"]), Route(f"{PREFIX}/{{rest:path}}", off, methods=["GET", "POST"])]
    console = Console(
        auth,
        verifier,
        services,
        Runner(services.fairness, settings.call_deadline),
        transfer_max_bytes=settings.transfer_max_bytes,
        transfer_seconds=settings.transfer_deadline_seconds,
        issuer=settings.issuer,
        resource=settings.resource_url,
        scopes=[settings.scope_names[s] for s in (READ, WRITE, ADMIN)],
        tenant_claims=[settings.tenant_claim, *settings.tenant_fallback_claims],
        endpoints=settings.endpoint_urls,
    )
    return console.routes()
