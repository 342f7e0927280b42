"""`engram serve` (the HTTP server) and `engram token` (a development token for it)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING

from app.cli.common import read_settings, with_database
from app.scopes import ADMIN, READ, WRITE

if TYPE_CHECKING:
    from app.cli.common import Subparsers


def _port_taken(host: str, port: int) -> str:
    """Why `engram serve` could not listen on host:port, or "" (checked before loading anything)."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((host, port))
        except OSError as exc:
            return exc.strerror or str(exc)
    return ""


def cmd_serve(args: argparse.Namespace) -> None:
    import logging

    from app import allocator
    from app.embeddings import factory

    settings = with_database(read_settings())
    try:
        settings.check_serving()
    except ValueError as exc:
        sys.exit(f"configuration error:\n  {exc}")
    from app.health import preflight

    for port, setting in ((settings.port, "ENGRAM_PORT"), (settings.metrics_port, "ENGRAM_METRICS_PORT")):
        if port and (taken := _port_taken(settings.host, port)):
            sys.exit(f"error: {settings.host}:{port} is in use ({taken}): stop what listens there, or set {setting}")
    if problem := asyncio.run(preflight(settings.runtime_dsn(), settings.database_wait_seconds)):
        sys.exit(f"error: {problem}")
    allocator.limit_arenas()  # before any thread starts (docs/operations.md, "Memory")
    factory.preload(settings)  # the model loads on its own thread while the server's code is imported

    import uvicorn

    from app.observability.logging import configure
    from app.server import create_app

    configure(settings.log_level)
    if settings.auth_mode == "dev":
        logging.getLogger("engram").warning(
            "DEV AUTH MODE: tokens are signed by a local key (`engram token`); bound to %s only", settings.host
        )
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http="httptools",
        timeout_graceful_shutdown=settings.shutdown_grace_seconds,
        log_level=settings.log_level.lower(),
        log_config=None,  # our JSON logging, configured above
        access_log=False,  # engram.access writes the access log
        proxy_headers=False,
        limit_concurrency=settings.http_max_concurrency,  # beyond it: 503 at once, before any work
        timeout_keep_alive=settings.http_keepalive_seconds,
        h11_max_incomplete_event_size=settings.http_max_header_bytes,  # the h11 parser's bound, if used
    )


def cmd_token(args: argparse.Namespace) -> None:
    from app.auth.devkeys import mint_token

    settings = read_settings()
    if settings.auth_mode != "dev":
        sys.exit("error: `engram token` mints development tokens; it needs ENGRAM_AUTH_MODE=dev")
    scopes = tuple(args.scope or (READ, WRITE))
    print(mint_token(settings, tenant=args.tenant, subject=args.subject, scopes=scopes, ttl=args.ttl))


def add_serve(sub: Subparsers) -> None:
    sub.add_parser("serve", help="run the HTTP server").set_defaults(func=cmd_serve)


def add_token(sub: Subparsers) -> None:
    token = sub.add_parser("token", help="print a development access token")
    token.add_argument("--tenant", required=True, help="tenant id the token grants access to")
    token.add_argument("--subject", default="dev-user", help="the user the token stands for")
    token.add_argument(
        "--scope",
        action="append",
        choices=[READ, WRITE, ADMIN],
        help="repeat for several (default: memory:read and memory:write)",
    )
    token.add_argument("--ttl", type=int, help="lifetime in seconds (default ENGRAM_TOKEN_TTL_SECONDS)")
    token.set_defaults(func=cmd_token)


COMMANDS = {"serve": add_serve, "token": add_token}
