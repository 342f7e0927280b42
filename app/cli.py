"""engram serve | migrate | db up|down|status|url | token | tenant | apikey | cursor-key | audit | usage | reindex"""

from __future__ import annotations

import argparse
import asyncio
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
    import logging

    import uvicorn

    from app.observability.logging import configure
    from app.server import create_app

    settings = _with_database(_settings())
    try:
        settings.check_serving()
    except ValueError as exc:
        sys.exit(f"configuration error:\n  {exc}")
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


def _admin(work):  # type: ignore[no-untyped-def]
    """Run `work(conn)` on an owner connection; domain errors exit with their message."""
    import asyncpg

    from app.errors import EngramError

    settings = _with_database(_settings())

    async def run():  # type: ignore[no-untyped-def]
        conn = await asyncpg.connect(settings.admin_dsn())
        try:
            return await work(conn)
        finally:
            await conn.close()

    try:
        return asyncio.run(run())
    except EngramError as exc:
        sys.exit(f"error: {exc.message}")


def cmd_tenant(args: argparse.Namespace) -> None:
    from app.store import tenants

    if args.action == "create":
        row = _admin(lambda c: tenants.create(c, args.tenant))
        print(f"tenant {args.tenant}: {row['id']}")
    elif args.action == "list":
        for r in _admin(tenants.list_all):
            print(f"{r['key']}\t{r['id']}\t{r['created_at']:%Y-%m-%d %H:%M}")
    elif args.action == "show":
        info = _admin(lambda c: tenants.show(c, args.tenant))
        for k, v in info.items():
            print(f"{k}: {v}")
    else:
        _admin(lambda c: tenants.delete(c, args.tenant))
        print(f"tenant {args.tenant} and all its data deleted")


def cmd_apikey(args: argparse.Namespace) -> None:
    from datetime import UTC, datetime, timedelta

    from app.auth import apikeys
    from app.store import tenants

    if args.action == "create":
        key_id, key, digest = apikeys.generate()
        expires = datetime.now(UTC) + timedelta(days=args.expires_days) if args.expires_days else None
        scopes = args.scope or [READ, WRITE]
        _admin(lambda c: tenants.add_key(c, args.tenant, key_id, digest, scopes, args.name or "", expires))
        print(key)
        print(
            f"(key {key_id} for tenant {args.tenant}, scopes {' '.join(scopes)}; shown once, store it now)",
            file=sys.stderr,
        )
    elif args.action == "list":
        for r in _admin(lambda c: tenants.list_keys(c, args.tenant)):
            state = (
                "revoked"
                if r["revoked_at"]
                else ("expires " + f"{r['expires_at']:%Y-%m-%d}" if r["expires_at"] else "active")
            )
            print(f"{r['id']}\t{r['tenant']}\t{' '.join(r['scopes'])}\t{state}\t{r['name']}")
    else:
        if not _admin(lambda c: tenants.revoke_key(c, args.key_id)):
            sys.exit(f"error: no active key {args.key_id}")
        print(f"key {args.key_id} revoked (servers stop accepting it within ENGRAM_API_KEY_CACHE_SECONDS)")


def cmd_cursor_key(args: argparse.Namespace) -> None:
    from app.services.cursors import KEY_REFRESH
    from app.store import cursor_keys

    retire_after = _settings().cursor_max_age_seconds + KEY_REFRESH
    key_id, retired = _admin(lambda c: cursor_keys.rotate(c, retire_after))
    print(f"added cursor key {key_id}; servers sign with it within {KEY_REFRESH:.0f} s and accept the older ones")
    if retired:
        print("removed keys whose cursors have all expired: " + ", ".join(retired))


def cmd_audit(args: argparse.Namespace) -> None:
    from datetime import UTC, datetime, timedelta

    from app.store import audit

    if args.action == "cleanup":
        days = _settings().audit_retention_days
        removed = _admin(lambda c: audit.cleanup(c, days))
        print(f"removed {removed} audit rows older than {days} days")
        return
    since = datetime.now(UTC) - timedelta(days=args.days) if args.days else None
    for r in _admin(lambda c: audit.admin_page(c, args.tenant, args.limit, since)):
        print(
            f"{r['at']:%Y-%m-%d %H:%M:%S}\t{r['tenant']}\t{r['subject']}\t{r['tool']}\t"
            f"{len(r['affected'])} changed\t{r['duration_ms']:.1f} ms\t{r['request_id']}"
        )


def cmd_usage(args: argparse.Namespace) -> None:
    from app.store import audit

    for r in _admin(lambda c: audit.usage(c, args.tenant, args.days)):
        print(f"{r['day']}\t{r['tenant']}\t{r['tool']}\t{r['calls']} calls\t{r['errors']} errors")


def cmd_reindex(args: argparse.Namespace) -> None:
    """Re-embed every text with the configured model, tenant by tenant; safe to stop and run again."""
    import logging

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
    tenant = sub.add_parser("tenant", help="create, list, show or delete tenants")
    tenant.add_argument("action", choices=["create", "list", "show", "delete"])
    tenant.add_argument("tenant", nargs="?", help="the tenant id (not for list)")
    tenant.set_defaults(func=cmd_tenant)
    apikey = sub.add_parser("apikey", help="API keys for headless agents")
    apikey.add_argument("action", choices=["create", "list", "revoke"])
    apikey.add_argument("key_id", nargs="?", help="with revoke: the key's id")
    apikey.add_argument("--tenant", help="with create (required) and list")
    apikey.add_argument("--scope", action="append", choices=[READ, WRITE, ADMIN])
    apikey.add_argument("--name", help="a label to recognise the key by")
    apikey.add_argument("--expires-days", type=int, help="lifetime in days (default: no expiry)")
    apikey.set_defaults(func=cmd_apikey)
    audit = sub.add_parser("audit", help="read the audit log, or remove rows past retention")
    audit.add_argument("action", nargs="?", choices=["show", "cleanup"], default="show")
    audit.add_argument("--tenant")
    audit.add_argument("--limit", type=int, default=100)
    audit.add_argument("--days", type=int, help="only the last N days")
    audit.set_defaults(func=cmd_audit)
    cursor_key = sub.add_parser("cursor-key", help="rotate the key that signs pagination cursors")
    cursor_key.add_argument("action", choices=["rotate"])
    cursor_key.set_defaults(func=cmd_cursor_key)
    usage = sub.add_parser("usage", help="tool calls per tenant, tool and day")
    usage.add_argument("--tenant")
    usage.add_argument("--days", type=int, default=7)
    usage.set_defaults(func=cmd_usage)
    reindex = sub.add_parser("reindex", help="re-embed every text with the configured embedding model")
    reindex.add_argument("--tenant", action="append", help="only this tenant (repeat for several)")
    reindex.add_argument("--max-texts", type=int, help="stop after embedding this many texts (resume later)")
    reindex.set_defaults(func=cmd_reindex)
    args = parser.parse_args(argv)
    if args.command == "tenant" and args.action != "list" and not args.tenant:
        parser.error("tenant: give the tenant id")
    if args.command == "apikey" and args.action == "create" and not args.tenant:
        parser.error("apikey create: --tenant is required")
    if args.command == "apikey" and args.action == "revoke" and not args.key_id:
        parser.error("apikey revoke: give the key id")
    args.func(args)


if __name__ == "__main__":
    main()
