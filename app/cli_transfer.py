"""`engram export` and `engram import`: a tenant's memory to and from a file, through the same
service as the admin HTTP routes, as the run-time role (docs/import-export.md)."""

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
from typing import IO

from app.auth.principal import ADMIN, READ, WRITE, Principal
from app.config import Settings
from app.errors import EngramError
from app.observability.context import deadline
from app.services.base import Limits
from app.services.cursors import Cursors
from app.services.indexing import Indexer
from app.services.transfer import ImportSummary, RefusedLine, Source, Transfer
from app.store.database import Database


def _principal(kind: str, tenant: str) -> Principal:
    user = os.environ.get("USER") or getpass.getuser()
    return Principal(
        subject=f"{kind}:{user}",
        client_id="engram-cli",
        tenant=tenant,
        scopes=frozenset({READ, WRITE, ADMIN}),
        issuer="cli",
    )


@asynccontextmanager
async def _service(settings: Settings) -> AsyncIterator[Transfer]:
    db = Database.from_settings(settings)
    await db.open()
    try:
        # No embedding model here: imported texts wait for the server's background filler.
        indexer = Indexer(db, None, batch_size=settings.embedding_batch_size)
        cursors = Cursors(settings.cursor_max_age_seconds)
        with deadline(math.inf):  # a maintenance job: its transactions take as long as they need
            yield Transfer(db, indexer, cursors, Limits.from_settings(settings))
    finally:
        await db.close()


def export(settings: Settings, args: argparse.Namespace) -> None:
    # Exporting never creates a tenant, whatever the tenant policy.
    settings = settings.model_copy(update={"tenant_policy": "managed"})
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


def import_(settings: Settings, args: argparse.Namespace) -> None:
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
