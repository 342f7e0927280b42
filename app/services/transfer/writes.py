"""The writes of one import batch, each through the same code as the tools' writes (the writer,
the store's episode insert); what they did goes into the batch's `Done`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from app.ids import SYSTEM
from app.services.transfer.format import Format
from app.services.transfer.records import EntityRecord, EpisodeRecord, HistoryRecord, RelationRecord
from app.services.transfer.summary import Done
from app.services.writer import OnExisting, Writer
from app.store import episodes, transfer
from app.store.database import Tx
from app.store.relations import NewRelation

_OTHERS = "a private episode of another principal: only the operator's `engram import` keeps it"


@dataclass(frozen=True, slots=True)
class BatchWrites:
    actor: str
    on_existing: OnExisting
    fmt: Format
    dry_run: bool
    viewer: str  # whose private memory the import writes to (SYSTEM: the operator's, which keeps every owner)

    def _writer(self, tx: Tx) -> Writer:
        # A dry run commits nothing, so it races no one (and its name locks would pile up).
        return Writer(tx, self.actor, self.on_existing, origin=self.fmt, lock_names=not self.dry_run)

    async def entities(self, tx: Tx, batch: list[EntityRecord], done: Done) -> None:
        written = await self._writer(tx).entities([r.entity for r in batch])
        for r, w in zip(batch, written, strict=True):
            if w.status == "conflict":
                done.refuse(r.line, "conflict", w.why, done.entities)
            elif w.status == "skipped":
                done.skip(done.entities, "entities", w.why)
            else:
                done.entities.count(w.status)
                done.observations_added += w.observations_added
                done.aliases_added += w.aliases_added
                if w.aliases_held:
                    done.skipped_because["aliases held already"] += w.aliases_held

    async def relations(self, tx: Tx, batch: list[RelationRecord], done: Done) -> None:
        """Ends by id where the file gives ids (engram), by name for the rest and for ids not found here."""
        ids = {i for r in batch for i in (r.source_id, r.target_id) if i}
        names = {n for r in batch for n, i in ((r.source, r.source_id), (r.target, r.target_id)) if not i}
        by_id, by_name = await transfer.ends(tx, sorted(ids), sorted(names))
        names = {
            n for r in batch for n, i in ((r.source, r.source_id), (r.target, r.target_id)) if i and i not in by_id
        }
        if names:
            by_name |= (await transfer.ends(tx, (), sorted(names)))[1]
        found: list[tuple[RelationRecord, NewRelation]] = []
        for r in batch:
            source = (by_id.get(r.source_id) if r.source_id else None) or by_name.get(r.source)
            target = (by_id.get(r.target_id) if r.target_id else None) or by_name.get(r.target)
            if source is None or target is None:
                missing = r.source if source is None else r.target
                done.refuse(r.line, "dangling", f"no entity named {missing!r}", done.relations)
                continue
            found.append((r, r.between(source, target)))
        made = await self._writer(tx).relations([n for _, n in found])
        for (r, _), rid in zip(found, made, strict=True):
            if rid is not None:
                done.relations.created += 1
            elif self.on_existing == "error":
                done.refuse(r.line, "conflict", "the relation exists", done.relations)
            elif self.on_existing == "skip":
                done.skip(done.relations, "relations", "exist")
            else:
                done.relations.unchanged += 1

    async def episodes(self, tx: Tx, batch: list[EpisodeRecord], done: Done) -> None:
        """Episodes as the file gives them, each once (by when, text and source); their entities by
        id, else by name; an entity the tenant does not hold is left out of the episode's links."""
        held = await episodes.existing(tx, [_key(r) for r in batch])
        ids = sorted({i for r in batch for i, _, _ in r.entities if i})
        names = sorted({n for r in batch for _, n, _ in r.entities})
        by_id, by_name = await transfer.ends(tx, ids, names)
        new, seen = [], set(held)
        for r in batch:
            owner = r.episode.owner
            if owner is not None and owner != self.viewer and self.viewer != SYSTEM:
                done.refuse(r.line, "forbidden", _OTHERS, done.episodes)
                continue
            if _key(r) in seen:
                if self.on_existing == "error":
                    done.refuse(r.line, "conflict", "the episode exists", done.episodes)
                else:
                    done.skip(done.episodes, "episodes", "exist")
                continue
            seen.add(_key(r))
            involved: dict[str, str] = {}
            for ref, name, role in r.entities:
                end = (by_id.get(ref) if ref else None) or by_name.get(name)
                if end is None or end.deleted:
                    done.skipped_because["episode entities not held"] += 1
                    continue
                involved.setdefault(end.id, role)
            new.append(replace(r.episode, involved=tuple(involved.items())))
        if new:
            await self._writer(tx).episodes(new)
        done.episodes.added += len(new)

    async def history(self, tx: Tx, batch: list[HistoryRecord], done: Done) -> None:
        added = await transfer.insert_history(tx, [h.change for h in batch])
        done.history.added += added
        done.history.skipped += len(batch) - added


def _key(r: EpisodeRecord) -> tuple[datetime, str, str | None]:
    """What makes an episode of a file the same as one held: when, text and source."""
    assert r.episode.at is not None  # a file's episode always says when (the reader refuses it otherwise)
    return (r.episode.at, r.episode.content, r.episode.source)
