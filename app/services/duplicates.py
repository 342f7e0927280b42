"""find_duplicates: candidate pairs of entities that may be one thing, with the reasons, a slice at a time.

Each call looks at the next slice of the tenant's live entities (at most `WINDOW`, in id order) and,
for each, at the entities most like it by name (trigram similarity with its neighbours in name
order) and by meaning (the vectors of entity texts, where they exist); a pair is proposed once,
from its end with the smaller id. Shared neighbours then add evidence to the pairs found. The work
of a call is bounded by the slice, never by the tenant's size, so a whole tenant is reviewed by
following `next_cursor`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import orjson

from app.auth.principal import Principal
from app.services import models
from app.services.base import Service
from app.services.shapes import summary
from app.store import duplicates, entities
from app.store.duplicates import Similar

WINDOW = 100  # entities one call looks at, at most
NAME_NEIGHBOURS = 10  # names compared per entity in each sort order, each way
PER_ENTITY = 10  # candidates kept per entity looked at
NAME_SIMILARITY = 0.5  # trigram similarity of names, at least
SEMANTIC_SIMILARITY = 0.9  # cosine similarity of entity texts, at least
NEIGHBORS_READ = 1000  # neighbours read per end when counting shared ones
SHARED_FULL = 5  # shared neighbours that count fully in the score


def score(reasons: Sequence[models.DuplicateReason]) -> float:
    """0-1: the best similarity (name or meaning) weighs 0.8, shared neighbours 0.2 (full at SHARED_FULL)."""
    best = max((r.similarity or 0.0 for r in reasons if r.kind != "shared_neighbors"), default=0.0)
    shared = next((r.count or 0 for r in reasons if r.kind == "shared_neighbors"), 0)
    return round(0.8 * best + 0.2 * min(shared, SHARED_FULL) / SHARED_FULL, 4)


def _cut(window: list[str], found: dict[str, list[Similar]], limit: int) -> tuple[list[str], bool]:
    """The entities of the window whose candidates fit in `limit` pairs, taken whole, in order; and
    whether the window was cut short."""
    taken: list[str] = []
    total = 0
    for eid in window:
        n = len(found.get(eid, ()))
        if total + n > limit:
            return taken, True
        taken.append(eid)
        total += n
    return taken, False


class Duplicates(Service):
    async def find(
        self, who: Principal, types: Sequence[str] | None, limit: int, cursor: str | None
    ) -> models.DuplicatesPage:
        per_entity = min(PER_ENTITY, limit)
        async with self.tx(who, readonly=True) as tx:
            listing = "duplicates:" + hashlib.sha256(orjson.dumps(sorted(types or []))).hexdigest()[:16]
            after = self.cursors.decode(cursor, tx.tenant.id, listing) if cursor else None
            window = await duplicates.window(tx, after, WINDOW, types)
            similar = await duplicates.by_name(tx, window, NAME_SIMILARITY, types, per_entity, NAME_NEIGHBOURS)
            if self.indexer.model is not None:
                model = self.indexer.model
                similar += await duplicates.by_meaning(tx, model, window, SEMANTIC_SIMILARITY, types, per_entity)
            found = _best(similar, per_entity)
            taken, cut = _cut(window, found, limit)
            evidence: dict[tuple[str, str], list[Similar]] = {}
            for s in similar:
                evidence.setdefault((s.a, s.b), []).append(s)
            pairs = {(s.a, s.b): evidence[(s.a, s.b)] for eid in taken for s in found.get(eid, ())}
            shared = await duplicates.shared_neighbors(tx, list(pairs), NEIGHBORS_READ, 3)
            rows = await entities.live_by_ids(tx, list({i for p in pairs for i in p}))
            more = cut or len(window) == WINDOW
            last = taken[-1] if taken else after
            next_cursor = self.cursors.encode(tx.tenant.id, listing, last) if more and last else None
        out = []
        for (a, b), seen in pairs.items():
            reasons = [
                models.DuplicateReason(kind=s.kind, similarity=round(s.similarity, 4))
                for s in sorted(seen, key=lambda s: s.kind)
            ]
            if (a, b) in shared:
                n = shared[(a, b)]
                reasons.append(models.DuplicateReason(kind="shared_neighbors", count=n.count, examples=n.examples))
            out.append(
                models.DuplicatePair(a=summary(rows[a]), b=summary(rows[b]), score=score(reasons), reasons=reasons)
            )
        out.sort(key=lambda p: (-p.score, p.a.id, p.b.id))
        return models.DuplicatesPage(pairs=out, scanned=len(taken), next_cursor=next_cursor)


def _best(similar: Sequence[Similar], per_entity: int) -> dict[str, list[Similar]]:
    """Per entity looked at, its `per_entity` most similar others (one entry per other, by its best
    similarity of any kind)."""
    best: dict[tuple[str, str], Similar] = {}
    for s in similar:
        if (s.a, s.b) not in best or s.similarity > best[(s.a, s.b)].similarity:
            best[(s.a, s.b)] = s
    found: dict[str, list[Similar]] = {}
    for s in sorted(best.values(), key=lambda s: (-s.similarity, s.b)):
        if len(found.setdefault(s.a, [])) < per_entity:
            found[s.a].append(s)
    return found
