"""One import: its two passes over the file, its batches and its place in the file.

Pass 1 writes entities (and refuses invalid lines), pass 2 relations, episodes and history, so the
order of lines does not matter. Each batch is its own transaction, which also moves the checkpoint
to the batch's last line. A dry run does the same work in the one transaction it is given (rolled
back by its caller) and keeps no checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from contextlib import asynccontextmanager

from app.auth.principal import Principal
from app.errors import EngramError
from app.services.base import Service
from app.services.calls import retrying
from app.services.transfer.checkpoint import Checkpoint, Moved, Place
from app.services.transfer.format import FileFormat
from app.services.transfer.reading import records
from app.services.transfer.records import (
    KINDS,
    Bad,
    EntityRecord,
    EpisodeRecord,
    HistoryRecord,
    Marker,
    Record,
    RelationRecord,
)
from app.services.transfer.source import Source
from app.services.transfer.summary import Done, ImportSummary, RefusedLine
from app.services.transfer.writes import BatchWrites
from app.services.writer import OnExisting
from app.store import entities, transfer
from app.store.database import Tx

BATCH_ENTITIES = 1000  # entities with their observations in one batch
BATCH_ROWS = 10_000  # observations of a batch's entities, or relations, or history rows
Progress = Callable[[str, int, int], None]  # (pass name, line reached, lines in all)
Work = Callable[[Tx, Done], Awaitable[None]]
Batch = tuple[list[Record], int, Done]  # records, the last line they cover, what reading them found


class Run:
    def __init__(
        self,
        service: Service,
        who: Principal,
        source: Source,
        fmt: FileFormat,
        on_existing: OnExisting,
        *,
        dry: Tx | None = None,
        progress: Progress | None = None,
        refused: Callable[[RefusedLine], None] | None = None,
    ) -> None:
        self.service, self.who, self.source, self.fmt = service, who, source, fmt
        self.dry, self.progress, self.on_refused = dry, progress, refused
        self.writes = BatchWrites(who.actor, on_existing, fmt.name, dry is not None, who.key)
        self.checkpoint = None if dry else Checkpoint(source.digest, fmt.name, on_existing, who.actor)
        self.summary = ImportSummary(format=fmt.name, dry_run=dry is not None, lines=source.lines)
        self.at: Place = (1, 0)
        self.end: Marker | None = None
        self.written = 0  # rows this run wrote; statistics were refreshed at `analyzed`
        self.analyzed = 0

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[Tx]:
        """A batch's transaction: its own, or the dry run's one."""
        if self.dry is not None:
            yield self.dry
            return
        async with self.service.tx(self.who) as tx:
            yield tx

    async def passes(self) -> ImportSummary:
        if self.checkpoint is not None:
            async with self._tx() as tx:
                resumed = await self.checkpoint.resume(tx, self.summary)
            if resumed is not None:
                self.summary, self.at = resumed
        try:
            for pass_ in (1, 2):
                if pass_ >= self.at[0]:
                    await self._pass(pass_)
        except EngramError as exc:
            if exc.code not in ("limit", "unavailable"):
                raise
            self.summary.stopped = f"{exc.code}: {exc.message}"
            return self.summary
        self._check_end()
        self.summary.complete = True
        if self.written > self.analyzed:
            await self._analyze(force=True)  # for the tools' queries from now on
        await self._save((2, self.source.lines), finished=True)
        return self.summary

    async def _save(self, at: Place, *, finished: bool = False) -> None:
        if self.checkpoint is not None:
            async with self._tx() as tx:
                await self.checkpoint.save(tx, self.summary, at, finished=finished)

    async def _pass(self, pass_: int) -> None:
        """Write the pass's batches in order. The file is read and checked in a thread, one batch
        ahead: while the database writes a batch, the next one is being parsed."""
        start = self.at[1] if pass_ == self.at[0] else 0
        batches = self._batches(pass_, start)
        loop = asyncio.get_running_loop()
        ahead = loop.run_in_executor(None, next, batches, None)
        try:
            while (item := await ahead) is not None:
                ahead = loop.run_in_executor(None, next, batches, None)
                await self._commit(*item, pass_=pass_)
        finally:
            with contextlib.suppress(Exception):
                await ahead  # the reader thread is done with the generator before it is closed
            batches.close()
        if self.progress is not None:
            self.progress("entities" if pass_ == 1 else "relations", self.source.lines, self.source.lines)
        if pass_ == 1:
            if self.written > self.analyzed:
                await self._analyze(force=True)  # the relations pass looks its entities up
            await self._save((2, 0))
            self.at = (2, 0)

    async def _commit(self, rows: list[Record], last: int, found: Done, *, pass_: int) -> None:
        """Write one batch and move the checkpoint to its last line in its transaction; then count
        what it did."""
        at = (pass_, last)

        async def attempt() -> Done:
            done = copy.deepcopy(found)
            async with self._tx() as tx:
                if self.checkpoint is not None:
                    await transfer.bulk_session(tx)
                    await self.checkpoint.hold(tx, self.at)
                await self._write(tx, rows, done)
                if self.checkpoint is not None:
                    await self.checkpoint.save(tx, self.summary.plus(done), at)
            return done

        try:
            done = await (attempt() if self.dry is not None else retrying(attempt))
        except Moved:
            raise EngramError(
                "conflict", "another import of this file into this tenant is running; let it finish"
            ) from None
        self.written += done.wrote
        self.summary.add(done)
        if self.on_refused is not None:
            for r in done.refused:
                self.on_refused(r)
        self.at = at
        await self._analyze()

    async def _write(self, tx: Tx, rows: list[Record], done: Done) -> None:
        """A batch is of one kind of record (or empty)."""
        match rows[0] if rows else None:
            case EntityRecord():
                await self.writes.entities(tx, [r for r in rows if isinstance(r, EntityRecord)], done)
            case RelationRecord():
                await self.writes.relations(tx, [r for r in rows if isinstance(r, RelationRecord)], done)
            case EpisodeRecord():
                await self.writes.episodes(tx, [r for r in rows if isinstance(r, EpisodeRecord)], done)
            case HistoryRecord():
                await self.writes.history(tx, [r for r in rows if isinstance(r, HistoryRecord)], done)

    async def _analyze(self, *, force: bool = False) -> None:
        """Refresh the planner's statistics once the tables have grown a lot since the last time
        (a new tenant's tables grow from nothing, and stale statistics turn lookups into scans)."""
        if not force and self.written - self.analyzed < max(20_000, self.analyzed):
            return
        self.analyzed = self.written
        async with self._tx() as tx:
            await entities.refresh_statistics(tx)

    def _batches(self, pass_: int, start: int) -> Generator[Batch, None, None]:
        """The pass's batches after line `start`. Pass 1 takes entities (and refuses invalid lines),
        pass 2 relations, episodes and history, a batch of one kind; the last batch covers the
        file's last line (and may be empty)."""
        name = "entities" if pass_ == 1 else "relations"
        batch: list[Record] = []
        keys: set[str] = set()
        texts = read = 0
        last = start
        found = Done()  # refusals found while reading, counted with the next batch
        with self.source.open() as stream:
            for record in records(stream, self.fmt, self.source.head, entities=pass_ == 1):
                line = record.line
                if line <= start:
                    continue
                if pass_ == 1:
                    self._read(record, found)
                    if isinstance(record, EntityRecord):
                        e = record.entity
                        names = {e.name, *((e.id,) if e.id else ())}
                        full = len(batch) >= BATCH_ENTITIES or texts + len(e.facts) > BATCH_ROWS
                        if batch and (full or names & keys or len(found.refused) >= BATCH_ROWS):
                            yield batch, last, found  # a name again goes in after the first is in
                            found, batch, keys, texts = Done(), [], set(), 0
                        batch.append(record)
                        keys |= names
                        texts += len(e.facts)
                    elif len(found.refused) >= BATCH_ROWS:  # a file of refusals: keep them few in memory
                        yield batch, line, found
                        found, batch, keys, texts = Done(), [], set(), 0
                elif isinstance(record, RelationRecord | HistoryRecord | EpisodeRecord):
                    if batch and (len(batch) >= BATCH_ROWS or type(batch[0]) is not type(record)):
                        yield batch, last, found
                        batch = []
                    batch.append(record)
                elif isinstance(record, Marker) and record.kind == "end":
                    self.end = record
                last = line
                read += 1
                if self.progress is not None and read % 256 == 0:
                    self.progress(name, line, self.source.lines)
        yield batch, self.source.lines, found

    def _read(self, record: Record | Bad, found: Done) -> None:
        """Pass 1 sees every line: it refuses the invalid ones and checks the engram markers."""
        if isinstance(record, Bad):
            if record.kind is not None and record.kind in KINDS.values():
                found.records[record.kind] += 1
            found.refuse(record.line, "invalid", record.reason)
        elif isinstance(record, Marker):
            if record.kind == "end":
                self.end = record
            elif record.line != 1:
                found.refuse(record.line, "invalid", "a header belongs on the first line")
        else:
            found.records[KINDS[type(record)]] += 1
            if isinstance(record, EntityRecord) and record.empty:
                found.skipped_because["empty observations"] += record.empty

    def _check_end(self) -> None:
        if not self.fmt.lossless:
            return
        if self.end is None:
            self.summary.warnings.append("the file has no end line: it may have been cut short")
            return
        for kind, key in (
            ("entity", "entities"),
            ("relation", "relations"),
            ("history", "history"),
            ("episode", "episodes"),
        ):
            said = self.end.data.get(key)
            held = self.summary.records.get(kind, 0)
            if isinstance(said, int) and said != held:
                self.summary.warnings.append(f"the end line counts {said} {key}, the file holds {held}")
