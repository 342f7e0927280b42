"""Search by meaning and by words: three rankings of a tenant's entities, fused by reciprocal rank.

- semantic: the query's embedding against every indexed text (entity and each observation);
- words: full-text search over the same texts (web-search syntax);
- names: trigram similarity of entity names, for typos and partial names (short queries only).

Each ranking is of texts; an entity takes the place of its best text. The rankings are fused by
`ranking.fuse` (reciprocal rank weighted by each row's score), each counting the same.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import orjson

from app.auth.principal import Principal
from app.services.budget import Budget
from app.services.filters import Scope
from app.services.ranking import CANDIDATES, Fused, QueryVector, Ranker, fuse, pending_note, rounded, strict
from app.services.search_models import Match, Mode, Scores, SearchHit, SearchResult
from app.services.shapes import summary
from app.store import entities, rankings
from app.store.database import Tx
from app.store.rankings import Ranked

NAME_QUERY_MAX_WORDS = 3  # longer queries are questions, not names
WEIGHTS = {"semantic": 1.0, "keyword": 1.0, "name": 1.0}  # each ranking counts the same


@dataclass(frozen=True, slots=True)
class Query:
    text: str
    mode: Mode = "hybrid"
    scope: Scope = field(default_factory=Scope)
    min_score: float | None = None
    limit: int = 10
    cursor: str | None = None
    budget: Budget[SearchHit] | None = None  # the hits that fit the caller's tokens; the rest from `next_cursor`

    def fingerprint(self) -> str:
        s = self.scope
        kinds = [list(s.types) if s.types else None, s.area, s.topic, s.min_certainty, s.max_certainty]
        facts = [list(s.sources) if s.sources else None, s.since, s.until, *s.when.params()]
        key = orjson.dumps([self.text, self.mode, *kinds, *facts, self.min_score])
        return hashlib.sha256(key).hexdigest()[:16]


def _best_per_entity(rows: Sequence[Ranked]) -> list[Ranked]:
    """A ranking of texts, best first, to a ranking of entities: each at its best text."""
    seen: dict[str | None, Ranked] = {}
    for r in rows:
        seen.setdefault(r.entity_id, r)
    return list(seen.values())


def _entity(r: Ranked) -> str:
    """Search fuses by entity: every row of its rankings has one."""
    assert r.entity_id is not None
    return r.entity_id


class Search(Ranker):
    """Entities ranked by meaning, words and names, fused; a hit shows the text that placed it best."""

    async def search(self, who: Principal, q: Query) -> SearchResult:
        notices: list[str] = []
        listing = f"search:{q.fingerprint()}"
        with QueryVector(self.indexer, q.mode) as embedding:
            async with self.tx(who, readonly=True) as tx:
                tenant = tx.tenant
                offset = self.pager.offset(q.cursor, tenant.id, listing)
                depth = offset + q.limit  # entities each ranking must reach
                texts = min(3 * depth + 20, 600)  # an entity may hold several of the nearest texts
                embedding.start(tenant, q.text)  # embedded (on the model's thread) while the other rankings run
                await rankings.tune(tx, max(self.ef_search, texts))
                legs = await self._by_words_and_names(tx, q, depth, texts)
                vector = await embedding.vector("these results rank by words and names only", notices)
                if vector is not None and self.indexer.model is not None:
                    nearest = await rankings.by_vector(
                        tx, self.indexer.model, vector, texts, q.scope.store(), "entity texts"
                    )
                    legs["semantic"] = _best_per_entity(nearest)
                ranked = fused_entities(legs, q.min_score)
                page = ranked[offset:depth]
                hits = await self._describe(tx, page, legs, q.text)
                if vector is not None and (note := await pending_note(tx)):
                    notices.append(note)
        if vector is not None and await self.indexer.still_changed():
            notices.append(
                "the embedding model changed: texts not yet re-embedded (`engram reindex`) are found by words "
                "and names only"
            )
        mode: Mode = q.mode if vector is not None or q.mode == "keyword" else "keyword"
        shown = q.budget.take(hits) if q.budget else hits
        end = offset + len(shown) if len(shown) < len(hits) else depth
        next_cursor = self.pager.next_cursor(tenant.id, listing, len(ranked), end)
        return SearchResult(
            mode=mode, hits=shown, next_cursor=next_cursor, omitted=len(hits) - len(shown), notices=notices
        )

    async def _by_words_and_names(self, tx: Tx, q: Query, depth: int, texts: int) -> dict[str, list[Ranked]]:
        """The rankings by words and, for a short query, by names (none in `semantic` mode)."""
        legs: dict[str, list[Ranked]] = {}
        if q.mode == "semantic":
            return legs
        scope = q.scope.store()
        common = await self.common_words.of(tx)
        words = await rankings.by_words(tx, q.text, strict(q.text), common, texts, CANDIDATES, scope)
        legs["keyword"] = _best_per_entity(words)
        # A name is no fact with a source or a write time: with such filters, only observations match.
        if len(q.text.split()) <= NAME_QUERY_MAX_WORDS and not q.scope.by_facts:
            legs["name"] = await rankings.by_name(tx, q.text, depth, scope)
        return legs

    async def _describe(
        self, tx: Tx, page: list[Fused[str]], legs: dict[str, list[Ranked]], text: str
    ) -> list[SearchHit]:
        rows = await entities.live_by_ids(tx, [c.key for c in page])
        shown: dict[str, int | None] = {}
        for c in page:
            # The text that placed the entity best: semantic or words (names have no text).
            placed = sorted((rank, leg) for leg, (rank, r) in c.legs.items() if r.doc_id is not None)
            shown[c.key] = c.legs[placed[0][1]][1].doc_id if placed else None
        worded = {r.doc_id for r in legs.get("keyword", ()) if r.doc_id is not None}
        doc_ids = [d for d in shown.values() if d is not None]
        texts = await rankings.matched_texts(tx, doc_ids, [d for d in doc_ids if d in worded], text, strict(text))
        hits = []
        for c in page:
            row = rows.get(c.key)
            if row is None:
                continue
            doc = shown[c.key]
            if doc is not None and doc in texts:
                m = texts[doc]
                match = Match(
                    kind=m.kind,
                    text=m.text,
                    snippet=m.snippet,
                    source=m.source,
                    created_by=m.created_by,
                    created_at=m.created_at,
                    valid_from=m.valid_from,
                    valid_until=m.valid_until,
                )
            else:
                match = Match(kind="name", text=row.name)
            scores = c.scores()
            hits.append(
                SearchHit(
                    entity=summary(row),
                    match=match,
                    scores=Scores(
                        semantic=rounded(scores.get("semantic")),
                        keyword=rounded(scores.get("keyword")),
                        name=rounded(scores.get("name")),
                        fused=round(c.score, 4),
                    ),
                )
            )
        return hits


def fused_entities(legs: dict[str, list[Ranked]], min_score: float | None) -> list[Fused[str]]:
    """The rankings fused into entities, those scoring at least `min_score` in some ranking, best
    first; ties by the best ranking's score, then by id."""
    fused = fuse(legs, WEIGHTS, _entity)
    kept = [c for c in fused if min_score is None or max(c.scores().values()) >= min_score]
    kept.sort(key=lambda c: (-c.score, -max(c.scores().values()), c.key))
    return kept
