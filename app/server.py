"""The Starlette application: MCP at /mcp, health, and OAuth discovery documents."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from joserfc.jwk import KeySet
from mcp.server.auth.routes import create_protected_resource_routes
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from app.auth.devkeys import load_or_create_key, public_jwks
from app.auth.principal import ADMIN, READ, WRITE
from app.auth.verifier import JwtVerifier
from app.config import Settings
from app.mcp.server import build_mcp
from app.services.indexing import Indexer
from app.services.memory import Memory
from app.services.search import Search
from app.store import migrate
from app.store.database import Database

logger = logging.getLogger("engram")


async def _readiness(db: Database, settings: Settings) -> str | None:
    """None when the database answers and its schema is current; otherwise why not.

    Raises MigrationError when the database's schema is one this code does not know.
    """
    try:
        async with asyncio.timeout(3), db.pool.acquire() as conn:
            todo = await migrate.pending(conn, settings.migrations_dir)
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        return f"database unreachable: {type(exc).__name__}"
    return f"migrations pending: {', '.join(todo)}" if todo else None


def create_app(settings: Settings) -> Starlette:
    db = Database(settings)
    indexer = Indexer.from_settings(db, settings)
    memory = Memory(db, indexer, max_batch=settings.max_batch, max_results=settings.max_results)
    searcher = Search(db, indexer, max_results=settings.max_results, ef_search=settings.search_ef_search)
    key = load_or_create_key(settings.dev_key_file)
    verifier = JwtVerifier(KeySet([key]), issuer=settings.issuer, audience=settings.resource_url)
    mcp = build_mcp(settings, memory, verifier, searcher)
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

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> JSONResponse:
        if not request.app.state.accepting:
            return JSONResponse({"status": "shutting down"}, status_code=503)
        try:
            problem = await _readiness(db, settings)
        except migrate.MigrationError as exc:
            problem = str(exc)
        if problem:
            return JSONResponse({"status": "not ready", "reason": problem}, status_code=503)
        return JSONResponse({"status": "ready"})

    async def jwks(request: Request) -> JSONResponse:
        return JSONResponse(public_jwks(key))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await db.open()
        try:
            problem = await _readiness(db, settings)
        except migrate.MigrationError:
            await db.close()
            raise  # a schema this code does not know: refuse to serve
        try:
            await indexer.start()  # loads the embedding model; a broken model setting stops the server here
        except Exception:
            await db.close()
            raise
        logger.info(
            "engram listening on %s (auth %s)%s",
            settings.resource_url,
            settings.auth_mode,
            f"; not ready: {problem}" if problem else "",
        )
        app.state.accepting = True
        try:
            async with mcp.session_manager.run():
                yield
        finally:
            app.state.accepting = False
            await indexer.stop()
            await db.close()

    metadata = create_protected_resource_routes(
        resource_url=settings.resource_url,
        authorization_servers=[settings.issuer],
        scopes_supported=[READ, WRITE, ADMIN],
        resource_name="Engram memory",
    )
    routes = [
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        Route("/.well-known/jwks.json", jwks),
        *metadata,  # RFC 9728, at the path clients derive from the resource URL ...
        Route(
            "/.well-known/oauth-protected-resource", metadata[0].endpoint, methods=["GET", "OPTIONS"]
        ),  # ... and root
        Mount("/", app=mcp_app),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.accepting = False
    return app
