"""The Starlette application: MCP at /mcp, health, and OAuth discovery documents."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from wsgiref.simple_server import WSGIServer

import asyncpg
import httpx2
from mcp.server.auth.routes import build_resource_metadata_url, create_protected_resource_routes
from mcp.server.transport_security import TransportSecuritySettings
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest, start_http_server
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from app.auth.apikeys import ApiKeys
from app.auth.cimd import ClientDocuments
from app.auth.devkeys import load_or_create_key
from app.auth.keys import Issuer
from app.auth.verifier import Introspection, TokenVerifier
from app.authserver.accounts import Throttle
from app.authserver.provider import Lifetimes
from app.authserver.server import AuthServer, RateLimits
from app.config import Settings
from app.errors import EngramError
from app.mcp.http_guard import HttpGuard, OutageAnswers
from app.mcp.scope_guard import ScopeGuard
from app.mcp.server import build_mcp
from app.observability import metrics
from app.observability.context import deadline
from app.observability.logging import RequestLog
from app.observability.usage import Usage
from app.services import Limits, Services
from app.services.fairness import fairness_from_settings
from app.services.indexing import Indexer
from app.store import audit, migrate
from app.store.database import Database, Unavailable
from app.version import VERSION

logger = logging.getLogger("engram")


# /readyz answers within 3 s: its database check gets this long, then its connection is dropped.
READY_BUDGET = 2.5


async def _readiness(db: Database, settings: Settings) -> str | None:
    """None when the database answers and its schema is current; otherwise why not.

    Raises MigrationError when the database's schema is one this code does not know.
    """
    try:
        with deadline(READY_BUDGET):
            async with db.connection() as lease:
                todo = await migrate.pending(lease.conn, settings.migrations_dir)
    except Unavailable as exc:
        return f"database unreachable: {exc.message}"
    except asyncpg.PostgresError as exc:
        return f"database unreachable: {type(exc).__name__}"
    return f"migrations pending: {', '.join(todo)}" if todo else None


def _auth_server(settings: Settings, db: Database) -> AuthServer | None:
    """The built-in authorization server (builtin mode, and dev mode with its dev user signed in at once)."""
    if settings.auth_mode == "oidc":
        return None
    dev = settings.auth_mode == "dev"
    return AuthServer(
        db,
        issuer=settings.issuer,
        resource=settings.resource_url,
        scope_names=settings.scope_names,
        tenant_claim=settings.tenant_claim,
        lifetimes=Lifetimes(access=settings.access_token_ttl_seconds, refresh=settings.refresh_token_ttl_seconds),
        local_accounts=settings.local_accounts,
        auto_sign_in=dev,
        personal_tenants=settings.tenant_policy == "auto",
        registration=settings.client_registration,
        documents=ClientDocuments(allow_insecure_loopback=settings.client_metadata_allow_http_loopback)
        if settings.client_metadata_documents
        else None,
        throttle=Throttle(
            failures=settings.sign_in_max_failures,
            window=settings.sign_in_failure_window_seconds,
            attempts=settings.sign_in_per_minute,
        ),
        rate_limits=RateLimits(
            token=settings.token_per_minute,
            register=settings.register_per_minute,
            authorize=settings.authorize_per_minute,
        ),
        unused_client_days=settings.unused_client_days,
        upstream=settings.upstream_providers,
        key_reload_seconds=settings.signing_key_reload_seconds,
        # `engram token` signs with the dev key on disk; its tokens stay valid beside the server's own.
        extra_keys=[load_or_create_key(settings.dev_key_file)] if dev else (),
    )


def _verifier(settings: Settings, db: Database, http: httpx2.AsyncClient, auth: AuthServer | None) -> TokenVerifier:
    """The token verifier for the auth mode: the server's own keys, or the identity provider's."""
    api_keys = ApiKeys(db.api_key, settings.tenant_claim, settings.api_key_cache_seconds)
    common = {
        "audiences": settings.audiences,
        "scope_names": settings.scope_names,
        "api_keys": api_keys,
        "scope_claims": settings.scope_claims,
        "cache_seconds": settings.verified_token_cache_seconds,
    }
    if auth is not None:
        return TokenVerifier(auth.keys, issuer=settings.issuer, revoked=auth.revocations, **common)  # type: ignore[arg-type]
    issuer = Issuer(
        settings.issuer,
        http,
        jwks_url=settings.oidc_jwks_url,
        min_refresh=settings.jwks_min_refresh_seconds,
        max_age=settings.jwks_max_age_seconds,
    )
    introspection = None
    if settings.oidc_client_id and settings.oidc_client_secret:
        introspection = Introspection(
            issuer, http, settings.oidc_client_id, settings.oidc_client_secret.get_secret_value()
        )
    return TokenVerifier(issuer, issuer=settings.issuer, introspection=introspection, **common)  # type: ignore[arg-type]


def create_app(settings: Settings) -> Starlette:
    settings.check_serving()
    db = Database.from_settings(settings)
    indexer = Indexer.from_settings(db, settings)
    services = Services.create(
        db,
        indexer,
        Limits(
            max_batch=settings.max_batch,
            max_results=settings.max_results,
            page_size=settings.graph_page_size,
            observations_per_entity=settings.observations_per_entity,
            max_batch_texts=settings.max_batch_texts,
            page_relations=settings.graph_page_relations,
            walk_level_edges=settings.walk_level_edges,
            walk_frontier=settings.walk_frontier,
            hierarchy_max_children=settings.hierarchy_max_children,
            hierarchy_max_nodes=settings.hierarchy_max_nodes,
        ),
        ef_search=settings.search_ef_search,
        fairness=fairness_from_settings(db, settings),
        cursor_max_age=settings.cursor_max_age_seconds,
    )
    # Only for the identity provider's metadata, keys and introspection; never forwards client tokens.
    http = httpx2.AsyncClient(timeout=httpx2.Timeout(5.0), follow_redirects=False)
    auth = _auth_server(settings, db)
    verifier = _verifier(settings, db, http, auth)
    usage = Usage()
    mcp, tools = build_mcp(settings, services, verifier, usage)
    hosts, origins = settings.transport_hosts()
    mcp_app = mcp.streamable_http_app(
        streamable_http_path="/mcp",
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
        verifier,
        tools.scopes,
        settings.scope_names,
        str(build_resource_metadata_url(settings.resource_url)),  # type: ignore[arg-type]
        settings.max_request_bytes,
    )

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> JSONResponse:
        if not request.app.state.accepting:
            return JSONResponse({"status": "shutting down"}, status_code=503)
        try:
            problem = await _readiness(db, settings)
        except migrate.SchemaAhead:
            problem = None  # a newer version migrated the database during a rolling upgrade: keep serving
        except migrate.MigrationError as exc:
            problem = str(exc)
        except Exception as exc:  # never a 500: whatever went wrong, this replica is not ready
            logger.warning("readiness check failed: %s", type(exc).__name__)
            problem = f"readiness check failed: {type(exc).__name__}"
        if problem:
            return JSONResponse({"status": "not ready", "reason": problem}, status_code=503)
        return JSONResponse({"status": "ready", "embeddings": indexer.state()})  # reported, not fatal

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await _open_when_reachable(db, settings.database_wait_seconds)
        try:
            problem = await _readiness(db, settings)
        except migrate.MigrationError:
            await db.close()
            raise  # a schema this code does not know: refuse to serve
        _watch_pool(db)
        metrics_server = _serve_metrics(settings)
        try:
            if auth is not None:
                await auth.start()
            await indexer.start()  # loads the embedding model; a broken model setting stops the server here
        except Exception:
            if metrics_server is not None:
                metrics_server.shutdown()
            await db.close()
            raise
        logger.info(
            "engram %s listening on %s",
            VERSION,
            settings.resource_url,
            extra={"config": settings.redacted(), "not_ready": problem},
        )
        background = [
            asyncio.create_task(usage.flush_every(settings.usage_flush_seconds, functools.partial(_add_usage, db))),
            asyncio.create_task(_watch_database(db)),
        ]
        app.state.accepting = True
        try:
            async with mcp.session_manager.run():
                yield
        finally:
            app.state.accepting = False  # readiness drops first
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            if metrics_server is not None:
                metrics_server.shutdown()
            await indexer.stop()
            if auth is not None:
                await auth.stop()
            await http.aclose()
            await db.close()

    metadata = create_protected_resource_routes(
        resource_url=settings.resource_url,  # type: ignore[arg-type]
        authorization_servers=[settings.issuer],  # type: ignore[list-item]
        scopes_supported=list(settings.scope_names.values()),
        resource_name="Engram memory",
        resource_documentation=settings.documentation_url,  # type: ignore[arg-type]
    )

    async def metrics_page(request: Request) -> Response:
        return Response(generate_latest(metrics.REGISTRY), media_type=CONTENT_TYPE_LATEST)

    routes = [
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        *([Route("/metrics", metrics_page)] if settings.metrics_port == 0 else []),
        *(auth.routes() if auth is not None else []),
        *metadata,  # RFC 9728, at the path clients derive from the resource URL ...
        Route("/.well-known/oauth-protected-resource", metadata[0].endpoint, methods=["GET", "OPTIONS"]),  # ... root
        Mount("/", app=guarded),
    ]
    guard = Middleware(
        HttpGuard,
        token_rate=settings.token_rate,
        token_burst=settings.token_burst,
        max_header_bytes=settings.http_max_header_bytes,
        failure_rate=settings.auth_failure_rate,
        failure_burst=settings.auth_failure_burst,
    )
    middleware = [Middleware(RequestLog), Middleware(OutageAnswers), guard]
    app = Starlette(routes=routes, lifespan=lifespan, middleware=middleware)
    app.state.accepting = False
    metrics.set_build_info(VERSION)
    return app


async def _open_when_reachable(db: Database, seconds: float) -> None:
    """Open the pool, waiting up to `seconds` for a database that is still starting (a bundled one, say)."""
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        try:
            await db.open()
            return
        except (OSError, asyncpg.CannotConnectNowError, asyncpg.PostgresConnectionError) as exc:
            if asyncio.get_running_loop().time() >= deadline:
                raise
            logger.warning("database not reachable yet (%s); retrying", type(exc).__name__)
            await asyncio.sleep(2)


def _watch_pool(db: Database) -> None:
    metrics.DB_POOL.labels("open").set_function(lambda: db.pool.get_size())
    metrics.DB_POOL.labels("in_use").set_function(lambda: db.pool.get_size() - db.pool.get_idle_size())
    metrics.DB_POOL.labels("waiting").set_function(lambda: db.waiting)
    metrics.DB_POOL.labels("max").set_function(lambda: db.pool.get_max_size())


def _serve_metrics(settings: Settings) -> WSGIServer | None:
    """/metrics on its own port, so it is not public through the ingress that exposes /mcp."""
    if settings.metrics_port == 0:
        return None
    server, _ = start_http_server(settings.metrics_port, addr=settings.host, registry=metrics.REGISTRY)
    return server


async def _add_usage(db: Database, counts: list[dict[str, Any]]) -> None:
    async with db.connection() as lease:
        await audit.add_usage(lease.conn, counts)


async def _watch_database(db: Database, every: float = 15, budget: float = 5) -> None:
    """Keeps engram_database_up and engram_tenants current (alerts read the first). Each check ends
    within `budget`, answered or not (a stalled database does not stall the watch)."""
    while True:
        try:
            with deadline(budget):
                async with db.connection() as lease:
                    metrics.TENANTS.set(await audit.tenant_count(lease.conn))
            metrics.DB_UP.set(1)
        except Exception as exc:  # any failure means: not up; the loop must go on
            logger.warning("database check failed: %s", exc if isinstance(exc, EngramError) else type(exc).__name__)
            metrics.DB_UP.set(0)
        await asyncio.sleep(every)
