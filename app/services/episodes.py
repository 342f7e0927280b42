"""Episodes: writing raw memories with the entities they involve, listing, ending and removing them.

An episode involves its speakers and participants (references the writer gives, which must exist)
and every live entity whose name or alias its text mentions (mentions.py), so an entity finds its
episodes and recall lifts an episode when a question names one of them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime

import orjson

from app.auth.principal import Principal
from app.errors import EngramError
from app.services import refs
from app.services.base import Service
from app.services.budget import Budget
from app.services.filters import moment
from app.services.mentions import keys as name_keys
from app.services.recall_models import Episode as EpisodeModel
from app.services.recall_models import (
    EpisodeIn,
    EpisodePage,
    EpisodesChanged,
    EpisodesWritten,
)
from app.services.recall_models import Involved as InvolvedModel
from app.services.writer import Writer
from app.store import episodes, index, recall
from app.store.database import Tx
from app.store.episodes import EpisodeRow, NewEpisode

MENTIONED_MAX = 50  # entities one episode links by mention
MENTION_KEYS_MAX = 100_000  # name keys looked up for one call
# The source of every turn a hook keeps (hooks.py): reserved to hooks, so that no other writer can
# pass its words off as a captured turn.
HOOK_SOURCE = "claude-code:"


def episode_model(row: EpisodeRow) -> EpisodeModel:
    return EpisodeModel(
        id=row.id,
        text=row.content,
        at=row.at,
        source=row.source,
        created_by=row.created_by,
        created_at=row.created_at,
        valid_from=row.valid_from,
        valid_until=row.valid_until,
        ended_why=row.ended_why,
        entities=[InvolvedModel(id=e.id, name=e.name, type=e.type, role=role) for e, role in row.involved],
        private=row.owner is not None,
    )


class Episodes(Service):
    async def add(self, who: Principal, items: Sequence[EpisodeIn], source: str | None) -> EpisodesWritten:
        self.check_batch(len(items))
        for i, item in enumerate(items):
            field = f"episodes.{i}.source" if item.source else "source"
            if (item.source or source or who.client_id).startswith(HOOK_SOURCE):
                raise EngramError("invalid", f"`{field}`: sources starting `{HOOK_SOURCE}` are kept for hooks' turns")
            if item.private and who.operator:
                raise EngramError("invalid", f"`episodes.{i}.private`: the operator has no private memory")
        # Embedded before the transaction as the documents will read, when the speakers are given by name.
        texts = [index.episode_text(i.text, sorted(i.speakers)) for i in items]
        async with self.tx(who, texts=texts) as tx:
            rows = await self.write(tx, who, items, source)
        return EpisodesWritten(episodes=[episode_model(r) for r in rows], embeddings_pending=tx.pending)

    async def write(self, tx: Tx, who: Principal, items: Sequence[EpisodeIn], source: str | None) -> list[EpisodeRow]:
        """The episodes written in the caller's transaction (opened with their texts, as `add` does):
        the one way episodes are made, whoever asks (a tool, a hook)."""
        given = [r for i in items for r in (*i.speakers, *i.participants)]
        found = await refs.resolve(tx, list(dict.fromkeys(given)))
        keyed = [name_keys(i.text) for i in items]
        wanted = list(dict.fromkeys(k for ks in keyed for k in ks))[:MENTION_KEYS_MAX]
        mentioned: dict[str, list[str]] = {}
        for key, entity_id in await recall.named(tx, wanted, MENTIONED_MAX * len(items) * 4):
            mentioned.setdefault(key, []).append(entity_id)
        new = []
        for item, item_keys in zip(items, keyed, strict=True):
            involved: dict[str, str] = {}
            for ref in item.speakers:
                involved.setdefault(found[ref].id, "speaker")
            for ref in item.participants:
                involved.setdefault(found[ref].id, "participant")
            mentions = [e for k in item_keys for e in mentioned.get(k, ())]
            for entity_id in dict.fromkeys(mentions):
                if len(involved) >= len(item.speakers) + len(item.participants) + MENTIONED_MAX:
                    break
                involved.setdefault(entity_id, "mentioned")
            new.append(
                NewEpisode(
                    content=item.text,
                    at=item.at,
                    source=item.source or source or who.client_id,
                    valid_from=item.valid_from,
                    valid_until=item.valid_until,
                    involved=tuple(involved.items()),
                    owner=who.key if item.private else None,
                )
            )
        ids = await Writer(tx, who.actor).episodes(new)
        return await episodes.by_ids(tx, ids)

    async def list(
        self,
        who: Principal,
        *,
        entity: str | None,
        sources: Sequence[str] | None,
        since: datetime | None,
        until: datetime | None,
        as_of: datetime | None,
        include_invalid: bool,
        limit: int,
        cursor: str | None,
        budget: Budget[EpisodeModel] | None = None,
    ) -> EpisodePage:
        """Newest first by when they happened; as many as fit `budget`, the rest from the cursor."""
        when = moment(as_of, include_invalid)
        key = orjson.dumps([entity, sources, since, until, as_of, include_invalid], default=str)
        listing = f"episodes:{hashlib.sha256(key).hexdigest()[:16]}"
        async with self.tx(who, readonly=True) as tx:
            before = None
            if cursor is not None:
                position = self.cursors.decode(cursor, tx.tenant.id, listing)
                if not (isinstance(position, list) and len(position) == 2):
                    raise EngramError("invalid", "`cursor` is out of range")
                before = (datetime.fromisoformat(position[0]), int(position[1]))
            entity_id = (await refs.resolve(tx, [entity]))[entity].id if entity is not None else None
            rows = await episodes.listing(
                tx,
                entity_id=entity_id,
                sources=sources,
                since=since,
                until=until,
                when=when,
                limit=limit + 1,
                before=before,
            )
        page = [episode_model(r) for r in rows[:limit]]
        shown = budget.take(page) if budget else page
        next_cursor = None
        if len(rows) > len(shown):
            last = shown[-1]
            next_cursor = self.cursors.encode(tx.tenant.id, listing, [last.at.isoformat(), last.id])
        return EpisodePage(episodes=shown, next_cursor=next_cursor, omitted=len(page) - len(shown))

    async def end(self, who: Principal, ids: Sequence[int], at: datetime | None, why: str | None) -> EpisodesChanged:
        """End episodes at `at` (default now): reads from then on no longer see them."""
        self.check_batch(len(ids))
        async with self.tx(who) as tx:
            result = await episodes.end(tx, list(dict.fromkeys(ids)), at, why)
            if result.too_early:
                raise EngramError(
                    "invalid", f"episodes {result.too_early} begin at or after the given end", ids=result.too_early
                )
        return EpisodesChanged(ids=result.ended, unchanged=[i for i in dict.fromkeys(ids) if i not in result.ended])

    async def remove(self, who: Principal, ids: Sequence[int]) -> EpisodesChanged:
        """Delete episodes for good (with their search documents)."""
        self.check_batch(len(ids))
        async with self.tx(who) as tx:
            gone = await episodes.delete(tx, list(dict.fromkeys(ids)))
        return EpisodesChanged(ids=gone, unchanged=[i for i in dict.fromkeys(ids) if i not in gone])
