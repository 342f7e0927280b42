"""Recall: "what do I know that answers this?" — facts ranked one by one, never collapsed to entities.

Every fact is a search document (index.py): an observation, a relation as a sentence, an episode,
an entity's description. Three rankings of facts are fused:

- semantic: the query's embedding against every fact (HNSW);
- keyword: the query's words, each weighing its inverse document frequency;
- named: the facts of the entities the question names (names and aliases found in its text) and of
  their neighbours, by meaning, from an exact scan of those facts alone: a question about Ada lifts
  what is known of Ada, then of those around her.

Fusion is `ranking.fuse`, as in `search`, each ranking with its weight (`WEIGHTS`). Then: facts
that happened at a moment the question names ("on 25 May, 2022") are lifted; an episode shares
some of its score with the turns around it (the question is often asked in the turn before its
answer); and facts whose embeddings are near-identical (cosine ≥ 0.95) fold into the better one,
which lists their records (`also`). Every weight was measured on the development set of
docs/benchmarks.md ("Recall"), each part kept only where it paid.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import orjson

from app.auth.principal import Principal
from app.embeddings.provider import EmbeddingError
from app.embeddings.rerank import Skipped
from app.observability.context import DEADLINE
from app.services import timespans
from app.services.budget import Budget
from app.services.excerpts import excerpt
from app.services.filters import Scope
from app.services.mentions import keys as name_keys
from app.services.ranking import CANDIDATES, Fused, QueryVector, Ranker, fuse, pending_note, rounded, strict
from app.services.recall_models import EntityRef, Fact, FactRecord, Involved, RecallResult, RecallScores
from app.services.search_models import Mode
from app.store import pins, rankings, recall, scopes
from app.store.database import Tx
from app.store.rankings import Ranked

NAMED_MAX = 10  # entities a question may name that count
NEIGHBOURS_MAX = 50  # their neighbours whose facts count
ROLES = ("named", "bridge", "neighbour")
# How much each ranking counts in the fusion (a named entity's facts; a neighbour's).
WEIGHTS = {"semantic": 1.0, "keyword": 1.5, "named": 0.5, "bridge": 0.5, "neighbour": 0.25}
TIME_LIFT = 1.0  # a fact that happened when the question says counts (1 + this) times
CONTEXT_WEIGHT = 0.3  # the share of an episode's score each of the turns around it gains
CONTEXT_TURNS = 2  # turns before and after
CONTEXT_GAP = timedelta(minutes=30)  # ... that happened within this of it
CONTEXT_WINDOW = 100  # episodes, from the top of the ranking, that share their score
EVENT_GAP = timedelta(days=1)  # "after X": from the day after X was said to happen
FOLD_DISTANCE = 0.05  # cosine distance under which two facts say the same
FOLD_WINDOW = 100  # facts compared for folding, from the top of the ranking
SPREAD = 0.05  # how much a fact yields to a better one it is like (maximal marginal relevance)
SPREAD_FLOOR = 0.6  # likeness below which two facts do not count as alike
# With a reranker (ENGRAM_RERANK_MODEL): the first facts are ordered again by reciprocal ranks, the
# reranker's counting RERANK_WEIGHT times the ranking's own (which holds the time and context lifts).
RERANK_WEIGHT = 2.0
RERANK_K = 10
RERANK_MARGIN = 0.2  # seconds of a call's deadline kept for what follows the reranker (a hook's write)
PIN_WINDOW = 50  # candidates, from the top of the ranking, whose pinned facts lead the answer


@dataclass(frozen=True, slots=True)
class RecallQuery:
    text: str
    mode: Mode = "hybrid"
    scope: Scope = field(default_factory=Scope)
    limit: int = 10
    cursor: str | None = None
    budget: Budget[Fact] | None = None  # the facts that fit the caller's tokens; the rest from `next_cursor`

    def fingerprint(self) -> str:
        s = self.scope
        types = [t.lower() for t in s.types] if s.types else None
        scope = [types, list(s.sources) if s.sources else None, s.since, s.until, *s.when.params()]
        key = orjson.dumps([self.text, self.mode, *scope], default=str)
        return hashlib.sha256(key).hexdigest()[:16]


@dataclass(slots=True)
class _Candidate:
    doc_id: int
    scores: dict[str, float]
    near: bool | None = None
    episode: bool = False
    fused: float = 0.0
    also: list[int] = field(default_factory=list)  # documents folded into this one
    pinned: bool = False  # a pinned fact (pins.py), lifted to the top


class Recall(Ranker):
    """Facts ranked one by one: by meaning, by words, and those of the entities the question names."""

    async def recall(self, who: Principal, q: RecallQuery) -> RecallResult:
        notices: list[str] = []
        listing = f"recall:{q.fingerprint()}"
        scope = q.scope.store()
        with QueryVector(self.indexer, q.mode) as embedding:
            async with self.tx(who, readonly=True) as tx:
                offset = self.pager.offset(q.cursor, tx.tenant.id, listing)
                depth = offset + q.limit
                texts = min(2 * depth + 50, 300)
                embedding.start(tx.tenant, q.text)
                await rankings.tune(tx, max(self.ef_search, texts))
                found = await recall.named_and_around(tx, name_keys(q.text), NAMED_MAX, NEIGHBOURS_MAX, scope.when)
                legs: dict[str, list[Ranked]] = {}
                if q.mode != "semantic":
                    common = await self.common_words.of(tx)
                    legs["keyword"] = await recall.by_word_weight(
                        tx, q.text, strict(q.text), common, texts, CANDIDATES, scope
                    )
                vector = await embedding.vector("these facts rank by words only", notices)
                if vector is not None and (model := self.indexer.model) is not None:
                    legs["semantic"] = await rankings.by_vector(tx, model, vector, texts, scope, "facts")
                    named, bridges, others = ([e.id for e in found if e.role == role] for role in ROLES)
                    if named:
                        within = recall.within(tx, model, vector, named, bridges, others, texts, scope)
                        legs["named"] = await within
                ranked = _candidates(fuse(legs, WEIGHTS, _doc))
                ranked = await self._adjusted(tx, q.text, ranked, scope, vector is not None, texts, depth)
                ranked = await _pinned_first(tx, ranked)
                rereading = self._rereading(ranked)
                bodies = await recall.bodies(tx, [c.doc_id for c in rereading]) if rereading else {}
                reach = _reach(ranked, offset, depth, len(rereading))
                shown = await recall.facts(tx, [d for c in reach for d in (c.doc_id, *c.also)])
                pending = await pending_note(tx) if vector is not None else None
        # The transaction has ended: a slow model holds no connection.
        ranked = await self._reranked(q.text, ranked, rereading, bodies, notices)
        notices += [pending] if pending else []
        page = ranked[offset:depth]
        facts = [_fact(shown, c, q.text) for c in page if c.doc_id in shown]
        fitting = q.budget.take(facts) if q.budget else facts
        mode: Mode = q.mode if vector is not None or q.mode == "keyword" else "keyword"
        end = offset + len(fitting) if len(fitting) < len(facts) else depth
        next_cursor = self.pager.next_cursor(tx.tenant.id, listing, len(ranked), end)
        named_refs = [EntityRef(id=e.id, name=e.name, type=e.type) for e in found if e.role == "named"]
        return RecallResult(
            mode=mode,
            facts=fitting,
            named=named_refs,
            next_cursor=next_cursor,
            omitted=len(facts) - len(fitting),
            notices=notices,
        )

    async def _adjusted(
        self, tx: Tx, question: str, ranked: list[_Candidate], scope: scopes.Scope, meant: bool, texts: int, depth: int
    ) -> list[_Candidate]:
        """The fused ranking lifted by the moments the question names, with the turns around its best
        episodes, and (when the query was embedded: `meant`) alike facts folded."""
        spans = timespans.spans(question, scope.when.at)
        if (event := timespans.around(question)) and meant:
            spans += await self._around(tx, *event, scope)
        if spans:
            await self._lift_in_time(tx, ranked, spans, texts)
        ranked = await self._with_context(tx, ranked, scope)
        if meant and self.indexer.model is not None:
            await self._fold(tx, ranked, depth)
        return ranked

    def _rereading(self, ranked: list[_Candidate]) -> list[_Candidate]:
        """The first facts the reranker reads again; none without one, or with fewer than two."""
        top = ranked[: self.indexer.rerank_depth]
        return top if self.indexer.reranker is not None and len(top) >= 2 else []

    async def _reranked(
        self, question: str, ranked: list[_Candidate], top: list[_Candidate], bodies: dict[int, str], notices: list[str]
    ) -> list[_Candidate]:
        """The first facts (`top`, their indexed texts `bodies`) ordered again with a cross-encoder's
        reading of each beside the question (docs/search.md, "Stronger models: candidates"), within
        its time budget and the call's deadline; unchanged without one, when it fails or is late."""
        reader = self.indexer.reranker
        if reader is None or not top:
            return ranked
        try:
            scores = await reader.scores(question, [bodies.get(c.doc_id, "") for c in top], _within(reader.budget))
        except Skipped as skipped:
            notices.append(f"reranking skipped: {skipped}; facts are in the ranking's own order")
            return ranked
        except EmbeddingError:
            notices.append("the reranker is not answering: facts are in the ranking's own order")
            return ranked
        by_reader = sorted(range(len(top)), key=lambda i: -scores[i])
        second = {top[i].doc_id: place for place, i in enumerate(by_reader)}
        blend = {
            c.doc_id: 1 / (RERANK_K + p) + RERANK_WEIGHT / (RERANK_K + second[c.doc_id]) for p, c in enumerate(top)
        }
        return sorted(top, key=lambda c: -blend[c.doc_id]) + ranked[len(top) :]

    @staticmethod
    async def _lift_in_time(
        tx: Tx, ranked: list[_Candidate], spans: list[tuple[datetime, datetime]], upto: int
    ) -> None:
        """Lift, in place, those of the first `upto` facts that happened in a range the question names."""
        when = await recall.times(tx, [c.doc_id for c in ranked[:upto]])
        for c in ranked[:upto]:
            at = when.get(c.doc_id)
            if at is not None and any(start <= at < end for start, end in spans):
                c.fused *= 1 + TIME_LIFT
        ranked.sort(key=lambda c: (-c.fused, c.doc_id))

    async def _around(self, tx: Tx, side: str, event: str, scope: scopes.Scope) -> list[tuple[datetime, datetime]]:
        """The range before or after an event the question names, dated by the fact that best says it."""
        model = self.indexer.model
        vector, _ = await self.indexer.query_vector(tx.tenant, event)
        if vector is None or model is None:
            return []
        best = await rankings.by_vector(tx, model, vector, 1, scope, "facts")
        at = (await recall.times(tx, [_doc(best[0])])).get(_doc(best[0])) if best else None
        if at is None:
            return []
        return (
            [(datetime.min.replace(tzinfo=UTC), at)]
            if side == "before"
            else [(at + EVENT_GAP, datetime.max.replace(tzinfo=UTC))]
        )

    @staticmethod
    async def _with_context(tx: Tx, ranked: list[_Candidate], scope: scopes.Scope) -> list[_Candidate]:
        """The ranking with each of the best episodes sharing part of its score with the turns
        around it (which may join the ranking)."""
        top = [c for c in ranked[:CONTEXT_WINDOW] if c.episode]
        if not top:
            return ranked
        pairs = await recall.context(tx, [c.doc_id for c in top], CONTEXT_TURNS, CONTEXT_GAP, scope)
        if not pairs:
            return ranked
        by_id = {c.doc_id: c for c in ranked}
        base = {c.doc_id: c.fused for c in top}
        for doc, neighbour in pairs:
            c = by_id.get(neighbour) or by_id.setdefault(neighbour, _Candidate(neighbour, {}, episode=True))
            c.fused += CONTEXT_WEIGHT * base[doc]
        return sorted(by_id.values(), key=lambda c: (-c.fused, c.doc_id))

    async def _fold(self, tx: Tx, ranked: list[_Candidate], upto: int) -> None:
        """In place: fold each fact that says what a better one says (near-identical embedding) into
        it; then, among the first facts, let each yield to the facts of the same entity above it (or
        the episodes) in proportion to how alike they are (maximal marginal relevance), so an answer's
        first lines do not say one thing ten ways."""
        window = ranked[: min(FOLD_WINDOW, 2 * upto)]
        assert self.indexer.model is not None
        floor = min(1 - FOLD_DISTANCE, SPREAD_FLOOR) if SPREAD else 1 - FOLD_DISTANCE
        pairs = await recall.similar(tx, self.indexer.model, [c.doc_id for c in window], floor)
        if not pairs:
            return
        by_id = {c.doc_id: c for c in window}
        position = {c.doc_id: i for i, c in enumerate(window)}
        gone: set[int] = set()
        for a, b, alike, _ in sorted(pairs, key=lambda p: (position[p[0]], position[p[1]])):
            if alike < 1 - FOLD_DISTANCE or a in gone or b in gone:
                continue
            by_id[a].also.append(b)
            gone.add(b)
        kept = [c for c in window if c.doc_id not in gone]
        if SPREAD:
            kept = _spread(kept, [(a, b, s) for a, b, s, owned in pairs if owned and a not in gone and b not in gone])
        ranked[:] = kept + [c for c in ranked[len(window) :] if c.doc_id not in gone]


async def _pinned_first(tx: Tx, ranked: list[_Candidate]) -> list[_Candidate]:
    """The ranking with the pinned facts among its first PIN_WINDOW candidates moved to its top, in
    their own order (docs/pinned-facts.md; before a reranker, which orders them with the others);
    unchanged when none is pinned."""
    window = ranked[:PIN_WINDOW]
    marked = await pins.pinned_documents(tx, [c.doc_id for c in window])
    if not marked:
        return ranked
    for c in window:
        c.pinned = c.doc_id in marked
    return [c for c in window if c.pinned] + [c for c in window if not c.pinned] + ranked[PIN_WINDOW:]


def _spread(window: list[_Candidate], pairs: list[tuple[int, int, float]]) -> list[_Candidate]:
    """The window in maximal-marginal-relevance order: each next fact the one whose score, less SPREAD
    times its likeness to the nearest fact already chosen, is highest."""
    alike: dict[int, dict[int, float]] = {}
    for a, b, s in pairs:
        alike.setdefault(a, {})[b] = s
        alike.setdefault(b, {})[a] = s
    left = list(window)
    nearest = {c.doc_id: 0.0 for c in window}
    out = []
    while left:
        best = max(left, key=lambda c: c.fused - SPREAD * nearest[c.doc_id])
        left.remove(best)
        out.append(best)
        for other, s in alike.get(best.doc_id, {}).items():
            if other in nearest and s > nearest[other]:
                nearest[other] = s
    return out


def _within(budget: float | None) -> float | None:
    """How long the reranker may take: its budget, or less when the call's deadline (a hook's, a
    tool call's) leaves less, keeping RERANK_MARGIN for what follows it."""
    at = DEADLINE.get()
    if at is None or at == math.inf:
        return budget
    left = at - asyncio.get_running_loop().time() - RERANK_MARGIN
    return left if budget is None else min(budget, left)


def _reach(ranked: list[_Candidate], offset: int, depth: int, reread: int) -> list[_Candidate]:
    """The facts that may be on the page once the first `reread` are ordered again: those first ones
    when the page starts among them, and the rest of the page."""
    return (ranked[:reread] if offset < reread else []) + ranked[max(offset, reread) : depth]


def _doc(r: Ranked) -> int:
    """Recall fuses by document: every row of its rankings has one."""
    assert r.doc_id is not None
    return r.doc_id


def _candidates(fused: list[Fused[int]]) -> list[_Candidate]:
    """The fused facts, best first: their scores by meaning and by words, whether a named entity's
    (`near`, set by the `named` ranking), whether an episode."""
    out = []
    for f in fused:
        near = f.legs["named"][1].near == "named" if "named" in f.legs else None
        first = next(iter(f.legs.values()))[1]
        out.append(_Candidate(f.key, f.scores("named"), near=near, episode=first.episode, fused=f.score))
    out.sort(key=lambda c: (-c.fused, c.doc_id))
    return out


def _ref(end: recall.End | None) -> EntityRef | None:
    return None if end is None else EntityRef(id=end.id, name=end.name, type=end.type)


def _fact(found: dict[int, recall.Fact], c: _Candidate, question: str) -> Fact:
    f = found[c.doc_id]
    relation = None
    if f.relation is not None:
        relation = {k: v for k, v in f.relation.items() if k in ("id", "type", "notes", "strength", "properties")}
    return Fact(
        kind=f.kind,
        text=f.text,
        entity=_ref(f.entity),
        to=_ref(f.other),
        relation=relation,
        episode_id=f.episode_id,
        at=f.at,
        entities=[Involved(id=e.id, name=e.name, type=e.type, role=role) for e, role in f.involved]
        if f.kind == "episode"
        else None,
        private=f.private if f.kind == "episode" else None,
        pinned=True if c.pinned else None,
        source=f.source,
        created_by=f.created_by,
        created_at=f.created_at,
        valid_from=f.valid_from,
        valid_until=f.valid_until,
        also=[_record(found[d]) for d in c.also if d in found],
        excerpt=excerpt(f.text, question) if f.kind == "episode" else None,
        scores=RecallScores(
            semantic=rounded(c.scores.get("semantic")),
            keyword=rounded(c.scores.get("keyword")),
            named=c.near,
            fused=round(c.fused, 4),
        ),
    )


def _record(f: recall.Fact) -> FactRecord:
    return FactRecord(
        text=f.text,
        source=f.source,
        at=f.at,
        created_at=f.created_at,
        valid_from=f.valid_from,
        valid_until=f.valid_until,
    )
