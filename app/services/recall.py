"""Recall: "what do I know that answers this?" — facts ranked one by one, never collapsed to entities.

Every fact is a search document (index.py): an observation, a relation as a sentence, an episode,
an entity's description. Three rankings of facts are fused:

- semantic: the query's embedding against every fact (HNSW);
- keyword: the query's words, each weighing its inverse document frequency;
- named: the facts of the entities the question names (names and aliases found in its text) and of
  their neighbours, by meaning, from an exact scan of those facts alone. A named entity's fact weighs
  fully, a neighbour's half: a question about Ada lifts what is known of Ada, then of those around her.

Fusion is reciprocal rank fusion weighted by each ranking's score, as in `search` (docs/search.md);
facts whose embeddings are near-identical (cosine ≥ 0.95) fold into the better one (`also`).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import orjson

from app.auth.principal import Principal
from app.embeddings.provider import Vector
from app.errors import EngramError
from app.services.base import Service
from app.services.mentions import keys as name_keys
from app.services.recall_models import EntityRef, Fact, Involved, RecallResult, RecallScores
from app.services.search import CANDIDATES, RRF_K, WEB_SYNTAX, Search
from app.services.search_models import Mode
from app.store import entities, recall
from app.store.database import Tx
from app.store.rankings import tune
from app.store.recall import Ranked, Scope

NAMED_MAX = 10  # entities a question may name that count
NEIGHBOURS_MAX = 50  # their neighbours whose facts count
NEIGHBOUR_WEIGHT = 0.5
FOLD_DISTANCE = 0.05  # cosine distance under which two facts say the same
FOLD_WINDOW = 100  # facts compared for folding, from the top of the ranking


@dataclass(frozen=True, slots=True)
class RecallQuery:
    text: str
    mode: Mode = "hybrid"
    scope: Scope = field(default_factory=Scope)
    limit: int = 10
    cursor: str | None = None

    def fingerprint(self) -> str:
        key = orjson.dumps([self.text, self.mode, *self.scope.params()], default=str)
        return hashlib.sha256(key).hexdigest()[:16]


@dataclass(slots=True)
class _Candidate:
    doc_id: int
    scores: dict[str, float]
    near: bool | None = None
    fused: float = 0.0
    also: int = 0


class Recall(Service):
    def __init__(self, search: Search) -> None:
        super().__init__(search.db, search.indexer, search.cursors, search.limits, search.fairness)
        self._search = search

    async def recall(self, who: Principal, q: RecallQuery) -> RecallResult:
        notices: list[str] = []
        strict = bool(WEB_SYNTAX.search(q.text))
        embedding: asyncio.Task[tuple[Vector | None, str | None]] | None = None
        try:
            async with self.tx(who, readonly=True) as tx:
                offset = self._search.offset(q.cursor, tx.tenant.id, f"recall:{q.fingerprint()}")
                depth = offset + q.limit
                texts = min(2 * depth + 50, 300)
                if q.mode != "keyword":
                    embedding = asyncio.create_task(self.indexer.query_vector(tx.tenant, q.text))
                await tune(tx, max(self._search.ef_search, texts))
                named = await self._named(tx, q.text)
                around = await recall.neighbours(tx, named, NEIGHBOURS_MAX, q.scope.when) if named else []
                legs: dict[str, list[Ranked]] = {}
                if q.mode != "semantic":
                    common = await self._search.common_words(tx)
                    legs["keyword"] = await recall.by_words(tx, q.text, strict, common, texts, CANDIDATES, q.scope)
                vector = None
                if embedding is not None:
                    vector, problem = await embedding
                    if problem:
                        if q.mode == "semantic":
                            raise EngramError("unavailable", problem)
                        notices.append(problem + "; these facts rank by words only")
                    elif self.indexer.model is not None:
                        model = self.indexer.model
                        legs["semantic"] = await recall.by_vector(tx, model, vector, texts, q.scope)
                        if named:
                            legs["named"] = await recall.within(tx, model, vector, named, around, texts, q.scope)
                ranked = _fuse(legs)
                if vector is not None and self.indexer.model is not None:
                    await self._fold(tx, ranked, offset + q.limit)
                page = ranked[offset:depth]
                found = await recall.facts(tx, [c.doc_id for c in page])
                facts = [_fact(found[c.doc_id], c) for c in page if c.doc_id in found]
                shown_named = await self._named_refs(tx, named)
        finally:
            if embedding is not None and not embedding.done():
                embedding.cancel()
        mode: Mode = q.mode if vector is not None or q.mode == "keyword" else "keyword"
        more = len(ranked) > depth and depth < self.limits.max_results
        next_cursor = self.cursors.encode(tx.tenant.id, f"recall:{q.fingerprint()}", depth) if more else None
        return RecallResult(mode=mode, facts=facts, named=shown_named, next_cursor=next_cursor, notices=notices)

    async def _named(self, tx: Tx, text: str) -> list[str]:
        """The entities the text names, longest name first (at most NAMED_MAX)."""
        found = await recall.named(tx, name_keys(text), 4 * NAMED_MAX)
        longest: dict[str, int] = {}
        for key, entity_id in found:
            longest[entity_id] = max(longest.get(entity_id, 0), len(key))
        return sorted(longest, key=lambda e: (-longest[e], e))[:NAMED_MAX]

    async def _named_refs(self, tx: Tx, ids: Sequence[str]) -> list[EntityRef]:
        rows = await entities.live_by_ids(tx, ids)
        return [EntityRef(id=r.id, name=r.name, type=r.type) for i in ids if (r := rows.get(i)) is not None]

    async def _fold(self, tx: Tx, ranked: list[_Candidate], upto: int) -> None:
        """Fold each fact that says what a better one says (near-identical embedding) into it, in place."""
        window = ranked[: min(FOLD_WINDOW, upto + upto)]
        assert self.indexer.model is not None
        pairs = await recall.near_duplicates(tx, self.indexer.model, [c.doc_id for c in window], FOLD_DISTANCE)
        if not pairs:
            return
        by_id = {c.doc_id: c for c in window}
        gone: set[int] = set()
        for a, b in sorted(pairs, key=lambda p: [c.doc_id for c in window].index(p[0])):
            if a in gone or b in gone:
                continue
            by_id[a].also += 1
            gone.add(b)
        ranked[:] = [c for c in ranked if c.doc_id not in gone]


def _fuse(legs: dict[str, list[Ranked]]) -> list[_Candidate]:
    candidates: dict[int, _Candidate] = {}
    for leg, rows in legs.items():
        for rank, r in enumerate(rows, start=1):
            c = candidates.setdefault(r.doc_id, _Candidate(r.doc_id, {}))
            weight = 1.0
            if leg == "named":
                c.near = r.near
                weight = 1.0 if r.near else NEIGHBOUR_WEIGHT
            else:
                c.scores[leg] = r.score
            c.fused += weight * max(r.score, 0.0) / (RRF_K + rank)
    best_possible = max(len(legs), 1) / (RRF_K + 1)
    out = list(candidates.values())
    for c in out:
        c.fused /= best_possible
    out.sort(key=lambda c: (-c.fused, c.doc_id))
    return out


def _ref(end: recall.End | None) -> EntityRef | None:
    return None if end is None else EntityRef(id=end.id, name=end.name, type=end.type)


def _fact(f: recall.Fact, c: _Candidate) -> Fact:
    relation = None
    if f.relation is not None:
        relation = {k: v for k, v in f.relation.items() if k in ("id", "type", "notes", "strength", "properties")}
    return Fact(
        kind=f.kind,  # type: ignore[arg-type]
        text=f.text,
        entity=_ref(f.entity),
        to=_ref(f.other),
        relation=relation,
        episode_id=f.episode_id,
        at=f.at,
        entities=[Involved(id=e.id, name=e.name, type=e.type, role=role) for e, role in f.involved]  # type: ignore[arg-type]
        if f.kind == "episode"
        else None,
        source=f.source,
        created_by=f.created_by,
        created_at=f.created_at,
        valid_from=f.valid_from,
        valid_until=f.valid_until,
        also=c.also,
        scores=RecallScores(
            semantic=_round(c.scores.get("semantic")),
            keyword=_round(c.scores.get("keyword")),
            named=c.near,
            fused=round(c.fused, 4),
        ),
    )


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
