"""The built-in authorization server assembled: its parts, their start and stop, and its routes.

The SDK's handlers answer /authorize, /token and /register; Engram supplies the provider behind
them, client authentication against hashed secrets, metadata that advertises what this server
really accepts (public clients, metadata documents, `iss` in responses), /revoke for public
clients, the JWKS, rate limits, and the sign-in and consent pages.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
from joserfc.jwk import ECKey
from mcp.server.auth.handlers.authorize import AuthorizationHandler
from mcp.server.auth.handlers.register import RegistrationHandler
from mcp.server.auth.handlers.token import TokenHandler
from mcp.server.auth.middleware.client_auth import AuthenticationError
from mcp.server.auth.settings import ClientRegistrationOptions
from mcp.server.transport_security import RequestBodyLimitMiddleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route, request_response
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from app.auth.cimd import ClientDocuments
from app.authserver.accounts import Accounts, Throttle
from app.authserver.client_sessions import ClientSessions
from app.authserver.clients import Clients
from app.authserver.connections import Connections
from app.authserver.events import Events
from app.authserver.limits import RateLimiter
from app.authserver.pages import Cookies, Pages
from app.authserver.provider import Lifetimes, Provider
from app.authserver.revocations import Revocations
from app.authserver.signing import SigningKeys
from app.authserver.upstream import Sessions, Upstream
from app.config import UpstreamProvider
from app.store.database import Database

logger = logging.getLogger(__name__)

PAGES = "/oauth"
STATIC = Path(__file__).parent / "static"
JWKS_PATH = "/.well-known/jwks.json"
FORM_BYTES = 16 * 1024  # every request to these endpoints is a small form or JSON document
Endpoint = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class RateLimits:
    """Requests per client address per minute, on each endpoint anyone may call."""

    token: int = 60
    register: int = 10
    authorize: int = 60


class AuthServer:
    def __init__(
        self,
        db: Database,
        *,
        issuer: str,
        resources: Sequence[str],
        scope_names: Mapping[str, str],
        tenant_claim: str,
        lifetimes: Lifetimes,
        local_accounts: bool,
        auto_sign_in: bool,
        personal_tenants: bool,
        registration: bool,
        documents: ClientDocuments | None,
        throttle: Throttle,
        rate_limits: RateLimits,
        unused_client_days: int,
        upstream: Sequence[UpstreamProvider] = (),
        key_reload_seconds: float = 60,
        extra_keys: Sequence[ECKey] = (),
    ) -> None:
        self._db = db
        self.issuer = issuer
        self._scopes = list(scope_names.values())
        self._registration = registration
        self._documents = documents
        self._limits = rate_limits
        self._unused_clients = timedelta(days=unused_client_days)
        self.keys = SigningKeys(db, reload_seconds=key_reload_seconds, min_refresh=1, extra=extra_keys)
        self.revocations = Revocations(db, lifetime=timedelta(seconds=lifetimes.access))
        self._limiter = RateLimiter(db)
        self._events = Events(db)
        self.clients = Clients(db, self._scopes, documents)
        self.provider = Provider(
            db,
            self.clients,
            self.keys,
            self._events,
            issuer=issuer,
            resources=resources,
            consent_url=f"{issuer}{PAGES}/consent",
            scope_names=scope_names,
            tenant_claim=tenant_claim,
            lifetimes=lifetimes,
        )
        self.connections = Connections(
            db, self.clients, self._events, access_lifetime=timedelta(seconds=lifetimes.access)
        )
        self._sign_in(
            throttle=throttle,
            personal_tenants=personal_tenants,
            local_accounts=local_accounts,
            auto_sign_in=auto_sign_in,
            upstream=upstream,
        )
        self._sessions: list[Sessions] = []
        self._tasks: list[asyncio.Task[None]] = []

    def _sign_in(
        self,
        *,
        throttle: Throttle,
        personal_tenants: bool,
        local_accounts: bool,
        auto_sign_in: bool,
        upstream: Sequence[UpstreamProvider],
    ) -> None:
        """The person's side: accounts, the sign-in and consent pages, their cookies and sessions,
        and the upstream identity providers they may sign in with."""
        db, issuer = self._db, self.issuer
        accounts = Accounts(
            db,
            self._limiter,
            self._events,
            issuer=issuer,
            session_ttl=timedelta(hours=12),
            throttle=throttle,
            personal_tenants=personal_tenants,
        )
        self.accounts = accounts
        self.client_sessions = ClientSessions(db, ttl=timedelta(hours=12))
        cookies = Cookies(secure=issuer.startswith("https://"))
        self.cookies = cookies  # the sign-in session's: the console ends it too at sign-out
        self.pages = Pages(
            self.provider,
            accounts,
            prefix=PAGES,
            cookies=cookies,
            local_accounts=local_accounts,
            auto_sign_in=auto_sign_in,
            providers=[(p.name, p.label) for p in upstream],
        )
        self.upstream = (
            Upstream(upstream, self.provider, accounts, self.pages, self._events, issuer=issuer, prefix=PAGES)
            if upstream
            else None
        )

    def add_first_party(self, client_id: str, name: str, redirect_uri: str) -> None:
        """A client that is part of this server (the console): known without registration, and its
        consent page is a choice of tenant (nothing is remembered, so every sign-in may choose)."""
        self.clients.add_first_party(client_id, name, redirect_uri)

    async def start(self) -> None:
        await self.keys.load()
        await self.revocations.refresh()
        secret = await self._db.secret("csrf")
        self.pages.start(secret)
        for sessions in self._sessions:
            sessions.start(secret)
        self._tasks = [asyncio.create_task(self.revocations.run()), asyncio.create_task(self._sweep())]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._documents is not None:
            await self._documents.aclose()

    async def _sweep(self, every: float = 600) -> None:
        while True:
            await asyncio.sleep(every)
            try:
                await self.provider.sweep(self._unused_clients)
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                logger.warning("could not sweep expired authorization state: %s", type(exc).__name__)

    # --- HTTP ---------------------------------------------------------------------------------------

    def metadata(self) -> dict[str, Any]:
        """RFC 8414 metadata. The issuer is exactly the public URL: clients compare it byte for byte."""
        methods = ["none", "client_secret_post", "client_secret_basic"]
        data: dict[str, Any] = {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "revocation_endpoint": f"{self.issuer}/revoke",
            "jwks_uri": f"{self.issuer}{JWKS_PATH}",
            "scopes_supported": self._scopes,
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": methods,
            "revocation_endpoint_auth_methods_supported": methods,
            "authorization_response_iss_parameter_supported": True,
            "client_id_metadata_document_supported": self._documents is not None,
        }
        if self._registration:
            data["registration_endpoint"] = f"{self.issuer}/register"
        return data

    def _limited(self, flow: str, per_minute: int, endpoint: Endpoint) -> Endpoint:
        """Refuses a client address over `per_minute` requests with 429 and Retry-After."""

        async def limited(request: Request) -> Response:
            address = request.client.host if request.client else "unknown"
            wait = await self._limiter.hit(f"{flow}:{address}", per_minute, 60)
            if wait is None:
                return await endpoint(request)
            await self._events(flow, "rate_limited")
            return JSONResponse(
                {"error": "temporarily_unavailable", "error_description": "too many requests; retry later"},
                status_code=429,
                headers={"Retry-After": str(wait), "Cache-Control": "no-store"},
            )

        return limited

    async def _revoke(self, request: Request) -> Response:
        """RFC 7009 for public and confidential clients alike; unknown tokens are not an error."""
        headers = {"Cache-Control": "no-store"}
        try:
            client = await self.clients.authenticate_request(request)
        except AuthenticationError as exc:
            return JSONResponse({"error": "invalid_client", "error_description": exc.message}, 401, headers)
        token = (await request.form()).get("token")
        if not isinstance(token, str) or not 0 < len(token) <= 4096:
            return JSONResponse({"error": "invalid_request", "error_description": "token is required"}, 400, headers)
        await self.provider.revoke(client, token)
        return Response(status_code=200, headers=headers)

    def routes(self) -> list[BaseRoute]:
        async def metadata(request: Request) -> Response:
            return JSONResponse(self.metadata())

        async def jwks(request: Request) -> Response:
            return JSONResponse(self.keys.jwks(), headers={"Cache-Control": "public, max-age=300"})

        authorize = AuthorizationHandler(self.provider).handle
        token = TokenHandler(self.provider, self.clients).handle
        get, post = ["GET", "OPTIONS"], ["POST", "OPTIONS"]
        routes: list[BaseRoute] = [
            Route("/.well-known/oauth-authorization-server", _public(metadata, get), methods=get),
            Route(JWKS_PATH, _public(jwks, get), methods=get),
            Route("/authorize", self._limited("authorize", self._limits.authorize, authorize), methods=["GET", "POST"]),
            Route("/token", _public(self._limited("token", self._limits.token, token), post), methods=post),
            Route("/revoke", _public(self._revoke, post), methods=post),
            Route(f"{PAGES}/consent", self.pages.consent, methods=["GET"]),
            Route(f"{PAGES}/consent", _bounded(self.pages.decide), methods=["POST"]),
            Route(f"{PAGES}/sign-in", _bounded(self.pages.sign_in), methods=["POST"]),
            Mount(f"{PAGES}/static", app=StaticFiles(directory=STATIC), name="oauth-static"),
        ]
        if self.upstream is not None:
            for path, endpoint in (("", self.upstream.begin), ("/callback", self.upstream.callback)):
                sessions = Sessions(request_response(endpoint), self.cookies)
                self._sessions.append(sessions)
                routes.append(Route(f"{PAGES}/upstream/{{name}}{path}", sessions, methods=["GET"]))
        if self._registration:
            options = ClientRegistrationOptions(enabled=True, valid_scopes=self._scopes, default_scopes=self._scopes)
            register = RegistrationHandler(self.provider, options).handle
            routes.append(
                Route(
                    "/register", _public(self._limited("register", self._limits.register, register), post), methods=post
                )
            )
        return routes


def _bounded(endpoint: Endpoint) -> ASGIApp:
    return RequestBodyLimitMiddleware(request_response(endpoint), FORM_BYTES)


def _public(endpoint: Endpoint, methods: list[str]) -> ASGIApp:
    """An endpoint clients call from anywhere (browser-based ones too): CORS outside the body limit,
    so that a 413 carries CORS headers as well."""
    return CORSMiddleware(
        _bounded(endpoint), allow_origins="*", allow_methods=methods, allow_headers=["mcp-protocol-version"]
    )
