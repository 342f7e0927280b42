"""Export and import of a tenant's memory, for the CLI (`engram export` / `engram import`) and the
admin HTTP routes alike.

Export streams keyset pages read from one snapshot. Import reads the file twice, line by line:
entities first, then relations and history, so the order of lines does not matter. Each pass
writes batches, each its own transaction, which also moves the import's checkpoint (the file's
SHA-256, its format and the on-existing rule) to the batch's last line: an interrupted import run
again with the same file goes on after the last committed batch. A dry run does the same work in
one transaction and rolls it back. Imports write history, audit rows and pending search documents
as tool writes do. docs/import-export.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Literal

from pydantic import BaseModel, Field

from app.auth.principal import Principal
from app.errors import EngramError
from app.observability.context import CALL, REQUEST_ID, Call
from app.services import transfer_formats as formats
from app.services.base import Service
from app.services.calls import retrying
from app.services.entities import OnExisting, _apply
from app.services.transfer_formats import (
    Bad,
    EntityRecord,
    EpisodeRecord,
    Format,
    HistoryRecord,
    Marker,
    RelationRecord,
)
from app.store import aliases, audit, entities, episodes, history, transfer
from app.store.database import Tx
from app.store.episodes import NewEpisode
from app.store.history import Event

# Rows per export page, and per import batch (entities with their observations; relations; history).
EXPORT_PAGE = 1000
BATCH_ENTITIES = 1000
BATCH_ROWS = 10_000  # observations of a batch's entities, or relations, or history rows
KEEP_REFUSED = 1000  # refused lines listed in a summary (all are counted)

Progress = Callable[[str, int, int], None]  # (pass name, line reached, lines in all)


class Source:
    """An import's input, read as many times as needed: a file, or bytes received over HTTP."""

    def __init__(self, path: Path | None = None, data: bytes | None = None) -> None:
        if (path is None) == (data is None):
            raise ValueError("a file or bytes")
        self.path, self.data = path, data
        self.digest = b""
        self.lines = 0
        self.head = b""

    def open(self) -> BinaryIO:
        return self.path.open("rb") if self.path is not None else io.BytesIO(self.data or b"")

    def scan(self) -> None:
        """Its SHA-256 (the import's identity), lines and first bytes: one read, constant memory."""
        digest, lines, last = hashlib.sha256(), 0, b""
        with self.open() as stream:
            self.head = stream.read(4096)
            stream.seek(0)
            while chunk := stream.read(1 << 20):
                digest.update(chunk)
                lines += chunk.count(b"\n")
                last = chunk
        self.digest = digest.digest()
        self.lines = lines + (1 if last and not last.endswith(b"\n") else 0)


# --- the summary -------------------------------------------------------------------------------


class RefusedLine(BaseModel):
    line: int
    code: Literal["invalid", "conflict", "dangling"]
    reason: str


class Tally(BaseModel):
    created: int = 0
    merged: int = Field(0, description="Existing ones that took changes from the file.")
    unchanged: int = Field(0, description="Existing ones the file had nothing new for.")
    skipped: int = Field(0, description="Existing ones left alone (on_existing skip), or that could not be merged.")
    refused: int = 0


class HistoryTally(BaseModel):
    added: int = 0
    skipped: int = Field(0, description="Rows held already, or of entities the tenant does not hold.")
    refused: int = 0


class ImportSummary(BaseModel):
    format: Format
    dry_run: bool
    lines: int
    resumed_at_line: int | None = Field(None, description="Where an interrupted import of this file went on.")
    entities: Tally = Field(default_factory=Tally)
    observations_added: int = 0
    aliases_added: int = 0
    relations: Tally = Field(default_factory=Tally)
    history: HistoryTally = Field(default_factory=HistoryTally)
    episodes: HistoryTally = Field(default_factory=HistoryTally)
    invalid: int = Field(0, description="Lines that are not a valid record (refused before any database work).")
    records: dict[str, int] = Field(default_factory=dict, description="Records in the file by kind, valid or not.")
    refused: list[RefusedLine] = Field(default_factory=list, description=f"The first {KEEP_REFUSED} refused lines.")
    refused_total: int = 0
    skipped_because: dict[str, int] = Field(default_factory=dict, description="Why existing ones were skipped.")
    warnings: list[str] = Field(default_factory=list)
    stopped: str | None = Field(None, description="Why the import stopped before the end (run it again to go on).")
    complete: bool = False


@dataclass(slots=True)
class _Delta:
    """What one batch did; added to the summary once its transaction committed."""

    counts: dict[str, int] = field(default_factory=dict)
    refused: list[RefusedLine] = field(default_factory=list)

    def add(self, key: str, n: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + n

    def refuse(self, line: int, code: str, reason: str, what: str) -> None:
        self.refused.append(RefusedLine(line=line, code=code, reason=reason))  # type: ignore[arg-type]
        self.add("invalid" if what == "lines" else f"{what}.refused")

    def skip(self, what: str, because: str) -> None:
        self.add(f"{what}.skipped")
        self.add(f"skipped_because.{what} {because}")


def _apply_delta(summary: ImportSummary, delta: _Delta) -> None:
    for key, n in delta.counts.items():
        if key == "invalid":
            summary.invalid += n
        elif key in ("observations_added", "aliases_added"):
            setattr(summary, key, getattr(summary, key) + n)
        elif key.startswith("records."):
            kind = key.split(".", 1)[1]
            summary.records[kind] = summary.records.get(kind, 0) + n
        elif key.startswith("skipped_because."):
            because = key.split(".", 1)[1]
            summary.skipped_because[because] = summary.skipped_because.get(because, 0) + n
        else:
            kind, what = key.split(".")
            tally = getattr(summary, kind)
            setattr(tally, what, getattr(tally, what) + n)
    for r in delta.refused:
        summary.refused_total += 1
        if len(summary.refused) < KEEP_REFUSED:
            summary.refused.append(r)


_KINDS = {EntityRecord: "entity", RelationRecord: "relation", HistoryRecord: "history", EpisodeRecord: "episode"}


class _DryRun(Exception):
    """Ends a dry run's transaction, which rolls it back."""


class _Moved(Exception):
    """The checkpoint is not where this import left it: another import of the file is running."""


class Transfer(Service):
    # --- export ---------------------------------------------------------------------------------

    async def export(
        self, who: Principal, fmt: Format, *, deleted: bool = False, history: bool = False
    ) -> AsyncIterator[bytes]:
        """The tenant's memory in `fmt`, a page of lines at a time, all from one snapshot.

        `deleted` adds soft-deleted entities and their relations, `history` the history rows; both
        only in the engram format, the one that can say so. The audit log records the export."""
        if fmt != "engram" and (deleted or history):
            raise EngramError("invalid", "deleted entities and history are exported in the engram format only")
        tenant = await self.db.tenant(who.tenant)
        async with self.tx(who) as tx:
            await audit.write(
                tx,
                subject=who.subject,
                client_id=who.client_id,
                tool=f"export:{fmt}",
                affected=[],
                duration_ms=0.0,
                request_id=REQUEST_ID.get(),
            )
        async with transfer.snapshot(self.db, tenant) as tx:
            async for chunk in self._lines(tx, fmt, deleted=deleted, history=history):
                yield chunk

    async def _lines(self, tx: Tx, fmt: Format, *, deleted: bool, history: bool) -> AsyncIterator[bytes]:
        counts = {"entities": 0, "relations": 0, "history": 0, "episodes": 0}
        yield formats.header(deleted, history) if fmt == "engram" else formats.NEO4J_OPEN if fmt == "neo4j" else b""
        after: Any = None
        # Ids are kept by the engram format only: the others list entities by name, so that a file
        # imported and exported again comes out the same.
        by_name = fmt != "engram"
        # The memory and neo4j formats cannot say that a fact has ended: they carry what holds now.
        valid_only = fmt != "engram"
        while page := await transfer.entity_page(
            tx, after, EXPORT_PAGE, deleted=deleted, by_name=by_name, valid_only=valid_only
        ):
            if fmt == "engram":
                yield b"".join(formats.engram_entity(e.row, e.observations, e.aliases, e.merged_into) for e in page)
            elif fmt == "memory":
                yield b"".join(formats.memory_entity(e.row, e.observations) for e in page)
            else:
                first = counts["entities"] == 0
                yield b"".join(
                    formats.neo4j_entity(e.row, e.observations, first and i == 0) for i, e in enumerate(page)
                )
            counts["entities"] += len(page)
            after = page[-1].row.name if by_name else page[-1].row.id
        if fmt == "neo4j":
            yield formats.NEO4J_MIDDLE
        after = None
        while rels := await transfer.relation_page(tx, after, EXPORT_PAGE, deleted=deleted, valid_only=valid_only):
            if fmt == "engram":
                yield b"".join(formats.engram_relation(r) for r in rels)
            elif fmt == "memory":
                yield b"".join(formats.memory_relation(r) for r in rels)
            else:
                first = counts["relations"] == 0
                yield b"".join(formats.neo4j_relation(r, first and i == 0) for i, r in enumerate(rels))
            counts["relations"] += len(rels)
            after = rels[-1].gid
        after = None
        while fmt == "engram" and (eps := await episodes.page(tx, after, EXPORT_PAGE)):
            yield b"".join(formats.engram_episode(e) for e in eps)
            counts["episodes"] += len(eps)
            after = eps[-1].id
        after = None
        while history and (changes := await transfer.history_page(tx, after, EXPORT_PAGE, deleted=deleted)):
            yield b"".join(formats.engram_history(h) for h in changes)
            counts["history"] += len(changes)
            after = changes[-1].id
        if fmt == "engram":
            yield formats.end(**counts)
        elif fmt == "neo4j":
            yield formats.NEO4J_CLOSE

    # --- import ---------------------------------------------------------------------------------

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
        """Import `source` into the caller's tenant; see the module's docstring.

        `progress` is told where each pass has got to; `refused` hears of each refused line as it
        happens (the summary keeps the first KEEP_REFUSED)."""
        source.scan()
        fmt = fmt or formats.detect(source.head)
        if fmt is None:
            raise EngramError("invalid", "cannot tell the file's format from its first line: give it")
        run = _Run(self, who, source, fmt, on_existing, dry_run, progress, refused)
        with _calling(who):
            if dry_run:
                try:
                    async with self.tx(who) as tx:
                        run.dry_tx = tx
                        await run.passes()
                        raise _DryRun
                except _DryRun:
                    pass
            else:
                await run.passes()
        return run.summary


@contextmanager
def _calling(who: Principal) -> Iterator[None]:
    """An import's transactions end with audit rows, as a tool call's do (tool `import`)."""
    token = CALL.set(Call("import", who.subject, who.client_id, time.perf_counter(), who.tenant))
    try:
        yield
    finally:
        CALL.reset(token)


Work = Callable[[Tx, _Delta], Awaitable[None]]


class _Run:
    """One import: its passes over the file, its batches and its place in the file."""

    def __init__(
        self,
        service: Transfer,
        who: Principal,
        source: Source,
        fmt: Format,
        on_existing: OnExisting,
        dry_run: bool,
        progress: Progress | None,
        refused: Callable[[RefusedLine], None] | None,
    ) -> None:
        self.service, self.who, self.source, self.fmt = service, who, source, fmt
        self.on_existing, self.dry_run = on_existing, dry_run
        self.progress, self.on_refused = progress, refused
        self.actor = who.actor
        self.summary = ImportSummary(format=fmt, dry_run=dry_run, lines=source.lines)
        self.dry_tx: Tx | None = None
        self.at = (1, 0)  # (pass, line) the checkpoint holds
        self.end: Marker | None = None
        self.written = 0  # rows this run wrote; statistics were refreshed at `analyzed`
        self.analyzed = 0

    # -- the checkpoint

    async def _start(self) -> None:
        """Go on from where an unfinished import of this file stopped, or begin it anew."""
        if self.dry_run:
            return
        key = (self.source.digest, self.fmt, self.on_existing)
        async with self.service.tx(self.who) as tx:
            cp = await transfer.checkpoint(tx, *key, lock=True)
            if cp is not None and cp.finished_at is None:
                self.at = (cp.pass_, cp.line)
                self.summary = ImportSummary.model_validate(
                    {**cp.counts, "refused": cp.refused, "format": self.fmt, "dry_run": False}
                )
                self.summary.lines = self.source.lines
                self.summary.resumed_at_line = cp.line if cp.pass_ == 1 else self.source.lines + cp.line
                self.summary.complete, self.summary.stopped = False, None
                return
            await self._save(tx, self.at, finished=False, restart=True)

    async def _save(self, tx: Tx, at: tuple[int, int], *, finished: bool, restart: bool = False) -> None:
        counts = self.summary.model_dump(exclude={"refused", "format", "dry_run"})
        refused = [r.model_dump() for r in self.summary.refused]
        await transfer.save_checkpoint(
            tx,
            self.source.digest,
            self.fmt,
            self.on_existing,
            pass_=at[0],
            line=at[1],
            counts=counts,
            refused=refused,
            actor=self.actor,
            finished=finished,
            restart=restart,
        )

    async def _commit(self, at: tuple[int, int], work: Work | None) -> None:
        """Run one batch and move the checkpoint to `at` in its transaction; then count what it did."""
        if self.dry_run:
            delta = _Delta()
            if work is not None:
                assert self.dry_tx is not None
                await work(self.dry_tx, delta)
            self._counted(delta)
            self.at = at
            await self._analyze()
            return

        async def attempt() -> _Delta:
            delta = _Delta()
            async with self.service.tx(self.who) as tx:
                await transfer.bulk_session(tx)
                cp = await transfer.checkpoint(tx, self.source.digest, self.fmt, self.on_existing, lock=True)
                if cp is None or (cp.pass_, cp.line) != self.at or cp.finished_at is not None:
                    raise _Moved
                if work is not None:
                    await work(tx, delta)
                before = self.summary.model_copy(deep=True)
                _apply_delta(self.summary, delta)
                try:
                    await self._save(tx, at, finished=False)
                finally:
                    self.summary = before  # counted below, once committed
            return delta

        try:
            delta = await retrying(attempt)
        except _Moved:
            raise EngramError(
                "conflict", "another import of this file into this tenant is running; let it finish"
            ) from None
        self._counted(delta)
        self.at = at
        await self._analyze()

    async def _analyze(self, *, force: bool = False) -> None:
        """Refresh the planner's statistics once the tables have grown a lot since the last time
        (a new tenant's tables grow from nothing, and stale statistics turn lookups into scans)."""
        if not force and self.written - self.analyzed < max(20_000, self.analyzed):
            return
        self.analyzed = self.written
        if self.dry_run:
            assert self.dry_tx is not None
            await transfer.analyze(self.dry_tx)
            return
        async with self.service.tx(self.who) as tx:
            await transfer.analyze(tx)

    def _counted(self, delta: _Delta) -> None:
        c = delta.counts
        self.written += sum(c.get(k, 0) for k in ("entities.created", "observations_added", "relations.created"))
        _apply_delta(self.summary, delta)
        if self.on_refused is not None:
            for r in delta.refused:
                self.on_refused(r)

    # -- the passes

    async def passes(self) -> None:
        await self._start()
        try:
            for pass_ in (1, 2):
                if pass_ >= self.at[0]:
                    await self._pass(pass_)
        except EngramError as exc:
            if exc.code not in ("limit", "unavailable"):
                raise
            self.summary.stopped = f"{exc.code}: {exc.message}"
            return
        self._check_end()
        self.summary.complete = True
        if self.written > self.analyzed:
            await self._analyze(force=True)  # for the tools' queries from now on
        if not self.dry_run:
            async with self.service.tx(self.who) as tx:
                await self._save(tx, (2, self.source.lines), finished=True)

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
                records, last, pending = item
                if pass_ == 1:
                    await self._flush_entities(records, last, pending)  # type: ignore[arg-type]
                else:
                    await self._flush_rows(records, last)  # type: ignore[arg-type]
        finally:
            with contextlib.suppress(Exception):
                await ahead  # the reader thread is done with the generator before it is closed
            batches.close()
        if self.progress is not None:
            self.progress("entities" if pass_ == 1 else "relations", self.source.lines, self.source.lines)
        if pass_ == 1:
            if self.written > self.analyzed:
                await self._analyze(force=True)  # the relations pass looks its entities up
            if not self.dry_run:
                async with self.service.tx(self.who) as tx:
                    await self._save(tx, (2, 0), finished=False)
            self.at = (2, 0)

    def _batches(self, pass_: int, start: int) -> Iterator[tuple[list[Any], int, _Delta]]:
        """The pass's batches after line `start`: (records, the last line they cover, refusals found
        while reading them). Pass 1 takes entities (and refuses invalid lines), pass 2 relations and
        history; the last batch covers the file's last line (and may be empty)."""
        name = "entities" if pass_ == 1 else "relations"
        batch: list[Any] = []
        keys: set[str] = set()
        texts = read = 0
        last = start
        pending = _Delta()  # refusals found while reading, counted with the next batch
        with self.source.open() as stream:
            for record in formats.records(stream, self.fmt, self.source.head, entities=pass_ == 1):
                line = record.line
                if line <= start:
                    continue
                if pass_ == 1:
                    self._read(record, pending)
                    if isinstance(record, EntityRecord):
                        names = {record.name, *((record.id,) if record.id else ())}
                        full = len(batch) >= BATCH_ENTITIES or texts + len(record.observations) > BATCH_ROWS
                        if batch and (full or names & keys or len(pending.refused) >= BATCH_ROWS):
                            yield batch, last, pending  # a name again goes in after the first is in
                            pending, batch, keys, texts = _Delta(), [], set(), 0
                        batch.append(record)
                        keys |= names
                        texts += len(record.observations)
                    elif len(pending.refused) >= BATCH_ROWS:  # a file of refusals: keep them few in memory
                        yield batch, line, pending
                        pending, batch, keys, texts = _Delta(), [], set(), 0
                elif isinstance(record, RelationRecord | HistoryRecord | EpisodeRecord):
                    if batch and (len(batch) >= BATCH_ROWS or type(batch[0]) is not type(record)):
                        yield batch, last, pending
                        batch = []
                    batch.append(record)
                elif isinstance(record, Marker) and record.kind == "end":
                    self.end = record
                last = line
                read += 1
                if self.progress is not None and read % 256 == 0:
                    self.progress(name, line, self.source.lines)
        yield batch, self.source.lines, pending

    def _read(self, record: Any, pending: _Delta) -> None:
        """Pass 1 sees every line: it refuses the invalid ones and checks the engram markers."""
        if isinstance(record, Bad):
            if record.kind in ("entity", "relation", "history", "episode"):
                pending.add(f"records.{record.kind}")
            pending.refuse(record.line, "invalid", record.reason, "lines")
        elif isinstance(record, Marker):
            if record.kind == "end":
                self.end = record
            elif record.line != 1:
                pending.refuse(record.line, "invalid", "a header belongs on the first line", "lines")
        else:
            pending.add(f"records.{_KINDS[type(record)]}")

    def _check_end(self) -> None:
        if self.fmt != "engram":
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

    async def _flush_entities(self, batch: list[EntityRecord], last: int, pending: _Delta) -> None:
        async def work(tx: Tx, delta: _Delta) -> None:
            delta.counts.update(pending.counts)
            delta.refused += pending.refused
            if batch:
                await self._entities(tx, batch, delta)

        await self._commit((1, last), work if batch or pending.counts else None)

    async def _flush_rows(self, rows: list[RelationRecord | HistoryRecord | EpisodeRecord], last: int) -> None:
        async def work(tx: Tx, delta: _Delta) -> None:
            if isinstance(rows[0], RelationRecord):
                await self._relations(tx, rows, delta)  # type: ignore[arg-type]
            elif isinstance(rows[0], EpisodeRecord):
                await self._episodes(tx, rows, delta)  # type: ignore[arg-type]
            else:
                await self._history(tx, rows, delta)  # type: ignore[arg-type]

        await self._commit((2, last), work if rows else None)

    # -- the writes of one batch

    async def _entities(self, tx: Tx, batch: list[EntityRecord], delta: _Delta) -> None:
        live = [r.name for r in batch if r.deleted_at is None]
        if not self.dry_run:  # a dry run commits nothing, so it races no one (and its locks would pile up)
            await entities.lock_names(tx, live)
        ids = [r.id for r in batch if r.id]
        by_id = await entities.by_ids(tx, ids, lock=True) if ids else {}
        by_name = await entities.live_by_names(tx, live, lock=True)
        new: list[transfer.ImportedEntity] = []
        updates: list[entities.NewEntity] = []
        observations: list[transfer.ImportedObservation] = []
        events: list[Event] = []
        changed: set[str] = set()
        merging: list[str] = []
        named: list[tuple[str, list[str]]] = []  # (entity id, the aliases its line lists)
        merged_into: list[tuple[str, str]] = []
        for r in batch:
            row = by_id.get(r.id) if r.id else None
            if row is None and r.deleted_at is None:
                row = by_name.get(r.name)
            if row is None:
                eid = r.id or str(uuid.uuid4())
                new.append(
                    transfer.ImportedEntity(
                        id=eid,
                        name=r.name,
                        type=r.type or "",
                        **r.fields,
                        version=r.version,
                        created_at=r.created_at,
                        updated_at=r.updated_at,
                        created_by=r.created_by,
                        updated_by=r.updated_by,
                        deleted_at=r.deleted_at,
                    )
                )
                live_entity = r.deleted_at is None
                observations += [_observation(eid, o, live_entity) for o in r.observations]
                events.append(Event(eid, "created", {"name": r.name, "type": r.type, "import": self.fmt}))
                delta.add("entities.created")
                named.append((eid, r.aliases))
                if r.merged_into and r.deleted_at is not None:
                    merged_into.append((eid, r.merged_into))
                continue
            if self.on_existing == "error":
                delta.refuse(r.line, "conflict", f"entity {r.name!r} exists", "entities")
                continue
            if self.on_existing == "skip":
                delta.skip("entities", "exist")
                continue
            if (row.deleted_at is None) != (r.deleted_at is None):
                state = "deleted here, live in the file" if row.deleted_at else "live here, deleted in the file"
                delta.skip("entities", state)
                continue
            given = dict(r.fields)
            if r.type is not None:
                given["type"] = r.type
            if r.name != row.name:  # the same id under another name: a rename
                holder = by_name.get(r.name)
                if holder is not None and holder.id != row.id:
                    delta.refuse(r.line, "conflict", f"another entity is named {r.name!r}", "entities")
                    continue
                given["name"] = r.name
            values, changes = _apply(row, given)
            if changes:
                updates.append(entities.NewEntity(id=row.id, **values))
                events.append(Event(row.id, "updated", changes))
                changed.add(row.id)
            observations += [_observation(row.id, o, row.deleted_at is None) for o in r.observations]
            merging.append(row.id)
            named.append((row.id, r.aliases))
        await transfer.insert_entities(tx, new, self.actor)
        await transfer.set_merged_into(tx, merged_into)
        await entities.write_fields(tx, updates)
        added = await transfer.insert_observations(tx, observations, self.actor)
        events += [Event(eid, "observations_added", {"observations": texts}) for eid, texts in added.items()]
        created = {e.id for e in new}
        for eid, given in named:
            if not given:
                continue
            gained = await aliases.add(tx, eid, given, self.actor)
            delta.add("aliases_added", len(gained))
            if len(gained) < len(given):
                delta.add("skipped_because.aliases held already", len(given) - len(gained))
            if gained and eid not in created:
                events.append(Event(eid, "aliases_added", {"aliases": gained}))
                changed.add(eid)
        versions = await entities.touch(tx, (changed | set(added)) - created, self.actor)
        for eid in merging:
            delta.add("entities.merged" if eid in versions else "entities.unchanged")
        delta.add("observations_added", sum(len(t) for t in added.values()))
        await history.record(tx, events, self.actor)

    async def _relations(self, tx: Tx, batch: list[RelationRecord], delta: _Delta) -> None:
        # By id where the file gives ids (engram), by name for the rest and for ids not found here.
        ids = {i for r in batch for i in (r.source_id, r.target_id) if i}
        names = {n for r in batch for n, i in ((r.source, r.source_id), (r.target, r.target_id)) if not i}
        by_id, by_name = await transfer.ends(tx, sorted(ids), sorted(names))
        names = {
            n for r in batch for n, i in ((r.source, r.source_id), (r.target, r.target_id)) if i and i not in by_id
        }
        if names:
            by_name |= (await transfer.ends(tx, (), sorted(names)))[1]
        rows: list[tuple[str, str, dict[str, Any]]] = []
        ends: list[tuple[RelationRecord, transfer.End, transfer.End, str]] = []
        for r in batch:
            source = by_id.get(r.source_id) if r.source_id else None
            source = source or by_name.get(r.source)
            target = by_id.get(r.target_id) if r.target_id else None
            target = target or by_name.get(r.target)
            if source is None or target is None:
                missing = r.source if source is None else r.target
                delta.refuse(r.line, "dangling", f"no entity named {missing!r}", "relations")
                continue
            props = {"id": r.id or str(uuid.uuid4()), "type": r.type, **r.extra}
            props.setdefault("created_by", self.actor)
            rows.append((source.gid, target.gid, props))
            ends.append((r, source, target, props["id"]))
        created = await transfer.insert_relations(tx, rows)
        events = []
        for r, source, target, rid in ends:
            if rid in created:
                delta.add("relations.created")
                events.append(
                    Event(
                        source.id,
                        "related",
                        {"type": r.type, "from": source.name, "to": target.name, "import": self.fmt},
                        other_id=target.id,
                        relation_id=rid,
                    )
                )
            elif self.on_existing == "error":
                delta.refuse(r.line, "conflict", "the relation exists", "relations")
            elif self.on_existing == "skip":
                delta.skip("relations", "exist")
            else:
                delta.add("relations.unchanged")
        await history.record(tx, events, self.actor)

    async def _episodes(self, tx: Tx, batch: list[EpisodeRecord], delta: _Delta) -> None:
        """Episodes as the file gives them, each once (by when, text and source); their entities by
        id, else by name; an entity the tenant does not hold is left out of the episode's links."""
        held = await episodes.existing(tx, [(r.at, r.text, r.source) for r in batch])
        ids = sorted({i for r in batch for i, _, _ in r.entities if i})
        names = sorted({n for r in batch for _, n, _ in r.entities})
        by_id, by_name = await transfer.ends(tx, ids, names)
        new, seen = [], set(held)
        for r in batch:
            key = (r.at, r.text, r.source)
            if key in seen:
                if self.on_existing == "error":
                    delta.refuse(r.line, "conflict", "the episode exists", "episodes")
                else:
                    delta.skip("episodes", "exist")
                continue
            seen.add(key)
            involved: dict[str, str] = {}
            for ref, name, role in r.entities:
                end = (by_id.get(ref) if ref else None) or by_name.get(name)
                if end is None or end.deleted:
                    delta.add("skipped_because.episode entities not held")
                    continue
                involved.setdefault(end.id, role)
            new.append(
                NewEpisode(
                    content=r.text,
                    at=r.at,
                    source=r.source,
                    valid_from=r.valid_from,
                    valid_until=r.valid_until,
                    involved=tuple(involved.items()),
                    created_by=r.created_by,
                    created_at=r.created_at,
                    ended_why=r.ended_why,
                )
            )
        if new:
            await episodes.insert(tx, new, self.actor)
        delta.add("episodes.added", len(new))

    async def _history(self, tx: Tx, batch: list[HistoryRecord], delta: _Delta) -> None:
        added = await transfer.insert_history(
            tx,
            [
                transfer.ImportedChange(h.entity_id, h.other_id, h.relation_id, h.action, h.changes, h.actor, h.at)
                for h in batch
            ],
        )
        delta.add("history.added", added)
        delta.add("history.skipped", len(batch) - added)


def _observation(entity_id: str, o: formats.Obs, live: bool) -> transfer.ImportedObservation:
    """An observation as a file gives it (its record and interval, where the engram format has them)."""
    return transfer.ImportedObservation(
        entity_id, o.text, o.created_at, o.created_by, live, o.source, o.valid_from, o.valid_until
    )
