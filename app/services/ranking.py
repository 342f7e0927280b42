"""What search and recall share: each declares its rankings ("legs") and their weights, and ranks
through these.

- `Pager`: where a page of a fused ranking starts (a signed offset cursor, bound to the tenant and
  the query) and the next page's cursor;
- `CommonWords`: per tenant, the words too common to find texts by (they still rank them);
- `QueryVector`: the query's embedding, made on the model's thread while the other rankings run,
  cancelled when the call ends first, with the notice when semantic ranking is skipped;
- `fuse`: weighted reciprocal rank fusion, scaled by the best possible score. Plain RRF
  (1 / (60 + rank)) let a text that shares one common word with the query outrank the semantic best
  match; weighting by each row's score keeps weak evidence weak while ranks still calibrate cosine
  similarities against word counts (docs/search.md, docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Generic, TypeVar

from cachetools import TTLCache

from app.embeddings.provider import Vector
from app.errors import EngramError
from app.services.base import Limits, Service
from app.services.cursors import Cursors
from app.services.fairness import Fairness
from app.services.indexing import Indexer
from app.services.search_models import Mode
from app.store import rankings
from app.store.database import Database, Tenant, Tx
from app.store.rankings import Ranked

RRF_K = 60
# In a large tenant a word found in thousands of texts ("team", "customer") identifies nothing, and
# matching it would mean ranking a large part of the tenant on every query: such words (by the
# planner's statistics, read again every few minutes) are not used to find texts, only to rank them.
COMMON_WORD = 1000
COMMON_WORDS_TTL = 600.0
COMMON_WORDS_TENANTS = 1000  # tenants whose common words are kept at once
CANDIDATES = 1000  # most matching texts a words ranking looks at
WEB_SYNTAX = re.compile(r'"|(^|\s)-\S|\s(or)\s', re.IGNORECASE)

K = TypeVar("K")


def strict(text: str) -> bool:
    """The query uses web-search syntax ("a phrase", or, -not): its words rank with those semantics."""
    return bool(WEB_SYNTAX.search(text))


class Ranker(Service):
    """A service that ranks a tenant's texts (search, recall): what it ranks with beside the database."""

    def __init__(
        self,
        db: Database,
        indexer: Indexer,
        cursors: Cursors,
        limits: Limits,
        fairness: Fairness | None = None,
        *,
        pager: Pager,
        common_words: CommonWords,
        ef_search: int = 100,
    ) -> None:
        super().__init__(db, indexer, cursors, limits, fairness)
        self.pager = pager
        self.common_words = common_words
        self.ef_search = ef_search


class Pager:
    """Pages of a fused ranking: an offset in a signed cursor bound to the tenant and the listing
    (the query's fingerprint), never past `max_results`."""

    def __init__(self, cursors: Cursors, limits: Limits) -> None:
        self.cursors = cursors
        self.limits = limits

    def offset(self, cursor: str | None, tenant_id: str, listing: str) -> int:
        """Where a page starts."""
        if cursor is None:
            return 0
        offset = self.cursors.decode(cursor, tenant_id, listing)
        if not isinstance(offset, int) or not 0 < offset < self.limits.max_results:
            raise EngramError("invalid", "`cursor` is out of range")
        return offset

    def next_cursor(self, tenant_id: str, listing: str, ranked: int, end: int) -> str | None:
        """The cursor of the page starting at `end` of a ranking of `ranked` items; None when none is left."""
        more = ranked > end and end < self.limits.max_results
        return self.cursors.encode(tenant_id, listing, end) if more else None


class CommonWords:
    """Per tenant id, bounded: its common words, read again after a while; a deleted tenant ages out."""

    def __init__(
        self, min_texts: int = COMMON_WORD, ttl: float = COMMON_WORDS_TTL, tenants: int = COMMON_WORDS_TENANTS
    ) -> None:
        self.min_texts = min_texts
        self._words: TTLCache[str, list[str]] = TTLCache(maxsize=tenants, ttl=ttl)

    async def of(self, tx: Tx) -> list[str]:
        words = self._words.get(tx.tenant.id)
        if words is None:
            words = self._words[tx.tenant.id] = await rankings.common_words(tx, self.min_texts)
        return words


class QueryVector:
    """The query's embedding for one call: `start` it, then the other rankings run while the model
    embeds; `vector` awaits it. Leaving the `with` block cancels it if it is still running."""

    def __init__(self, indexer: Indexer, mode: Mode) -> None:
        self.indexer = indexer
        self.mode = mode
        self._task: asyncio.Task[tuple[Vector | None, str | None]] | None = None

    def __enter__(self) -> QueryVector:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def start(self, tenant: Tenant, text: str) -> None:
        """Embed `text` unless the query ranks by words alone."""
        if self.mode != "keyword":
            self._task = asyncio.create_task(self.indexer.query_vector(tenant, text))

    async def vector(self, without: str, notices: list[str]) -> Vector | None:
        """The query's vector once embedded, or None, saying in `notices` why and what the answer does
        `without` it; a query that asked for meaning alone (`semantic`) is `unavailable` instead."""
        if self._task is None:
            return None
        vector, problem = await self._task
        if problem:
            if self.mode == "semantic":
                raise EngramError("unavailable", problem)
            notices.append(f"{problem}; {without}")
            return None
        return vector


@dataclass(slots=True)
class Fused(Generic[K]):
    """One candidate of a fusion: its key, its (rank, row) in each ranking that holds it, its score."""

    key: K
    legs: dict[str, tuple[int, Ranked]]
    score: float = 0.0

    def scores(self, *leaving_out: str) -> dict[str, float]:
        """Its score in each ranking that holds it (but those left out)."""
        return {leg: r.score for leg, (_, r) in self.legs.items() if leg not in leaving_out}


def fuse(
    legs: Mapping[str, Sequence[Ranked]], weights: Mapping[str, float], key: Callable[[Ranked], K]
) -> list[Fused[K]]:
    """Weighted reciprocal rank fusion of rankings (best first) into candidates by `key`: each gains
    weight * score / (RRF_K + rank) from every ranking that holds it, the weight that of the row's
    `near` when it has one, else its ranking's; divided by the best possible sum (first in every
    ranking at score 1), so scores are comparable across queries. In the order first found: each
    caller orders by its own ties."""
    found: dict[K, Fused[K]] = {}
    for leg, rows in legs.items():
        for rank, r in enumerate(rows, start=1):
            c = found.setdefault(key(r), Fused(key(r), {}))
            c.legs[leg] = (rank, r)
            c.score += weights[r.near or leg] * max(r.score, 0.0) / (RRF_K + rank)
    best_possible = sum(weights[leg] for leg in legs) / (RRF_K + 1)
    for c in found.values():
        c.score /= best_possible
    return list(found.values())


async def pending_note(tx: Tx) -> str | None:
    """What a ranking by meaning misses while the filler catches up, if anything."""
    pending = await rankings.pending_count(tx, 1000)
    if not pending:
        return None
    count = "more than 999" if pending >= 1000 else str(pending)
    return f"{count} recently saved texts have no embedding yet: found by words and names only"


def rounded(value: float | None) -> float | None:
    """A score as answers show it."""
    return None if value is None else round(value, 4)
