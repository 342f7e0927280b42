"""Entities and observations: upsert, read, update, soft delete, history, listing.

Every method is one transaction in the caller's tenant; every change writes its history rows in
that same transaction.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import orjson

from app.auth.principal import Principal
from app.errors import EngramError
from app.services import models
from app.services.base import Service
from app.services.budget import Budget
from app.services.filters import EntityFilters
from app.services.parts import EntityPart, entity_parts
from app.services.refs import choose, resolve
from app.services.shapes import entity, found, history_entry, relation, summary
from app.services.writer import EntityIn, FactIn, OnExisting, Writer, apply
from app.services.writer import changes as diff
from app.store import entities, history, index, listings, merges, relations
from app.store.database import Tx
from app.store.entities import EntityRow, NewFact, Provenance
from app.store.history import Event
from app.store.validity import NOW, When


def _fold(items: Sequence[models.EntityIn], source: str) -> list[EntityIn]:
    """One name's inputs of a batch, folded together: later fields win, observations concatenate,
    each with the interval of the first entry that gave it, from `source` unless the item says."""
    merged: dict[str, EntityIn] = {}
    for item in items:
        given = item.model_dump(exclude={"name", "observations", "valid_from", "valid_until"}, exclude_none=True)
        current = merged.setdefault(item.name, EntityIn(item.name, {}))
        props = {**current.fields.get("properties", {}), **given.pop("properties", {})}
        current.fields.update(given)
        if props:
            current.fields["properties"] = props
        held = {f.text for f in current.facts}
        current.facts += [
            FactIn(text, Provenance(source, item.valid_from, item.valid_until))
            for text in dict.fromkeys(item.observations)
            if text not in held
        ]
    return list(merged.values())


class Entities(Service):
    async def upsert(
        self, who: Principal, items: Sequence[models.EntityIn], on_existing: OnExisting, source: str | None = None
    ) -> models.UpsertResult:
        """Create or merge entities; their observations are recorded as coming from `source` (default:
        the caller's client id)."""
        self.check_batch(len(items), sum(len(i.observations) for i in items))
        folded = _fold(items, source or who.client_id)
        async with self.tx(who, texts=_texts(folded)) as tx:
            results = await self.write(tx, folded, on_existing, who.actor)
        return models.UpsertResult(results=results, embeddings_pending=tx.pending)

    @staticmethod
    async def write(tx: Tx, items: list[EntityIn], on_existing: OnExisting, actor: str) -> list[models.UpsertItem]:
        """Write one batch through the write path; with `on_existing` error, an existing name fails it."""
        done = await Writer(tx, actor, on_existing).entities(items)
        conflicts = sorted(i.name for i, w in zip(items, done, strict=True) if w.status == "conflict")
        if conflicts:
            raise EngramError("conflict", "entities with these names exist", names=conflicts)
        return [
            models.UpsertItem(
                name=i.name, id=w.id, status=w.status, version=w.version, observations_added=w.observations_added
            )
            for i, w in zip(items, done, strict=True)
        ]

    async def get(
        self,
        who: Principal,
        ref: str,
        *,
        include_relations: bool = True,
        include_history: bool = False,
        max_observations: int = 100,
        when: When = NOW,
        newest_first: bool = False,
        query: str | None = None,
        budget: Budget[EntityPart] | None = None,
    ) -> models.Entity:
        """One entity with the observations and relations that hold as `when` sees them; its
        observations oldest first, or `newest_first`, or nearest to `query` first (by meaning when
        the query can be embedded, else by words); of them, as many as fit `budget`."""
        cap = self.limits.max_results
        async with self.tx(who, readonly=True) as tx:
            order = relations.ObservationOrder(newest=newest_first, query=query)
            if query is not None:
                vector, _ = await self.indexer.query_vector(tx.tenant, query)
                if vector is not None:
                    order = relations.ObservationOrder(query=query, vector=vector, model=self.indexer.model)
            # One statement: every candidate for the reference with its observations and relations;
            # the rule picks the one meant (an exact match, most often the only candidate).
            found = await relations.detail(
                tx,
                ref,
                observations=max_observations,
                relations=cap + 1 if include_relations else None,
                when=when,
                order=order,
            )
            row = choose([ref], [d.entity for d in found])[ref]
            got = next(d for d in found if d.entity.row.id == row.id)
            entries = None
            if include_history:
                entries = [history_entry(h) for h in await history.of_entity(tx, row.id, 20, None)]
        rels = None if got.relations is None else [relation(r) for r in got.relations[:cap]]
        whole = entity(
            row,
            aliases=list(got.entity.aliases),
            observations=[o.text for o in got.observations],
            observations_total=got.observations_total,
            observation_records=[
                models.ObservationRecord.model_validate(o, from_attributes=True) for o in got.observations
            ],
            relations=rels,
            relations_truncated=got.relations is not None and len(got.relations) > cap,
            history=entries,
        )
        return whole if budget is None else _fitted(whole, budget)

    async def update(
        self, who: Principal, ref: str, patch: models.EntityPatch, expected_version: int | None
    ) -> models.ChangeResult:
        async with self.tx(who) as tx:
            row = (await resolve(tx, [ref], lock=True))[ref]
            if expected_version is not None and row.version != expected_version:
                raise EngramError(
                    "conflict",
                    f"{row.name!r} is at version {row.version}, not {expected_version}; read it again",
                    current_version=row.version,
                )
            fields = patch.model_dump(exclude={"unset_properties", "clear"}, exclude_none=True)
            fields |= {f: "" if f == "description" else None for f in patch.clear}
            values, _ = apply(row, fields)
            values["properties"] = {k: v for k, v in values["properties"].items() if k not in patch.unset_properties}
            changes = diff(row, values)
            if not changes:
                return models.ChangeResult(changed=[], unchanged=[ref])
            if "name" in changes:
                await entities.lock_names(tx, [values["name"]])
                if await entities.live_names_taken(tx, [values["name"]]):
                    raise EngramError("conflict", f"another entity is already named {values['name']!r}")
            await entities.write_fields(tx, [entities.NewEntity(id=row.id, **values)])
            version = (await entities.touch(tx, [row.id], who.actor))[row.id]
            await history.record(tx, [Event(row.id, "updated", changes)], who.actor)
        return models.ChangeResult(changed=[models.Changed(id=row.id, name=values["name"], version=version)])

    async def set_deleted(self, who: Principal, refs: Sequence[str], deleted: bool) -> models.ChangeResult:
        """Soft delete (hides the entity and its relations from every read) or restore."""
        self.check_batch(len(refs))
        async with self.tx(who) as tx:
            if deleted:
                rows = list((await resolve(tx, list(dict.fromkeys(refs)), lock=True)).values())
            else:
                rows = await self._deleted(tx, refs)
                taken = await entities.live_names_taken(tx, [r.name for r in rows])
                if taken:
                    raise EngramError("conflict", "live entities now hold these names; rename them first", names=taken)
            versions = await entities.set_deleted(tx, [r.id for r in rows], deleted, who.actor)
            action = "deleted" if deleted else "restored"
            await history.record(tx, [Event(eid, action) for eid in versions], who.actor)
        return models.ChangeResult(
            changed=[models.Changed(id=r.id, name=r.name, version=versions[r.id]) for r in rows if r.id in versions],
            unchanged=[r.id for r in rows if r.id not in versions],
        )

    @staticmethod
    async def _deleted(tx: Tx, ids: Sequence[str]) -> list[EntityRow]:
        bad = [i for i in ids if not entities.is_uuid(i)]
        if bad:
            raise EngramError("invalid", "restore takes entity ids", ids=bad)
        found = await entities.by_ids(tx, list(dict.fromkeys(ids)), lock=True)
        missing = [i for i in ids if i not in found]
        if missing:
            raise EngramError("not_found", "no entities with these ids", ids=missing)
        merged = await merges.merged_into(tx, list(found))
        if merged:  # their observations and relations are the survivor's now
            raise EngramError(
                "conflict", "these entities were merged into others; they cannot come back", merged=merged
            )
        return list(found.values())

    async def change_observations(
        self, who: Principal, items: Sequence[models.ObservationsIn], *, add: bool
    ) -> models.ObservationsResult:
        """Add (items may give their interval and source: `models.NewObservations`) or remove observations."""
        self.check_batch(sum(len(i.observations) for i in items))
        async with self.tx(who) as tx:
            found = await resolve(tx, list(dict.fromkeys(i.entity for i in items)), lock=True)
            if add:
                facts = [NewFact(found[i.entity].id, o, _provenance(who, i)) for i in items for o in i.observations]
                done = await entities.add_observations(tx, facts, who.actor)
            else:
                done = await entities.remove_observations(
                    tx, [(found[i.entity].id, o) for i in items for o in i.observations]
                )
            versions = await self._recorded(tx, done, add, who.actor)
        return self._changed(found, items, done, versions)

    async def invalidate_observations(
        self, who: Principal, items: Sequence[models.ObservationsIn], at: datetime | None, reason: str | None
    ) -> models.ObservationsResult:
        """End facts without deleting them: each given text that holds past `at` (None: now) gets
        valid_until = `at`; texts not stored, or ended by then, are left alone. A fact that begins at
        or after `at` cannot end there: `invalid`, and nothing changes. History records the end and
        the reason."""
        self.check_batch(sum(len(i.observations) for i in items))
        async with self.tx(who) as tx:
            found = await resolve(tx, list(dict.fromkeys(i.entity for i in items)), lock=True)
            pairs = [(found[i.entity].id, o) for i in items for o in i.observations]
            result = await entities.end_observations(tx, pairs, at)
            if result.too_early:
                raise EngramError(
                    "invalid",
                    "these observations begin at or after `at`, so they cannot end then",
                    observations=[text for _, text in result.too_early][:20],
                )
            versions = await entities.touch(tx, result.ended, who.actor)
            until = None if at is None else at.isoformat()
            await history.record(
                tx,
                [
                    Event(e, "observations_invalidated", _ended({"observations": t}, until, reason))
                    for e, t in result.ended.items()
                ],
                who.actor,
            )
        return self._changed(found, items, result.ended, versions)

    @staticmethod
    def _changed(
        found: dict[str, EntityRow],
        items: Sequence[models.ObservationsIn],
        done: dict[str, list[str]],
        versions: dict[str, int],
    ) -> models.ObservationsResult:
        rows = {r.id: r for r in found.values()}
        return models.ObservationsResult(
            results=[
                models.ObservationsChange(
                    entity_id=eid,
                    name=rows[eid].name,
                    observations=done.get(eid, []),
                    version=versions.get(eid, rows[eid].version),
                )
                for eid in dict.fromkeys(found[i.entity].id for i in items)
            ]
        )

    async def change_observations_by_name(
        self, who: Principal, items: Sequence[tuple[str, Sequence[str]]], *, add: bool, missing_ok: bool
    ) -> list[list[str] | None]:
        """Observations by exact entity name (the compatibility dialects' rule); per item, what changed.

        An unknown name fails the call, or with `missing_ok` its item changes nothing and reports None.
        """
        self.check_batch(sum(len(texts) for _, texts in items))
        async with self.tx(who) as tx:
            found = await entities.live_by_names(tx, sorted({name for name, _ in items}), lock=True)
            missing = [name for name, _ in items if name not in found]
            if missing and not missing_ok:
                raise EngramError("not_found", f"Entity with name {missing[0]} not found", names=missing)
            pairs = [(found[name].id, t) for name, texts in items if name in found for t in texts]
            if add:
                given = Provenance(who.client_id)
                done = await entities.add_observations(tx, [NewFact(e, t, given) for e, t in pairs], who.actor)
            else:
                done = await entities.remove_observations(tx, pairs)
            await self._recorded(tx, done, add, who.actor)
        out: list[list[str] | None] = []
        claimed: set[tuple[str, str]] = set()
        for name, texts in items:  # report each change once, against the first item that asked for it
            if name not in found:
                out.append(None)
                continue
            eid = found[name].id
            mine = [t for t in dict.fromkeys(texts) if t in done.get(eid, ()) and (eid, t) not in claimed]
            claimed.update((eid, t) for t in mine)
            out.append(mine)
        return out

    async def put(self, who: Principal, items: Sequence[tuple[str, str, Sequence[str]]]) -> None:
        """Create each (name, type, observations), or make an existing one exactly that (type and observations)."""
        self.check_batch(len(items), sum(len(obs) for _, _, obs in items))
        given = Provenance(who.client_id)
        folded = [
            EntityIn(name, {"type": type_}, [FactIn(o, given) for o in dict.fromkeys(obs)])
            for name, type_, obs in items
        ]
        async with self.tx(who, texts=_texts(folded)) as tx:
            await Writer(tx, who.actor, "merge").entities(folded)
            found = await entities.live_by_names(tx, [m.name for m in folded])
            stored = await entities.observations(tx, [r.id for r in found.values()], 100_000)
            stale = [
                (found[m.name].id, text)
                for m in folded
                for text in stored[found[m.name].id].texts
                if text not in {f.text for f in m.facts}
            ]
            if stale:
                await self._recorded(tx, await entities.remove_observations(tx, stale), False, who.actor)

    @staticmethod
    async def _recorded(tx: Tx, done: dict[str, list[str]], add: bool, actor: str) -> dict[str, int]:
        """The versions and history of observations added or removed; returns the new versions."""
        versions = await entities.touch(tx, done, actor)
        action = "observations_added" if add else "observations_removed"
        await history.record(tx, [Event(e, action, {"observations": t}) for e, t in done.items()], actor)
        return versions

    async def delete_by_name(self, who: Principal, names: Sequence[str]) -> None:
        """Soft-delete the live entities with exactly these names; unknown names are ignored."""
        self.check_batch(len(names))
        async with self.tx(who) as tx:
            found = await entities.live_by_names(tx, sorted(set(names)), lock=True)
            versions = await entities.set_deleted(tx, [r.id for r in found.values()], True, who.actor)
            await history.record(tx, [Event(eid, "deleted") for eid in versions], who.actor)

    async def history(self, who: Principal, ref: str, limit: int, cursor: str | None) -> models.HistoryPage:
        async with self.tx(who, readonly=True) as tx:
            # A deleted entity's history stays readable by its id.
            by_id = await entities.by_ids(tx, [ref]) if entities.is_uuid(ref) else {}
            row = by_id.get(ref) or (await resolve(tx, [ref]))[ref]
            before = self.cursors.decode(cursor, tx.tenant.id, f"history:{row.id}") if cursor else None
            rows = await history.of_entity(tx, row.id, limit + 1, before)
            more = len(rows) > limit
            next_cursor = self.cursors.encode(tx.tenant.id, f"history:{row.id}", rows[limit - 1].id) if more else None
        return models.HistoryPage(
            entity=summary(row), entries=[history_entry(h) for h in rows[:limit]], next_cursor=next_cursor
        )

    async def find(
        self, who: Principal, filters: EntityFilters, sort: str, limit: int, cursor: str | None
    ) -> models.EntityPage:
        async with self.tx(who, readonly=True) as tx:
            listing = f"find:{sort}:{hash_filters(filters)}"
            after = tuple(self.cursors.decode(cursor, tx.tenant.id, listing)) if cursor else None
            rows, total = await listings.find(
                tx,
                sort=sort,
                limit=limit + 1,
                after=after,
                **filters.store_args(),
            )
            next_cursor = None
            if len(rows) > limit:
                last = rows[limit - 1]
                next_cursor = self.cursors.encode(tx.tenant.id, listing, [last.sort_key, last.row.id])
        return models.EntityPage(entities=[found(f) for f in rows[:limit]], total=total, next_cursor=next_cursor)


def _provenance(who: Principal, item: models.ObservationsIn) -> Provenance:
    """The source and interval an item of observations gives (`models.NewObservations`), the source
    defaulting to the caller's client id."""
    if isinstance(item, models.NewObservations):
        return Provenance(item.source or who.client_id, item.valid_from, item.valid_until)
    return Provenance(who.client_id)


def _ended(changes: dict[str, Any], until: str | None, reason: str | None) -> dict[str, Any]:
    """What history records of an invalidation: what ended, when (absent: at the change's own time), why."""
    if until is not None:
        changes["valid_until"] = until
    if reason is not None:
        changes["reason"] = reason
    return changes


def _texts(folded: Sequence[EntityIn]) -> list[str]:
    """The search texts an upsert will most likely index, to embed before its transaction."""
    return [
        t
        for m in folded
        for t in index.texts_of(m.name, m.fields.get("type"), m.fields.get("description"), [f.text for f in m.facts])
    ]


def hash_filters(filters: EntityFilters) -> str:
    """A short fingerprint of a listing's filters, so a cursor only continues the listing it came from."""
    return hashlib.sha256(orjson.dumps(filters, default=str)).hexdigest()[:16]


def _fitted(whole: models.Entity, budget: Budget[EntityPart]) -> models.Entity:
    """The entity with as many of its facts, then relations, then changes as fit `budget` (its own
    fields first: a description too long for the budget is shortened)."""
    kept = budget.take(entity_parts(whole))
    head = kept[0]
    assert isinstance(head, models.Entity)
    records = [p for p in kept if isinstance(p, models.ObservationRecord)]
    rels = [p for p in kept if isinstance(p, models.Relation)]
    return head.model_copy(
        update={
            "observations": [o.text for o in records],
            "observation_records": records,
            "relations": None if whole.relations is None else rels,
            "relations_truncated": whole.relations_truncated or len(rels) < len(whole.relations or []),
            "history": None if whole.history is None else [p for p in kept if isinstance(p, models.HistoryEntry)],
        }
    )
