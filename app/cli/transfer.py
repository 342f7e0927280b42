"""`engram export` and `engram import`: a tenant's memory to and from a file, through the same
service as the admin HTTP routes, as the run-time role (docs/import-export.md).

The services are imported when a command runs, so that building the parser loads nothing heavy."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import math
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING

from app.cli.common import read_settings, with_database

if TYPE_CHECKING:
    from app.auth.principal import Principal
    from app.cli.common import Subparsers
    from app.config import Settings
    from app.services.transfer import ImportSummary, RefusedLine, Transfer

FORMATS = ["engram", "memory", "neo4j"]


def _principal(kind: str, tenant: str) -> Principal:
    from app.auth.principal import ADMIN, READ, WRITE, Principal

    user = os.environ.get("USER") or getpass.getuser()
    return Principal(
        subject=f"{kind}:{user}",
        client_id="engram-cli",
        tenant=tenant,
        scopes=frozenset({READ, WRITE, ADMIN}),
        issuer="cli",
        operator=True,  # the operator's export and import hold every principal's private memory
    )


@asynccontextmanager
async def _service(settings: Settings) -> AsyncIterator[Transfer]:
    from app.cli.database import pools
    from app.observability.context import deadline
    from app.services.base import Limits
    from app.services.cursors import Cursors
    from app.services.indexing import Indexer
    from app.services.transfer import Transfer

    async with pools(settings) as db:
        # No embedding model here: imported texts wait for the server's background filler.
        indexer = Indexer(db, None, batch_size=settings.embedding_batch_size)
        cursors = Cursors(settings.cursor_max_age_seconds)
        with deadline(math.inf):  # a maintenance job: its transactions take as long as they need
            yield Transfer(db, indexer, cursors, Limits.from_settings(settings))


def cmd_export(args: argparse.Namespace) -> None:
    from app.errors import EngramError

    # Exporting never creates a tenant, whatever the tenant policy.
    settings = with_database(read_settings()).model_copy(update={"tenant_policy": "managed"})
    who = _principal("export", args.tenant)

    async def run(out: IO[bytes]) -> None:
        async with _service(settings) as service:
            async for chunk in service.export(who, args.format, deleted=args.include_deleted, history=args.history):
                out.write(chunk)

    try:
        if args.output is None:
            asyncio.run(run(sys.stdout.buffer))
            sys.stdout.buffer.flush()
            return
        partial = args.output.with_name(args.output.name + ".partial")
        with partial.open("wb") as out:
            asyncio.run(run(out))
        partial.replace(args.output)  # a complete file or none
    except EngramError as exc:
        sys.exit(f"export error: {exc.code}: {exc.message}")
    print(f"exported tenant {args.tenant} ({args.format}) to {args.output}", file=sys.stderr)


class Bar:
    """Progress on standard error: a bar redrawn in place on a terminal, a plain line every few
    seconds otherwise. Items are lines of the file; each pass reads them all."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.started = self.shown = time.monotonic()
        self.name = ""
        self.from_line = 0

    def __call__(self, name: str, line: int, total: int) -> None:
        now = time.monotonic()
        if name != self.name:
            if self.name and self.tty:
                self.stream.write("\n")
            self.name, self.started, self.from_line = name, now, line
        done = line >= total
        if not done and now - self.shown < (0.2 if self.tty else 5.0):
            return
        self.shown = now
        elapsed = max(now - self.started, 1e-6)
        rate = (line - self.from_line) / elapsed
        eta = (total - line) / rate if rate > 0 else math.inf
        eta_text = "--:--" if math.isinf(eta) else time.strftime("%M:%S", time.gmtime(eta))
        share = line / total if total else 1.0
        if self.tty:
            width = 30
            filled = int(width * share)
            bar = "#" * filled + "." * (width - filled)
            self.stream.write(
                f"\r{name:<9} [{bar}] {line:,}/{total:,} lines  {rate:,.0f}/s  ETA {eta_text} " + ("\n" if done else "")
            )
        else:
            self.stream.write(f"{name}: {line:,}/{total:,} lines ({share:.0%}), {rate:,.0f} lines/s, ETA {eta_text}\n")
        self.stream.flush()


def _refused(line: RefusedLine) -> None:
    print(f"line {line.line}: {line.code}: {line.reason}", file=sys.stderr, flush=True)


def cmd_import(args: argparse.Namespace) -> None:
    from app.errors import EngramError
    from app.services.transfer import Source

    settings = with_database(read_settings())
    if not args.file.is_file():
        sys.exit(f"import error: no file {args.file}")
    who = _principal("import", args.tenant)

    async def run() -> ImportSummary:
        async with _service(settings) as service:
            return await service.import_(
                who,
                Source(path=args.file),
                args.format,
                on_existing=args.on_existing,
                dry_run=args.dry_run,
                progress=Bar(sys.stderr),
                refused=_refused,
            )

    try:
        summary = asyncio.run(run())
    except EngramError as exc:
        sys.exit(f"import error: {exc.code}: {exc.message}")
    print(summary.model_dump_json(indent=2) if args.json else describe(summary))
    if not summary.complete:
        print(f"import stopped: {summary.stopped}", file=sys.stderr)
        sys.exit(1)
    if summary.refused_total:
        sys.exit(2)


def describe(s: ImportSummary) -> str:
    """The summary in a few lines of text."""
    verb = "would be" if s.dry_run else "were"
    out = [
        f"{'dry run: ' if s.dry_run else ''}{s.lines:,} lines ({s.format} format)"
        + (f", resumed after line {s.resumed_at_line:,} of {2 * s.lines:,} read" if s.resumed_at_line else ""),
    ]
    t = s.entities
    out.append(
        f"entities: {t.created:,} created, {t.merged:,} merged, {t.unchanged:,} unchanged, "
        f"{t.skipped:,} skipped, {t.refused:,} refused"
    )
    t = s.relations
    out.append(
        f"relations: {t.created:,} created, {t.unchanged:,} existed, {t.skipped:,} skipped, {t.refused:,} refused"
    )
    out.append(f"observations added: {s.observations_added:,}")
    if s.history.added or s.history.skipped:
        out.append(f"history: {s.history.added:,} added, {s.history.skipped:,} skipped")
    if s.invalid:
        out.append(f"invalid lines: {s.invalid:,}")
    for because, n in sorted(s.skipped_because.items()):
        out.append(f"skipped ({because}): {n:,}")
    if s.refused_total:
        out.append(f"{s.refused_total:,} lines {verb} refused (each listed above as it came)")
    out += [f"warning: {w}" for w in s.warnings]
    if s.stopped:
        out.append(f"stopped: {s.stopped}; run the same command again to go on")
    elif s.dry_run:
        out.append("nothing was written")
    return "\n".join(out)


def add_export(sub: Subparsers) -> None:
    export = sub.add_parser("export", help="write a tenant's memory to a file (or standard output)")
    export.add_argument("--tenant", required=True)
    export.add_argument("--format", choices=FORMATS, default="engram", help="engram (default, lossless), memory, neo4j")
    export.add_argument("--include-deleted", action="store_true", help="engram: soft-deleted entities too")
    export.add_argument("--history", action="store_true", help="engram: the history of changes too")
    export.add_argument("-o", "--output", type=Path, help="the file to write (default: standard output)")
    export.set_defaults(func=cmd_export)


def add_import(sub: Subparsers) -> None:
    imp = sub.add_parser("import", help="read a file into a tenant's memory; run again to resume")
    imp.add_argument("--tenant", required=True)
    imp.add_argument("file", type=Path)
    imp.add_argument("--format", choices=FORMATS, help="default: told by the file's first line")
    imp.add_argument(
        "--on-existing",
        choices=["merge", "skip", "error"],
        default="merge",
        help="an entity that exists: merge the file's fields and observations into it (default), leave it, "
        "or refuse the line",
    )
    imp.add_argument("--dry-run", action="store_true", help="check and count everything, write nothing")
    imp.add_argument("--json", action="store_true", help="print the summary as JSON")
    imp.set_defaults(func=cmd_import)


COMMANDS = {"export": add_export, "import": add_import}
