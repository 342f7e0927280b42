"""`engram backup` and `engram restore`: a whole cell's database or one tenant to a file and back,
as the database's owner (ENGRAM_ADMIN_DATABASE_URL), checked row for row (docs/operations.md)."""

from __future__ import annotations

import argparse
import asyncio
import math
import sys

import asyncpg

from app.config import Settings
from app.errors import EngramError
from app.observability.context import deadline
from app.services import backup


def _summary(report: backup.Report, verb: str) -> str:
    what = "1 tenant" if report.kind == "tenant" else f"a cell of {report.tenants} tenant(s)"
    return (
        f"{verb} {what}: {report.tables} tables, {report.rows} rows, {report.bytes / 1e6:.1f} MB"
        f" in {report.seconds:.1f} s"
    )


def run_backup(settings: Settings, args: argparse.Namespace) -> None:
    async def run() -> backup.Report:
        with deadline(math.inf):  # a maintenance job: its snapshot lasts as long as the copy
            return await backup.backup(settings.admin_dsn(), args.file, args.tenant)

    try:
        print(_summary(asyncio.run(run()), f"wrote {args.file} with"))
    except EngramError as exc:
        sys.exit(f"backup error: {exc}")
    except (OSError, asyncpg.PostgresError) as exc:  # no database there, or not the owner's URL
        sys.exit(f"backup error: {exc} (a backup reads as the database's owner: ENGRAM_ADMIN_DATABASE_URL)")


def run_restore(settings: Settings, args: argparse.Namespace) -> None:
    async def run() -> backup.Report:
        with deadline(math.inf):
            return await backup.restore(settings.admin_dsn(), args.file)

    try:
        print(_summary(asyncio.run(run()), "restored") + "; every table's rows and digest match the backup")
    except EngramError as exc:
        sys.exit(f"restore error: {exc}")
    except (OSError, asyncpg.PostgresError) as exc:  # nothing was committed: the restore is one transaction
        sys.exit(f"restore error: {exc}; nothing was restored")
