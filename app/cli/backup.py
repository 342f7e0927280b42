"""`engram backup` and `engram restore`: a whole cell's database or one tenant to a file and back,
as the database's owner (ENGRAM_ADMIN_DATABASE_URL), checked row for row (docs/operations.md).

The service is imported when a command runs, so that building the parser loads nothing heavy."""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from app.cli.common import read_settings, with_database
from app.cli.progress import Progress

if TYPE_CHECKING:
    from app.cli.common import Subparsers
    from app.services import backup


def _summary(report: backup.Report, verb: str) -> str:
    what = "1 tenant" if report.kind == "tenant" else f"a cell of {report.tenants} tenant(s)"
    return (
        f"{verb} {what}: {report.tables} tables, {report.rows} rows, {report.bytes / 1e6:.1f} MB"
        f" in {report.seconds:.1f} s"
    )


def cmd_backup(args: argparse.Namespace) -> None:
    import asyncpg

    from app.errors import EngramError
    from app.observability.context import deadline
    from app.services import backup

    settings = with_database(read_settings())

    async def run() -> backup.Report:
        with deadline(math.inf), Progress("tables") as progress:  # a maintenance job: as long as the copy
            return await backup.backup(settings.admin_dsn(), args.file, args.tenant, progress)

    try:
        print(_summary(asyncio.run(run()), f"wrote {args.file} with"))
    except EngramError as exc:
        sys.exit(f"backup error: {exc}")
    except (OSError, asyncpg.PostgresError) as exc:  # no database there, or not the owner's URL
        sys.exit(f"backup error: {exc} (a backup reads as the database's owner: ENGRAM_ADMIN_DATABASE_URL)")


def cmd_restore(args: argparse.Namespace) -> None:
    import asyncpg

    from app.errors import EngramError
    from app.observability.context import deadline
    from app.services import backup

    settings = with_database(read_settings())

    async def run() -> backup.Report:
        with deadline(math.inf), Progress("tables") as progress:
            return await backup.restore(settings.admin_dsn(), args.file, progress)

    try:
        checked = "; every table's rows and digest match the backup, and no row names another tenant"
        print(_summary(asyncio.run(run()), "restored") + checked)
    except EngramError as exc:
        sys.exit(f"restore error: {exc}")
    except (OSError, asyncpg.PostgresError) as exc:  # nothing was committed: the restore is one transaction
        sys.exit(f"restore error: {exc}; nothing was restored")


def add_backup(sub: Subparsers) -> None:
    made = sub.add_parser("backup", help="write the whole database (or one tenant) to a file, consistently")
    made.add_argument("file", type=Path, help="the file to write (must not exist)")
    made.add_argument("--tenant", help="only this tenant: its memory, limits, API keys, usage and audit")
    made.set_defaults(func=cmd_backup)


def add_restore(sub: Subparsers) -> None:
    back = sub.add_parser("restore", help="load a backup into this database (see docs/operations.md)")
    back.add_argument("file", type=Path)
    back.set_defaults(func=cmd_restore)


COMMANDS = {"backup": add_backup, "restore": add_restore}
