"""engram serve | migrate | db up|down|status|url | token | reindex"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from pydantic import ValidationError

from app.auth.principal import ADMIN, READ, WRITE
from app.config import Settings
from app.store import migrate, provision


def _settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        lines = [
            f"  ENGRAM_{'_'.join(str(p) for p in e['loc']).upper() or '(settings)'}: {e['msg']}" for e in exc.errors()
        ]
        sys.exit("configuration error:\n" + "\n".join(lines))


def _with_database(settings: Settings) -> Settings:
    try:
        return provision.with_local_database(settings)
    except provision.ProvisionError as exc:
        sys.exit(f"error: {exc}")


def cmd_serve(args: argparse.Namespace) -> None:
    import uvicorn

    from app.server import create_app

    settings = _with_database(_settings())
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
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
        proxy_headers=False,
    )


def cmd_migrate(args: argparse.Namespace) -> None:
    settings = _with_database(_settings())
    try:
        done = asyncio.run(migrate.migrate(settings.admin_dsn(), settings.migrations_dir))
    except migrate.MigrationError as exc:
        sys.exit(f"migration error: {exc}")
    print("applied: " + ", ".join(done) if done else "database schema is up to date")


def cmd_db(args: argparse.Namespace) -> None:
    try:
        if args.action == "up":
            provision.up()
        elif args.action == "down":
            provision.down()
        elif args.action == "status":
            print(provision.status())
        else:
            settings = _with_database(_settings())
            print(settings.admin_dsn() if args.admin else settings.runtime_dsn())
    except provision.ProvisionError as exc:
        sys.exit(f"error: {exc}")


def cmd_token(args: argparse.Namespace) -> None:
    from app.auth.devkeys import mint_token

    settings = _settings()
    if settings.auth_mode != "dev":
        sys.exit("error: `engram token` mints development tokens; it needs ENGRAM_AUTH_MODE=dev")
    scopes = tuple(args.scope or (READ, WRITE))
    print(mint_token(settings, tenant=args.tenant, subject=args.subject, scopes=scopes, ttl=args.ttl))


def cmd_reindex(args: argparse.Namespace) -> None:
    """Re-embed every text with the configured model, tenant by tenant; safe to stop and run again."""
    from app.embeddings.provider import EmbeddingError
    from app.errors import EngramError
    from app.services.indexing import Indexer
    from app.store.database import Database, Tenant

    settings = _with_database(_settings())
    logging.basicConfig(level="WARNING", format="%(levelname)s %(name)s: %(message)s")

    def progress(tenant: Tenant, done: int, total: int) -> None:
        width = 30
        filled = width * done // total if total else width
        line = f"{tenant.key[:40]:<40} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} texts"
        if sys.stderr.isatty():
            print(f"\r{line}", end="" if done < total else "\n", file=sys.stderr, flush=True)
        elif done in (0, total) or done % 1000 < settings.embedding_batch_size:
            print(line, file=sys.stderr, flush=True)

    async def run() -> str:
        db = Database(settings)
        await db.open()
        indexer = Indexer.from_settings(db, settings)
        try:
            await indexer.start(fill=False)
            await indexer.register()
            assert indexer.model is not None
            report = await indexer.reindex(args.tenant or (), max_texts=args.max_texts, progress=progress)
        finally:
            await indexer.stop()
            await db.close()
        if not report.complete:
            return f"stopped after {report.texts} texts; run `engram reindex` again to go on"
        current = f"; {indexer.model.name} is now the current model" if report.current else ""
        return f"{report.tenants} tenant(s), {report.texts} texts embedded{current}"

    try:
        print(asyncio.run(run()))
    except (EngramError, EmbeddingError) as exc:
        sys.exit(f"reindex error: {exc}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="engram", description="Engram: knowledge-graph memory over MCP.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="run the HTTP server").set_defaults(func=cmd_serve)
    sub.add_parser("migrate", help="apply pending database migrations").set_defaults(func=cmd_migrate)
    db = sub.add_parser("db", help="the local development database")
    db.add_argument("action", choices=["up", "down", "status", "url"])
    db.add_argument("--admin", action="store_true", help="with url: the owner's URL, used for migrations")
    db.set_defaults(func=cmd_db)
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
    reindex = sub.add_parser("reindex", help="re-embed every text with the configured embedding model")
    reindex.add_argument("--tenant", action="append", help="only this tenant (repeat for several)")
    reindex.add_argument("--max-texts", type=int, help="stop after embedding this many texts (resume later)")
    reindex.set_defaults(func=cmd_reindex)
    args = parser.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
