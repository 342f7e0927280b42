"""The one write path of entities, their observations and relations: a batch into a transaction.

The tools (`upsert_entities`, `connect_entities`, both dialects' creates, `add_episodes`) and imports write through
a `Writer`, so every write rule lives here once: names locked, rows matched (a file's id first,
then the live name) and locked, `on_existing` applied per item, fields merged, facts written with
their provenance, aliases, history, fresh planner statistics after a bulk write; the store's
inserts account for growth. It reports what it did per item; the caller makes that a tool's answer
or an import's summary.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from app.store import aliases, entities, episodes, history, merges, relations
from app.store.database import Tx
from app.store.entities import FRESH, EntityRow, NewEntity, NewFact, Provenance, Stamps
from app.store.episodes import NewEpisode
from app.store.history import Event
from app.store.relations import NewRelation

OnExisting = Literal["merge", "skip", "error"]
Status = Literal["created", "updated", "unchanged", "skipped", "conflict"]


@dataclass(frozen=True, slots=True)
class FactIn:
    """An observation to write, with its provenance and (from a file) its record."""

    text: str
    provenance: Provenance = field(default_factory=Provenance)
    created_at: datetime | None = None
    created_by: str | None = None


@dataclass(slots=True)
class EntityIn:
    """One entity of a batch: the fields given (`properties` merge into the stored ones), its facts,
    and what a file adds (its id, record, aliases, the survivor it was merged into)."""

    name: str
    fields: dict[str, Any]
    facts: list[FactIn] = field(default_factory=list)
    id: str | None = None
    stamps: Stamps = FRESH
    aliases: list[str] = field(default_factory=list)
    merged_into: str | None = None


@dataclass(frozen=True, slots=True)
class Written:
    """What a batch did with one entity."""

    status: Status
    id: str
    version: int
    observations_added: int = 0
    aliases_added: int = 0
    aliases_held: int = 0  # aliases the tenant gives to some entity already
    why: str = ""  # of a skip or a conflict


@dataclass(slots=True)
class Plan:
    """What a batch of entities will write, decided before any write (`Writer.plan`)."""

    new: list[NewEntity] = field(default_factory=list)
    updates: list[NewEntity] = field(default_factory=list)  # stored entities' fields after the merge
    facts: list[NewFact] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    changed: set[str] = field(default_factory=set)  # stored entities whose fields change
    merged_into: list[tuple[str, str]] = field(default_factory=list)  # (deleted entity, survivor), from a file
    aliases: list[tuple[str, str]] = field(default_factory=list)  # (entity id, alias) to give, in order
    # Per item: created, unchanged (a merge; updated if the writes move its version), skipped or conflict.
    decisions: list[Written] = field(default_factory=list)


def apply(row: EntityRow, fields: dict[str, Any]) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """The entity's fields after `fields` are set (properties merge), and the changes as {field: [old, new]}."""
    new = {f: getattr(row, f) for f in entities.FIELDS}
    for f, value in fields.items():
        new[f] = {**row.properties, **value} if f == "properties" else value
    return new, changes(row, new)


def changes(row: EntityRow, values: dict[str, Any]) -> dict[str, list[Any]]:
    """{field: [old, new]} for the writable fields whose value differs from the row's."""
    old = {f: getattr(row, f) for f in entities.FIELDS}
    return {f: [old[f], values[f]] for f in entities.FIELDS if values[f] != old[f]}


class Writer:
    """Writes batches into one transaction as `actor`.

    `origin` names an import's file format: history says so, and a fact or relation the tenant
    holds already stays as it is even where it has ended (a tool's write makes it hold anew).
    `lock_names` serialises writers of the same new names; a dry run, which commits nothing, may
    do without."""

    def __init__(
        self,
        tx: Tx,
        actor: str,
        on_existing: OnExisting = "merge",
        *,
        origin: str | None = None,
        lock_names: bool = True,
    ) -> None:
        self.tx, self.actor, self.on_existing = tx, actor, on_existing
        self.origin = {"import": origin} if origin else {}
        self.reopen = origin is None
        self.lock_names = lock_names

    async def entities(self, items: Sequence[EntityIn]) -> list[Written]:
        """Create or merge `items` (their names and ids unique within the batch)."""
        live = [i.name for i in items if i.stamps.deleted_at is None]
        if self.lock_names:
            await entities.lock_names(self.tx, live)
        ids = [i.id for i in items if i.id]
        by_id = await entities.by_ids(self.tx, ids, lock=True) if ids else {}
        by_name = await entities.live_by_names(self.tx, live, lock=True)
        return await self._apply(self.plan(items, by_id, by_name))

    def plan(self, items: Sequence[EntityIn], by_id: dict[str, EntityRow], by_name: dict[str, EntityRow]) -> Plan:
        """What the batch will write, decided from the stored rows its items match (`by_id`: by a
        file's id, deleted ones too; `by_name`: live ones by name), before anything is written."""
        plan = Plan()
        for item in items:
            row = by_id.get(item.id) if item.id else None
            if row is None and item.stamps.deleted_at is None:
                row = by_name.get(item.name)
            if row is None:
                decided = self._create(plan, item)
            else:
                decided = self._existing(item, row, by_name) or self._merge(plan, item, row)
            plan.decisions.append(decided)
            if item.aliases and decided.status in ("created", "unchanged"):
                plan.aliases += [(decided.id, a) for a in item.aliases]
        return plan

    def _create(self, plan: Plan, item: EntityIn) -> Written:
        eid = item.id or str(uuid.uuid4())
        plan.new.append(NewEntity(id=eid, name=item.name, **{"type": "", **item.fields}, stamps=item.stamps))
        plan.facts += _facts(eid, item.facts, item.stamps.deleted_at is None)
        plan.events.append(Event(eid, "created", {"name": item.name, "type": item.fields.get("type"), **self.origin}))
        if item.merged_into and item.stamps.deleted_at is not None:
            plan.merged_into.append((eid, item.merged_into))
        return Written("created", eid, item.stamps.version)

    @staticmethod
    def _merge(plan: Plan, item: EntityIn, row: EntityRow) -> Written:
        """A merge into the stored row: `unchanged` until its writes move the entity's version."""
        given = dict(item.fields)
        if item.name != row.name:  # the same id under another name: a rename
            given["name"] = item.name
        values, diff = apply(row, given)
        if diff:
            plan.updates.append(NewEntity(id=row.id, **values))
            plan.events.append(Event(row.id, "updated", diff))
            plan.changed.add(row.id)
        plan.facts += _facts(row.id, item.facts, row.deleted_at is None)
        return Written("unchanged", row.id, row.version)

    async def _apply(self, plan: Plan) -> list[Written]:
        """The plan's writes, its history and versions; what each item did, counted."""
        tx, actor = self.tx, self.actor
        await entities.insert(tx, plan.new, actor)
        await merges.set_merged_into(tx, plan.merged_into)
        await entities.write_fields(tx, plan.updates)
        added = await entities.add_observations(tx, plan.facts, actor, reopen=self.reopen)
        events = plan.events + [Event(e, "observations_added", {"observations": t}) for e, t in added.items()]
        fresh = {e.id for e in plan.new}
        gained = await aliases.add_many(tx, plan.aliases, actor)
        kept = [e for e in dict.fromkeys(e for e, _ in plan.aliases) if e in gained and e not in fresh]
        events += [Event(e, "aliases_added", {"aliases": gained[e]}) for e in kept]
        versions = await entities.touch(tx, (plan.changed | set(kept) | set(added)) - fresh, actor)
        await history.record(tx, events, actor)
        if len(plan.new) >= entities.BULK_ROWS:  # the tables may have outgrown their planner statistics
            await entities.refresh_statistics(tx)
        given = Counter(e for e, _ in plan.aliases)
        return [
            _counted(w, versions, len(added.get(w.id, ())), given[w.id], gained.get(w.id, [])) for w in plan.decisions
        ]

    def _existing(self, item: EntityIn, row: EntityRow, by_name: dict[str, EntityRow]) -> Written | None:
        """What `on_existing` and the stored row decide for an item that matched it; None: merge."""
        if self.on_existing == "error":
            return Written("conflict", row.id, row.version, why=f"entity {item.name!r} exists")
        if self.on_existing == "skip":
            return Written("skipped", row.id, row.version, why="exist")
        if (row.deleted_at is None) != (item.stamps.deleted_at is None):
            why = "deleted here, live in the file" if row.deleted_at else "live here, deleted in the file"
            return Written("skipped", row.id, row.version, why=why)
        holder = by_name.get(item.name)
        if holder is not None and holder.id != row.id:
            return Written("conflict", row.id, row.version, why=f"another entity is named {item.name!r}")
        return None

    async def episodes(self, items: Sequence[NewEpisode]) -> list[int]:
        """Store episodes with the entities they involve; their ids, in the items' order."""
        ids = await episodes.insert(self.tx, items, self.actor)
        if len(items) >= entities.BULK_ROWS:
            await entities.refresh_statistics(self.tx)
        return ids

    async def relations(self, items: Sequence[NewRelation]) -> list[str | None]:
        """Create relations between resolved ends; per item, the id of the relation it created (or,
        for a tool's write, made hold anew), or None where it existed (or repeats an earlier item)."""
        first: dict[tuple[str, str, str], int] = {}
        for n, i in enumerate(items):
            first.setdefault((i.source.gid, i.target.gid, i.type), n)
        batch = [items[n] for n in first.values()]
        ids = await relations.insert(self.tx, batch, self.actor, reopen=self.reopen)
        made = dict(zip(first.values(), ids, strict=True))
        events = [
            Event(
                i.source.id,
                "related",
                {"type": i.type, "from": i.source.name, "to": i.target.name, **self.origin},
                other_id=i.target.id,
                relation_id=rid,
            )
            for i, rid in zip(batch, ids, strict=True)
            if rid is not None
        ]
        await history.record(self.tx, events, self.actor)
        if len(events) >= entities.BULK_ROWS:
            await entities.refresh_statistics(self.tx)
        return [made.get(n) for n in range(len(items))]


def _counted(w: Written, versions: dict[str, int], facts: int, aliases: int, gained: list[str]) -> Written:
    """What an item did once written: a merge is `updated` if its entity's version moved on."""
    if w.status not in ("created", "unchanged"):  # skipped or refused: as decided
        return w
    status: Status = "updated" if w.id in versions else w.status
    version = versions.get(w.id, w.version)
    return Written(
        status, w.id, version, observations_added=facts, aliases_added=len(gained), aliases_held=aliases - len(gained)
    )


def _facts(entity_id: str, facts: Sequence[FactIn], live: bool) -> list[NewFact]:
    return [NewFact(entity_id, f.text, f.provenance, f.created_at, f.created_by, live) for f in facts]
