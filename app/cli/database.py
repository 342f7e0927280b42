"""`engram db` (the local development database) and `engram migrate` (every cell's schema); and the
CLI's one door to the store: the pools the commands that run the services open.

Only this module of the CLI imports `app.store` (tests/test_layers.py); the others change tenants,
cells and keys through the operator service (app/services/operator/)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from app.cli.common import read_settings, skipped, with_database

if TYPE_CHECKING:
    from app.cli.common import Subparsers
    from app.config import Settings
    from app.store.database import Database
    from app.store.migrate import Plan


class _Failed(Exception):
    """A cell's migration failed: the line to exit with."""


def cmd_migrate(args: argparse.Namespace) -> None:
    """The control database (the cell `main`), then every other cell ENGRAM_CELLS names, each with its
    tenant steps; a cell without an owner URL here is reported and skipped."""
    import asyncpg

    from app.services.operator.cells import Owners
    from app.store import migrate

    settings = with_database(read_settings())
    owners = Owners.from_settings(settings)
    several = len(owners.urls) > 1

    async def on(name: str, dsn: str) -> None:
        prefix = f"cell {name}: " if several else ""
        try:
            if args.status or args.dry_run:
                if several:
                    print(f"cell {name}")
                _print_plan(await migrate.plan(dsn, settings.migrations_dir), dry_run=args.dry_run)
                return
            done = await migrate.migrate(dsn, settings.migrations_dir, on_tenant=_tenant_progress, jobs=args.jobs)
        except migrate.MigrationError as exc:
            raise _Failed(f"{prefix}migration error: {exc}") from None
        except asyncpg.InsufficientPrivilegeError as exc:
            raise _Failed(
                f"{prefix}migration error: {exc}: migrations run as the database's owner "
                "(ENGRAM_ADMIN_DATABASE_URL), not the run-time role"
            ) from None
        except (OSError, asyncpg.PostgresError) as exc:
            raise _Failed(f"{prefix}migration error: cannot reach the database: {exc}") from None
        print(prefix + ("applied: " + ", ".join(done) if done else "database schema is up to date"))

    try:
        asyncio.run(owners.each(on, skipped=skipped))
    except _Failed as exc:
        sys.exit(str(exc))


def migrate_cell(name: str, url: str, directory: Path) -> list[str]:
    """A new cell's database migrated (before it is registered): the migrations applied."""
    from app.store import migrate

    try:
        return asyncio.run(migrate.migrate(url, directory, on_tenant=_tenant_progress))
    except (migrate.MigrationError, OSError) as exc:
        sys.exit(f"error: cell {name!r} could not be migrated: {exc}")


def _tenant_progress(done: int, waiting: int) -> None:
    """One line per 100 tenants brought up to date (and the last), on stderr."""
    if done % 100 == 0 or done == waiting:
        print(f"tenant steps: {done}/{waiting} tenants brought up to date", file=sys.stderr, flush=True)


def _print_plan(plan: Plan, *, dry_run: bool) -> None:
    steps = plan.steps
    print(f"migrations: {len(plan.applied)} applied, {len(plan.pending)} pending")
    for m in plan.pending:
        note = " (registers a tenant step)" if m.registers_step else ""
        print(f"  {'would apply' if dry_run else 'pending'}: {m.name}{note}")
    print(f"tenants: {steps.tenants}; newest tenant step {steps.newest or '(none)'}; {steps.waiting} waiting for steps")
    for version, count in steps.by_version:
        print(f"  last step {version or '(none)'}: {count} tenants")
    if dry_run:
        with_steps = any(m.registers_step for m in plan.pending)
        upgrade = steps.tenants if with_steps else steps.waiting
        print(f"would bring {upgrade} tenants up to date, each in a transaction of its own; nothing was changed")


def cmd_db(args: argparse.Namespace) -> None:
    from app.devdb import provision

    try:
        if args.action == "up":
            provision.up()
        elif args.action == "down":
            provision.down()
        elif args.action == "status":
            print(provision.status())
        else:
            settings = with_database(read_settings())
            print(settings.admin_dsn() if args.admin else settings.runtime_dsn())
    except provision.ProvisionError as exc:
        sys.exit(f"error: {exc}")


@asynccontextmanager
async def pools(settings: Settings) -> AsyncIterator[Database]:
    """The server's pools (the control database, each cell's on demand) as the run-time role, as
    `engram serve` builds them: for the commands that run the services (import, export, reindex, purge)."""
    from app.store.database import Database

    db = Database.from_settings(settings)
    await db.open()
    try:
        yield db
    finally:
        await db.close()


@asynccontextmanager
async def owner_pool(settings: Settings, call_deadline: float) -> AsyncIterator[Database]:
    """One owner's connection in a pool of one, for the services that run on a `Database` as the
    owner (the authorization server's account service); it creates no tenants."""
    from app.store.database import Database

    db = Database(
        settings.admin_dsn(),
        min_size=1,
        max_size=1,
        statement_timeout_ms=settings.statement_timeout_ms,
        acquire_seconds=settings.pool_acquire_seconds,
        call_deadline=call_deadline,
        create_tenants=False,
    )
    await db.open()
    try:
        yield db
    finally:
        await db.close()


def add_migrate(sub: Subparsers) -> None:
    mig = sub.add_parser("migrate", help="apply pending database migrations, then the tenant steps they add")
    mig.add_argument("--status", action="store_true", help="show what is applied and which tenants wait for steps")
    mig.add_argument("--dry-run", action="store_true", help="show what would be applied; change nothing")
    mig.add_argument(
        "--jobs", type=int, choices=range(1, 17), default=1, metavar="1-16",
        help="tenants brought up to date at once, each on a connection of its own (default 1)",
    )  # fmt: skip
    mig.set_defaults(func=cmd_migrate)


def add_db(sub: Subparsers) -> None:
    db = sub.add_parser("db", help="the local development database")
    db.add_argument("action", choices=["up", "down", "status", "url"])
    db.add_argument("--admin", action="store_true", help="with url: the owner's URL, used for migrations")
    db.set_defaults(func=cmd_db)


COMMANDS = {"migrate": add_migrate, "db": add_db}
