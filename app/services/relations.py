"""Relations: connect and disconnect, each batch one transaction with its history."""

from __future__ import annotations

from collections.abc import Sequence

from app.auth.principal import Principal
from app.services import models
from app.services.base import Service
from app.services.refs import resolve
from app.services.shapes import relation
from app.store import entities, history, relations
from app.store.database import Tx
from app.store.history import Event

Key = tuple[str, str, str]  # (source gid, target gid, type)


def _event(action: str, rel: relations.Relation) -> Event:
    return Event(
        rel.source_id,
        action,
        {"type": rel.type, "from": rel.source, "to": rel.target},
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
            results = await self.create(tx, items, who.actor, exact=exact)
        return models.ConnectResult(results=[models.ConnectItem(status=s, relation=relation(r)) for s, r in results])

    async def create(
        self, tx: Tx, items: Sequence[models.RelationIn], actor: str, *, exact: bool = False
    ) -> list[tuple[str, relations.Relation]]:
        """Create what is new; per item, ("created" | "exists", the relation). Both ends must exist."""
        refs = list(dict.fromkeys(r for i in items for r in (i.from_, i.to)))
        ends = await resolve(tx, refs, exact=exact)

        def key(i: models.RelationIn) -> Key:
            return ends[i.from_].gid, ends[i.to].gid, i.type

        batch = list({key(i): i for i in reversed(items)}.values())  # first occurrence of each key
        ids = await relations.insert(
            tx,
            [
                relations.NewRelation(ends[i.from_], ends[i.to], i.type, i.strength, i.notes, i.properties)
                for i in batch
            ],
            actor,
        )
        created = {key(i) for i, new_id in zip(batch, ids, strict=True) if new_id}
        stored = await relations.by_keys(tx, [key(i) for i in batch])
        await history.record(tx, [_event("related", stored[k]) for k in created], actor)
        if len(created) >= entities.BULK_ROWS:  # an import: the tables may have outgrown their statistics
            await entities.refresh_statistics(tx)
        out, seen = [], set()
        for i in items:
            k = key(i)
            out.append(("created" if k in created and k not in seen else "exists", stored[k]))
            seen.add(k)  # a repeat within the batch is not created twice
        return out

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
        found = await relations.by_ids(tx, list(ids)) if ids else []
        if keys:
            refs = list(dict.fromkeys(r for k in keys for r in (k.from_, k.to)))
            ends = await resolve(tx, refs, missing_ok=True, exact=exact)
            wanted = [(ends[k.from_].gid, ends[k.to].gid, k.type) for k in keys if k.from_ in ends and k.to in ends]
            found += (await relations.by_keys(tx, wanted)).values()
        found = list({r.id: r for r in found}.values())
        await relations.delete(tx, [r.id for r in found])
        await history.record(tx, [_event("unrelated", r) for r in found], actor)
        return found
