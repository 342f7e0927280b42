"""Search by meaning and by words: three rankings of a tenant's entities, fused by reciprocal rank.

- semantic: the query's embedding against every indexed text (entity and each observation);
- words: full-text search over the same texts (web-search syntax);
- names: trigram similarity of entity names, for typos and partial names (short queries only).

Each ranking is of texts; an entity takes the place of its best text. Fusion is reciprocal
rank fusion weighted by each ranking's own score: an entity gains score / (60 + rank) from every
ranking it appears in. Plain RRF (1 / (60 + rank)) let a text that shares one common word with
the query outrank the semantic best match; weighting by score keeps weak evidence weak while
ranks still do the calibration between cosine similarities and word counts (docs/search.md,
docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import orjson
from cachetools import TTLCache

from app.auth.principal import Principal
from app.embeddings.provider import Vector
from app.errors import EngramError
from app.services.base import Limits, Service
from app.services.budget import Budget, clip
from app.services.cursors import Cursors
from app.services.fairness import Fairness
from app.services.filters import SearchFilters
from app.services.indexing import Indexer
from app.services.search_models import Match, Mode, Scores, SearchHit, SearchResult
from app.services.shapes import summary
from app.store import entities, rankings
from app.store.database import Database, Tx
from app.store.rankings import Ranked

RRF_K = 60
NAME_QUERY_MAX_WORDS = 3  # longer queries are questions, not names
# In a large tenant a word found in thousands of texts ("team", "customer") identifies nothing, and
# matching it would mean ranking a large part of the tenant on every query: such words (by the
# planner's statistics, read again every few minutes) are not used to find texts, only to rank them.
COMMON_WORD = 1000
COMMON_WORDS_TTL = 600.0
COMMON_WORDS_TENANTS = 1000  # tenants whose common words are kept at once
CANDIDATES = 1000  # most matching texts the words ranking looks at
WEB_SYNTAX = re.compile(r'"|(^|\s)-\S|\s(or)\s', re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Query:
    text: str
    mode: Mode = "hybrid"
    filters: SearchFilters = field(default_factory=SearchFilters)
    min_score: float | None = None
    limit: int = 10
    cursor: str | None = None
    budget: Budget | None = None  # the hits that fit the caller's tokens; the rest from `next_cursor`

    def fingerprint(self) -> str:
        key = orjson.dumps([self.text, self.mode, *self.filters.params(), *self.filters.fact_params(), self.min_score])
        return hashlib.sha256(key).hexdigest()[:16]


@dataclass(slots=True)
class _Candidate:
    entity_id: str
    ranks: dict[str, int]
    scores: dict[str, float]
    docs: dict[str, int | None]
    fused: float = 0.0


def _match_text(hit: SearchHit) -> str:
    return hit.match.text


def _shortened(hit: SearchHit, text: str) -> SearchHit:
    """A hit too large for its budget: its matched text shortened, and its entity's description to as
    many bytes (a hit is the two)."""
    entity = hit.entity.model_copy(update={"description": clip(hit.entity.description, len(text.encode()))})
    match = hit.match.model_copy(update={"text": text, "snippet": None})
    return hit.model_copy(update={"entity": entity, "match": match})


def _best_per_entity(rows: Sequence[Ranked]) -> list[Ranked]:
    """A ranking of texts, best first, to a ranking of entities: each at its best text."""
    seen: dict[str, Ranked] = {}
    for r in rows:
        seen.setdefault(r.entity_id, r)
    return list(seen.values())


class Search(Service):
    def __init__(
        self,
        db: Database,
        indexer: Indexer,
        cursors: Cursors,
        limits: Limits,
        fairness: Fairness | None = None,
        *,
        ef_search: int = 100,
    ) -> None:
        super().__init__(db, indexer, cursors, limits, fairness)
        self.ef_search = ef_search
        # Per tenant id, bounded: the words, read again after COMMON_WORDS_TTL; a deleted tenant ages out.
        self._common: TTLCache[str, list[str]] = TTLCache(maxsize=COMMON_WORDS_TENANTS, ttl=COMMON_WORDS_TTL)

    async def search(self, who: Principal, q: Query) -> SearchResult:
        notices: list[str] = []
        strict = bool(WEB_SYNTAX.search(q.text))
        embedding: asyncio.Task[tuple[Vector | None, str | None]] | None = None
        try:
            async with self.tx(who, readonly=True) as tx:
                tenant = tx.tenant
                offset = self.offset(q.cursor, tenant.id, f"search:{q.fingerprint()}")
                depth = offset + q.limit  # entities each ranking must reach
                texts = min(3 * depth + 20, 600)  # an entity may hold several of the nearest texts
                # The query is embedded (on the model's thread) while the word and name rankings run.
                if q.mode != "keyword":
                    embedding = asyncio.create_task(self.indexer.query_vector(tenant, q.text))
                await rankings.tune(tx, max(self.ef_search, texts))
                ranked_by: dict[str, list[Ranked]] = {}
                if q.mode != "semantic":
                    common = await self.common_words(tx)
                    ranked_by["keyword"] = _best_per_entity(
                        await rankings.by_words(tx, q.text, strict, common, texts, CANDIDATES, q.filters)
                    )
                    # A name is no fact with a source or a write time: with such filters, only observations match.
                    if len(q.text.split()) <= NAME_QUERY_MAX_WORDS and not q.filters.by_facts:
                        ranked_by["name"] = await rankings.by_name(tx, q.text, depth, q.filters)
                vector = await query_vector(embedding, q.mode, "these results rank by words and names only", notices)
                if vector is not None and self.indexer.model is not None:
                    ranked_by["semantic"] = _best_per_entity(
                        await rankings.by_vector(tx, self.indexer.model, vector, texts, q.filters)
                    )
                ranked = self._fuse(ranked_by, q.min_score)
                page = ranked[offset:depth]
                hits = await self._describe(tx, page, ranked_by, q.text, strict)
                if vector is not None and (note := await pending_note(tx)):
                    notices.append(note)
        finally:
            if embedding is not None and not embedding.done():
                embedding.cancel()
        if vector is not None and await self.indexer.still_changed():
            notices.append(
                "the embedding model changed: texts not yet re-embedded (`engram reindex`) are found by words "
                "and names only"
            )
        mode: Mode = q.mode if vector is not None or q.mode == "keyword" else "keyword"
        shown = q.budget.take(hits, _match_text, _shortened) if q.budget else hits
        end = offset + len(shown) if len(shown) < len(hits) else depth
        next_cursor = self.next_cursor(tenant.id, f"search:{q.fingerprint()}", len(ranked), end)
        return SearchResult(
            mode=mode, hits=shown, next_cursor=next_cursor, omitted=len(hits) - len(shown), notices=notices
        )

    def next_cursor(self, tenant_id: str, listing: str, ranked: int, end: int) -> str | None:
        """The cursor of the page starting at `end` of a ranking of `ranked` items; None when none is left."""
        more = ranked > end and end < self.limits.max_results
        return self.cursors.encode(tenant_id, listing, end) if more else None

    async def common_words(self, tx: Tx) -> list[str]:
        words = self._common.get(tx.tenant.id)
        if words is None:
            words = self._common[tx.tenant.id] = await rankings.common_words(tx, COMMON_WORD)
        return words

    def offset(self, cursor: str | None, tenant_id: str, listing: str) -> int:
        """Where a page starts: a signed cursor bound to the tenant and to the same query (`listing`)."""
        if cursor is None:
            return 0
        offset = self.cursors.decode(cursor, tenant_id, listing)
        if not isinstance(offset, int) or not 0 < offset < self.limits.max_results:
            raise EngramError("invalid", "`cursor` is out of range")
        return offset

    @staticmethod
    def _fuse(rankings: dict[str, list[Ranked]], min_score: float | None) -> list[_Candidate]:
        candidates: dict[str, _Candidate] = {}
        for leg, rows in rankings.items():
            for rank, r in enumerate(rows, start=1):
                c = candidates.setdefault(r.entity_id, _Candidate(r.entity_id, {}, {}, {}))
                c.ranks[leg], c.scores[leg], c.docs[leg] = rank, r.score, r.doc_id
                c.fused += max(r.score, 0.0) / (RRF_K + rank)
        best_possible = len(rankings) / (RRF_K + 1)
        out = []
        for c in candidates.values():
            c.fused /= best_possible
            if min_score is None or max(c.scores.values()) >= min_score:
                out.append(c)
        out.sort(key=lambda c: (-c.fused, -max(c.scores.values()), c.entity_id))
        return out

    async def _describe(
        self,
        tx: Tx,
        page: list[_Candidate],
        ranked_by: dict[str, list[Ranked]],
        text: str,
        strict: bool,
    ) -> list[SearchHit]:
        rows = await entities.live_by_ids(tx, [c.entity_id for c in page])
        shown: dict[str, int | None] = {}
        for c in page:
            # The text that placed the entity best: semantic or words (names have no text).
            legs = sorted((rank, leg) for leg, rank in c.ranks.items() if c.docs[leg] is not None)
            shown[c.entity_id] = c.docs[legs[0][1]] if legs else None
        worded = {r.doc_id for r in ranked_by.get("keyword", ()) if r.doc_id is not None}
        doc_ids = [d for d in shown.values() if d is not None]
        texts = await rankings.matched_texts(tx, doc_ids, [d for d in doc_ids if d in worded], text, strict)
        hits = []
        for c in page:
            row = rows.get(c.entity_id)
            if row is None:
                continue
            doc = shown[c.entity_id]
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
            hits.append(
                SearchHit(
                    entity=summary(row),
                    match=match,
                    scores=Scores(
                        semantic=_round(c.scores.get("semantic")),
                        keyword=_round(c.scores.get("keyword")),
                        name=_round(c.scores.get("name")),
                        fused=round(c.fused, 4),
                    ),
                )
            )
        return hits


async def pending_note(tx: Tx) -> str | None:
    """What a ranking by meaning misses while the filler catches up, if anything."""
    pending = await rankings.pending_count(tx, 1000)
    if not pending:
        return None
    count = "more than 999" if pending >= 1000 else str(pending)
    return f"{count} recently saved texts have no embedding yet: found by words and names only"


async def query_vector(
    embedding: asyncio.Task[tuple[Vector | None, str | None]] | None, mode: Mode, without: str, notices: list[str]
) -> Vector | None:
    """The query's vector once embedded, or None, saying in `notices` why and what the answer does
    `without` it; a query that asked for meaning alone (`semantic`) is `unavailable` instead."""
    if embedding is None:
        return None
    vector, problem = await embedding
    if problem:
        if mode == "semantic":
            raise EngramError("unavailable", problem)
        notices.append(f"{problem}; {without}")
        return None
    return vector


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
