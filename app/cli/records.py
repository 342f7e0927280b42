"""`engram audit`, `usage`, `cursor-key`, `reindex` and `purge`: what tenants did (read over every
cell, through the operator service's reports), and the maintenance of what they hold."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import TYPE_CHECKING, Protocol

from app.cli.common import exiting, operator, read_settings, with_database

if TYPE_CHECKING:
    from app.cli.common import Subparsers


def cmd_audit(args: argparse.Namespace) -> None:
    from datetime import UTC, datetime, timedelta

    reports = operator().reports
    since = datetime.now(UTC) - timedelta(days=args.days) if args.days else None
    if args.action == "auth":
        for r in exiting(lambda: reports.auth_events(args.limit, since)):
            print(
                f"{r.at:%Y-%m-%d %H:%M:%S}\t{r.event}\t{r.outcome}\t{r.username or '-'}\t"
                f"{r.client_id or '-'}\t{r.tenant_key or '-'}\t{r.detail}"
            )
        return
    if args.action == "cleanup":  # on every cell: a tenant's audit rows are written on its cell
        days = read_settings().audit_retention_days
        done = exiting(lambda: reports.cleanup(days))
        for name, removed in done:
            where = f" on cell {name}" if len(done) > 1 else ""
            print(f"removed {removed} audit rows older than {days} days{where}")
        return
    for row in exiting(lambda: reports.audit(args.tenant, args.limit, since)):
        print(
            f"{row.at:%Y-%m-%d %H:%M:%S}\t{row.tenant}\t{row.subject}\t{row.tool}\t"
            f"{len(row.affected)} changed\t{row.duration_ms:.1f} ms\t{row.request_id}"
        )


def cmd_usage(args: argparse.Namespace) -> None:
    reports = operator().reports
    for r in exiting(lambda: reports.usage(args.tenant, args.days)):
        print(f"{r.day}\t{r.tenant}\t{r.tool}\t{r.calls} calls\t{r.errors} errors")


def cmd_cursor_key(args: argparse.Namespace) -> None:
    from app.services.cursors import KEY_REFRESH

    retire_after = read_settings().cursor_max_age_seconds + KEY_REFRESH
    key_id, retired = exiting(lambda: operator().keys.rotate_cursor_key(retire_after))
    print(f"added cursor key {key_id}; servers sign with it within {KEY_REFRESH:.0f} s and accept the older ones")
    if retired:
        print("removed keys whose cursors have all expired: " + ", ".join(retired))


class _Keyed(Protocol):
    @property
    def key(self) -> str: ...


def cmd_reindex(args: argparse.Namespace) -> None:
    """Re-embed every text with the configured model, tenant by tenant; safe to stop and run again."""
    import logging
    import math

    from app.cli.database import pools
    from app.embeddings.provider import EmbeddingError
    from app.errors import EngramError
    from app.observability.context import deadline
    from app.services.indexing import Indexer

    settings = with_database(read_settings())
    logging.basicConfig(level="WARNING", format="%(levelname)s %(name)s: %(message)s")

    def progress(tenant: _Keyed, done: int, total: int) -> None:
        width = 30
        filled = width * done // total if total else width
        line = f"{tenant.key[:40]:<40} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} texts"
        if sys.stderr.isatty():
            print(f"\r{line}", end="" if done < total else "\n", file=sys.stderr, flush=True)
        elif done in (0, total) or done % 1000 < settings.embedding_batch_size:
            print(line, file=sys.stderr, flush=True)

    async def run() -> str:
        async with pools(settings) as db:
            indexer = Indexer.from_settings(db, settings)
            try:
                await indexer.start(fill=False)
                await indexer.register()
                assert indexer.model is not None
                with deadline(math.inf):  # a maintenance job: its transactions run as long as they need
                    report = await indexer.reindex(args.tenant or (), max_texts=args.max_texts, progress=progress)
            finally:
                await indexer.stop()
        if not report.complete:
            return f"stopped after {report.texts} texts; run `engram reindex` again to go on"
        current = f"; {indexer.model.name} is now the current model" if report.current else ""
        return f"{report.tenants} tenant(s), {report.texts} texts embedded{current}"

    try:
        print(asyncio.run(run()))
    except (EngramError, EmbeddingError) as exc:
        sys.exit(f"reindex error: {exc}")


def cmd_purge(args: argparse.Namespace) -> None:
    """Erase entities of a tenant for good (as purge_entities does): first what would go, then,
    with --confirm N naming that number of entities, the purge. The audit log records it."""
    import getpass

    from app.auth.principal import ADMIN, Principal
    from app.cli.database import pools
    from app.errors import EngramError
    from app.services import Services
    from app.services.indexing import Indexer

    settings = with_database(read_settings())
    who = Principal(
        subject=f"operator:{getpass.getuser()}", client_id="engram-cli", tenant=args.tenant,
        scopes=frozenset({ADMIN}), issuer="", operator=True,
    )  # fmt: skip

    async def run() -> str:
        async with pools(settings) as db:
            indexer = Indexer(db, None, batch_size=settings.embedding_batch_size)
            services = Services.from_settings(settings, db, indexer)
            result = await services.purges.purge(who, args.match, confirm=args.confirm, episodes=args.episodes)
        shown = "".join(f"\n  {name}" for name in result.names)
        return result.summary + shown

    try:
        print(asyncio.run(run()))
    except EngramError as exc:
        sys.exit(f"purge error: {exc}")


def add_audit(sub: Subparsers) -> None:
    audit = sub.add_parser("audit", help="read the audit log, or remove rows past retention")
    audit.add_argument("action", nargs="?", choices=["show", "auth", "cleanup"], default="show")
    audit.add_argument("--tenant")
    audit.add_argument("--limit", type=int, default=100)
    audit.add_argument("--days", type=int, help="only the last N days")
    audit.set_defaults(func=cmd_audit)


def add_cursor_key(sub: Subparsers) -> None:
    cursor_key = sub.add_parser("cursor-key", help="rotate the key that signs pagination cursors")
    cursor_key.add_argument("action", choices=["rotate"])
    cursor_key.set_defaults(func=cmd_cursor_key)


def add_usage(sub: Subparsers) -> None:
    usage = sub.add_parser("usage", help="tool calls per tenant, tool and day")
    usage.add_argument("--tenant")
    usage.add_argument("--days", type=int, default=7)
    usage.set_defaults(func=cmd_usage)


def add_reindex(sub: Subparsers) -> None:
    reindex = sub.add_parser("reindex", help="re-embed every text with the configured embedding model")
    reindex.add_argument("--tenant", action="append", help="only this tenant (repeat for several)")
    reindex.add_argument("--max-texts", type=int, help="stop after embedding this many texts (resume later)")
    reindex.set_defaults(func=cmd_reindex)


def add_purge(sub: Subparsers) -> None:
    purge = sub.add_parser("purge", help="erase a tenant's entities for good (first shows what would go)")
    purge.add_argument("--tenant", required=True)
    purge.add_argument("--match", action="append", required=True, help="an entity's id, name or alias (repeat)")
    purge.add_argument("--episodes", choices=["keep", "remove"], default="keep", help="episodes that mention them")
    purge.add_argument("--confirm", type=int, help="the number of entities the first run showed: erase them")
    purge.set_defaults(func=cmd_purge)


COMMANDS = {
    "audit": add_audit,
    "cursor-key": add_cursor_key,
    "usage": add_usage,
    "reindex": add_reindex,
    "purge": add_purge,
}
