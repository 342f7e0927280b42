"""Export and import of a tenant's memory, for the CLI (`engram export` / `engram import`), the
admin HTTP routes and the console alike (docs/import-export.md).

Export streams keyset pages read from one snapshot. Import reads the file twice (app/services/
transfer/run.py) and writes through the same write path as the tools; it writes history, audit
rows and pending search documents as tool writes do.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from app.auth.principal import Principal
from app.errors import EngramError
from app.observability.context import calling
from app.services import audit_rows
from app.services.base import Service
from app.services.transfer.format import FileFormat, Format
from app.services.transfer.formats import FORMATS, detect
from app.services.transfer.run import Progress, Run
from app.services.transfer.source import Source
from app.services.transfer.summary import ImportSummary, RefusedLine
from app.services.writer import OnExisting
from app.store import episodes, transfer
from app.store.database import Tx

EXPORT_PAGE = 1000  # rows per export page


class _DryRun(Exception):
    """Ends a dry run's transaction, which rolls it back."""


class Transfer(Service):
    async def export(
        self, who: Principal, fmt: Format, *, deleted: bool = False, history: bool = False
    ) -> AsyncIterator[bytes]:
        """The tenant's memory in `fmt`, a page of lines at a time, all from one snapshot.

        `deleted` adds soft-deleted entities and their relations, `history` the history rows; both
        only in the engram format, the one that can say so. The audit log records the export."""
        out = FORMATS[fmt]
        if not out.lossless and (deleted or history):
            raise EngramError("invalid", "deleted entities and history are exported in the engram format only")
        tenant = await self.db.tenant(who.tenant)
        async with self.tx(who) as tx:
            await audit_rows.write(tx, audit_rows.fields(who, f"export:{fmt}", named=True), [])
        async with transfer.snapshot(self.db, tenant, who.key) as tx:
            async for chunk in _lines(tx, out, deleted=deleted, history=history):
                yield chunk

    async def import_(
        self,
        who: Principal,
        source: Source,
        fmt: Format | None = None,
        *,
        on_existing: OnExisting = "merge",
        dry_run: bool = False,
        progress: Progress | None = None,
        refused: Callable[[RefusedLine], None] | None = None,
    ) -> ImportSummary:
        """Import `source` into the caller's tenant. An interrupted import run again with the same
        file goes on after its last committed batch; a dry run does the same work in one
        transaction and rolls it back.

        `progress` is told where each pass has got to; `refused` hears of each refused line as it
        happens (the summary keeps the first KEEP_REFUSED)."""
        source.scan()
        fmt = fmt or detect(source.head)
        if fmt is None:
            raise EngramError("invalid", "cannot tell the file's format from its first line: give it")
        with calling("import", who.subject, who.client_id, who.tenant):  # its audit rows say `import`
            if not dry_run:
                return await Run(
                    self, who, source, FORMATS[fmt], on_existing, progress=progress, refused=refused
                ).passes()
            try:
                async with self.tx(who) as tx:
                    run = Run(self, who, source, FORMATS[fmt], on_existing, dry=tx, progress=progress, refused=refused)
                    summary = await run.passes()
                    raise _DryRun
            except _DryRun:
                return summary


async def _lines(tx: Tx, fmt: FileFormat, *, deleted: bool, history: bool) -> AsyncIterator[bytes]:
    """A whole file: the format's pieces around keyset pages of one snapshot. Only a lossless format
    keeps ids (the others list entities by name, so that a file imported and exported again comes
    out the same) and facts that have ended (the others carry what holds now)."""
    counts = {"entities": 0, "relations": 0, "history": 0, "episodes": 0}
    yield fmt.opening(deleted, history)
    after: Any = None
    by_name = valid_only = not fmt.lossless
    while page := await transfer.entity_page(
        tx, after, EXPORT_PAGE, deleted=deleted, by_name=by_name, valid_only=valid_only
    ):
        yield fmt.entities(page, counts["entities"] == 0)
        counts["entities"] += len(page)
        after = page[-1].row.name if by_name else page[-1].row.id
    yield fmt.between()
    after = None
    while rels := await transfer.relation_page(tx, after, EXPORT_PAGE, deleted=deleted, valid_only=valid_only):
        yield fmt.relations(rels, counts["relations"] == 0)
        counts["relations"] += len(rels)
        after = rels[-1].gid
    after = None
    while fmt.lossless and (eps := await episodes.page(tx, after, EXPORT_PAGE)):
        yield fmt.episodes(eps)
        counts["episodes"] += len(eps)
        after = eps[-1].id
    after = None
    while history and (changes := await transfer.history_page(tx, after, EXPORT_PAGE, deleted=deleted)):
        yield fmt.history(changes)
        counts["history"] += len(changes)
        after = changes[-1].id
    yield fmt.closing(counts)
