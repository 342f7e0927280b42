"""The Starlette application: the MCP endpoints (/mcp, /mcp/memory, /mcp/neo4j, those ENGRAM_TOOL_SETS
names; the others answer 404), health, metrics, and the OAuth routes and documents.

`create_app` wires the parts together; what they do lives elsewhere: app/health.py (/healthz,
/readyz), app/auth_mode.py (the authorization server and token verifier of the auth mode),
app/lifespan.py (start-up, background tasks, shutdown).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import httpx2
from mcp.server.auth.routes import build_resource_metadata_url, create_protected_resource_routes
from mcp.server.transport_security import TransportSecuritySettings
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import AnyHttpUrl, ConfigDict, TypeAdapter
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp

from app import health
from app.admin_routes import AdminRoutes
from app.auth_mode import authorization_server, token_verifier
from app.config import Settings
from app.console import console_routes
from app.home import home_routes
from app.hooks.routes import PATHS as HOOK_PATHS
from app.hooks.routes import HookRoutes
from app.lifespan import Lifespan
from app.mcp.http_guard import HttpGuard, OutageAnswers
from app.mcp.live import SessionStreams
from app.mcp.scope_guard import ScopeGuard
from app.mcp.server import Endpoint, build_endpoints
from app.observability import metrics
from app.observability.logging import FIXED_ROUTES, RequestLog
from app.observability.usage import Usage
from app.services import Services
from app.services.fairness import fairness_from_settings
from app.services.indexing import Indexer
from app.store.database import Database
from app.version import REVISION, VERSION

RESOURCE_NAMES = {
    "native": "Engram memory",
    "memory": "Engram memory (server-memory tools)",
    "neo4j": "Engram memory (neo4j-memory tools)",
    "chatgpt": "Engram memory (search and fetch)",
}


def create_app(settings: Settings) -> Starlette:
    settings.check_serving()
    db = Database.from_settings(settings)
    indexer = Indexer.from_settings(db, settings)
    services = Services.from_settings(settings, db, indexer, fairness=fairness_from_settings(db, settings))
    # Only for the identity provider's metadata, keys and introspection; never forwards client tokens.
    http = httpx2.AsyncClient(timeout=httpx2.Timeout(5.0), follow_redirects=False)
    auth = authorization_server(settings, db)
    verifier = token_verifier(settings, db, http, auth)
    usage = Usage()
    endpoints = build_endpoints(settings, services, verifier, usage)
    routes = [
        *health.routes(db, indexer, settings.migrations_dir),
        *([Route("/metrics", metrics_page)] if settings.metrics_port == 0 else []),
        *(auth.routes() if auth is not None else []),
        *_resource_metadata(settings, endpoints),
        # A token for any served endpoint (the first one's metadata named in challenges).
        *AdminRoutes(settings, services.transfer, verifier, _metadata_url(endpoints[0].url)).routes(),
        *(
            HookRoutes(settings, services.hooks, verifier, _metadata_url(endpoints[0].url), services.fairness).routes()
            if settings.hooks
            else []
        ),
        *console_routes(settings, services, auth, verifier),
        *home_routes(
            settings.base_url,
            {e.tool_set: e.url for e in endpoints},
            f"{settings.base_url}/console" if settings.console and auth is not None else None,
        ),
        *(Route(e.path, _mcp_endpoint(settings, e)) for e in endpoints),
    ]
    servers = [e.mcp for e in endpoints]
    lifespan = Lifespan(
        settings,
        db,
        indexer=indexer,
        usage=usage,
        mcp=servers,
        auth=auth,
        http=http,
        live=services.live,
        sweep=functools.partial(services.purges.sweep, settings.deleted_retention_days),
        drain=services.hooks.detached.drain,
    )
    app = Starlette(routes=routes, lifespan=lifespan, middleware=_middleware(settings, endpoints))
    app.state.accepting = False  # until the lifespan has started everything
    metrics.set_build_info(VERSION, REVISION)
    return app


def _mcp_endpoint(settings: Settings, endpoint: Endpoint) -> ASGIApp:
    """One endpoint: the SDK's Streamable HTTP app for its server, behind the step-up scope check."""
    hosts, origins = settings.transport_hosts()
    mcp_app = endpoint.mcp.streamable_http_app(
        streamable_http_path=endpoint.path,
        # Handshake-era clients are served statelessly, so any replica answers any request.
        stateless_http=True,
        json_response=True,
        max_request_body_size=settings.max_request_bytes,
        transport_security=TransportSecuritySettings(allowed_hosts=hosts, allowed_origins=origins),
        host=settings.host,
    )
    mcp_app.add_middleware(OutageAnswers)  # inside the SDK app's own 500 handler, around its token check
    guarded = ScopeGuard(
        mcp_app,
        endpoint.verifier,
        endpoint.scopes,
        settings.scope_names,
        _metadata_url(endpoint.url),
        settings.max_request_bytes,
    )
    if endpoint.live is None:
        return guarded
    return SessionStreams(  # 2025-11-25 sessions' notification streams (app/mcp/live.py)
        guarded,
        path=endpoint.path,
        live=endpoint.live,
        verifier=endpoint.verifier,
        claims=[settings.tenant_claim, *settings.tenant_fallback_claims],
        security=TransportSecuritySettings(allowed_hosts=hosts, allowed_origins=origins),
        metadata_url=_metadata_url(endpoint.url),
    )


# URLs as the SDK's metadata model keeps them: an empty path stays empty (no "/" added to an issuer).
_URL = TypeAdapter(AnyHttpUrl, config=ConfigDict(url_preserve_empty_path=True))


def _url(text: str) -> AnyHttpUrl:
    return _URL.validate_python(text)


def _metadata_url(resource_url: str) -> str:
    return str(build_resource_metadata_url(_url(resource_url)))


def _resource_metadata(settings: Settings, endpoints: Sequence[Endpoint]) -> list[Route]:
    """RFC 9728 protected resource metadata of each endpoint, at the path clients derive from its URL
    (/.well-known/oauth-protected-resource/mcp/memory), and the first endpoint's also at the root."""
    routes: list[Route] = []
    for endpoint in endpoints:
        routes += create_protected_resource_routes(
            resource_url=_url(endpoint.url),
            authorization_servers=[_url(settings.issuer)],
            scopes_supported=list(settings.scope_names.values()),
            resource_name=RESOURCE_NAMES[endpoint.tool_set],
            resource_documentation=_url(settings.documentation_url) if settings.documentation_url else None,
        )
    root = Route("/.well-known/oauth-protected-resource", routes[0].endpoint, methods=["GET", "OPTIONS"])
    return [*routes, root]


def _middleware(settings: Settings, endpoints: Sequence[Endpoint]) -> list[Middleware]:
    guard = Middleware(
        HttpGuard,
        paths={e.path for e in endpoints} | (HOOK_PATHS if settings.hooks else set()),
        stream_paths={e.path for e in endpoints if e.live is not None},
        token_rate=settings.token_rate,
        token_burst=settings.token_burst,
        max_header_bytes=settings.http_max_header_bytes,
        failure_rate=settings.auth_failure_rate,
        failure_burst=settings.auth_failure_burst,
    )
    fixed = FIXED_ROUTES | {e.path for e in endpoints}  # labelled so even when refused before routing
    return [Middleware(RequestLog, fixed=fixed), Middleware(OutageAnswers), guard]


async def metrics_page(request: Request) -> Response:
    """/metrics on the main port, when ENGRAM_METRICS_PORT is 0."""
    return Response(generate_latest(metrics.REGISTRY), media_type=CONTENT_TYPE_LATEST)
