"""Relations: connect and disconnect, each batch one transaction with its history."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from app.auth.principal import Principal
from app.errors import EngramError
from app.services import models
from app.services.base import Service
from app.services.refs import resolve
from app.services.shapes import relation
from app.services.writer import Writer
from app.store import history, relations
from app.store.database import Tx
from app.store.entities import Provenance
from app.store.history import Event

Key = tuple[str, str, str]  # (source gid, target gid, type)


def _event(action: str, rel: relations.Relation, **more: Any) -> Event:
    return Event(
        rel.source_id,
        action,
        {"type": rel.type, "from": rel.source, "to": rel.target, **more},
        other_id=rel.target_id,
        relation_id=rel.id,
    )


class Relations(Service):
    async def connect(
        self, who: Principal, items: Sequence[models.RelationIn], *, exact: bool = False
    ) -> models.ConnectResult:
        """Create relations; with `exact`, ends are exact names only (the compatibility dialects' rule)."""
        self.check_batch(len(items))
        async with self.tx(who) as tx:
            results = await self.create(tx, items, who.actor, exact=exact, source=who.client_id)
        return models.ConnectResult(results=[models.ConnectItem(status=s, relation=relation(r)) for s, r in results])

    async def create(
        self, tx: Tx, items: Sequence[models.RelationIn], actor: str, *, exact: bool = False, source: str
    ) -> list[tuple[str, relations.Relation]]:
        """Create what is new; per item, ("created" | "exists", the relation). Both ends must exist.
        A relation whose stored one has ended is created again (it holds anew). Items without a
        source are recorded as coming from `source`."""
        refs = list(dict.fromkeys(r for i in items for r in (i.from_, i.to)))
        ends = await resolve(tx, refs, exact=exact)

        def key(i: models.RelationIn) -> Key:
            return ends[i.from_].gid, ends[i.to].gid, i.type

        made = await Writer(tx, actor, "merge").relations(
            [
                relations.NewRelation(
                    ends[i.from_],
                    ends[i.to],
                    i.type,
                    i.strength,
                    i.notes,
                    i.properties,
                    Provenance(i.source or source, i.valid_from, i.valid_until),
                )
                for i in items
            ]
        )
        stored = await relations.by_keys(tx, [key(i) for i in items])
        return [("created" if rid else "exists", stored[key(i)]) for i, rid in zip(items, made, strict=True)]

    async def disconnect(
        self, who: Principal, keys: Sequence[models.RelationKey], ids: Sequence[str], *, exact: bool = False
    ) -> models.DisconnectResult:
        self.check_batch(len(keys) + len(ids))
        async with self.tx(who) as tx:
            found = await self.remove(tx, keys, ids, who.actor, exact=exact)
        return models.DisconnectResult(
            removed=[relation(r) for r in found], not_found=len(keys) + len(ids) - len(found)
        )

    async def remove(
        self, tx: Tx, keys: Sequence[models.RelationKey], ids: Sequence[str], actor: str, *, exact: bool
    ) -> list[relations.Relation]:
        """Delete relations given by (from, to, type) or by id; ones that do not exist are skipped."""
        found = await self._found(tx, keys, ids, exact=exact)
        await relations.delete(tx, [r.id for r in found])
        await history.record(tx, [_event("unrelated", r) for r in found], actor)
        return found

    @staticmethod
    async def _found(
        tx: Tx, keys: Sequence[models.RelationKey], ids: Sequence[str], *, exact: bool
    ) -> list[relations.Relation]:
        """The stored relations given by (from, to, type) or by id, each once; missing ones are skipped."""
        found = await relations.by_ids(tx, list(ids)) if ids else []
        if keys:
            refs = list(dict.fromkeys(r for k in keys for r in (k.from_, k.to)))
            ends = await resolve(tx, refs, missing_ok=True, exact=exact)
            wanted = [(ends[k.from_].gid, ends[k.to].gid, k.type) for k in keys if k.from_ in ends and k.to in ends]
            found += (await relations.by_keys(tx, wanted)).values()
        return list({r.id: r for r in found}.values())

    async def invalidate(
        self,
        who: Principal,
        keys: Sequence[models.RelationKey],
        ids: Sequence[str],
        at: datetime | None,
        reason: str | None,
    ) -> models.InvalidatedRelations:
        """End relations without deleting them: those that hold past `at` (None: now) get
        valid_until = `at`; missing ones, and ones ended by then, are counted as unchanged. A relation
        that begins at or after `at` cannot end there: `invalid`, and nothing changes. History
        records the end and the reason in both entities' history."""
        self.check_batch(len(keys) + len(ids))
        async with self.tx(who) as tx:
            found = await self._found(tx, keys, ids, exact=False)
            result = await relations.end(tx, [r.id for r in found], at)
            if result.too_early:
                raise EngramError(
                    "invalid", "these relations begin at or after `at`, so they cannot end then", ids=result.too_early
                )
            ended = set(result.ended)
            more: dict[str, Any] = {} if at is None else {"valid_until": at.isoformat()}
            if reason is not None:
                more["reason"] = reason
            events = [_event("relation_invalidated", r, **more) for r in found if r.id in ended]
            await history.record(tx, events, who.actor)
            now = await relations.by_ids(tx, list(ended)) if ended else []
        order = {r.id: n for n, r in enumerate(found)}
        return models.InvalidatedRelations(
            invalidated=[relation(r) for r in sorted(now, key=lambda r: order[r.id])],
            unchanged=len(keys) + len(ids) - len(ended),
        )
