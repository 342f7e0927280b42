"""Pinned facts (docs/pinned-facts.md): a tenant's core memory, always in view.

An observation pinned leads every session's brief (hooks.py, `start`) and, when recall finds it for
a question, the recall answer (`lift`). Pins are few by design: at most MAX_PINNED per tenant, so
that what leads every brief stays short enough to read every time. Observations are shared by the
whole tenant, and so are their pins: pinning marks a fact every member sees, never a private one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

from pydantic import BaseModel, Field

from app.auth.principal import Principal
from app.services import models
from app.services.base import Service
from app.services.fairness import refuse
from app.services.recall_models import EntityRef, Fact, RecallScores
from app.services.refs import resolve
from app.store import history, pins
from app.store.database import Tx
from app.store.history import Event
from app.store.validity import NOW, When

MAX_PINNED = 50  # pins per tenant; also the most a brief leads with


class PinRef(BaseModel):
    entity: str = Field(description="The entity as the call named it.")
    observation: str


class PinChange(BaseModel):
    entity_id: str
    name: str
    observations: list[str] = Field(description="The facts this call pinned, or unpinned.")


class PinResult(BaseModel):
    changed: list[PinChange]
    unchanged: list[PinRef] = Field(description="Facts that were pinned (or unpinned) already.")
    not_found: list[PinRef] = Field(description="Texts the entity does not hold.")
    pinned: int = Field(description="The tenant's pinned facts now.")
    max_pinned: int = MAX_PINNED


class PinnedFact(BaseModel):
    """A pinned fact with its entity and its record, as the console lists it."""

    observation_id: int
    entity_id: str
    entity_name: str
    entity_type: str
    pinned_by: str
    record: models.ObservationRecord


class Pins(Service):
    async def mark(self, who: Principal, items: Sequence[models.ObservationsIn], *, pin: bool) -> PinResult:
        """Pin (or unpin) the facts given by exact text. An unknown entity fails the call
        (`not_found`); a text the entity does not hold is listed in `not_found`. Past MAX_PINNED
        pins, `limit`, and nothing changes."""
        self.check_batch(len(items), sum(len(i.observations) for i in items))
        async with self.tx(who) as tx:
            found = await resolve(tx, list(dict.fromkeys(i.entity for i in items)))
            await pins.lock(tx)
            pairs = [(found[i.entity].id, o) for i in items for o in i.observations]
            marked = await pins.mark(tx, pairs, who.actor if pin else None)
            total = await pins.count(tx)
            if pin and total > MAX_PINNED:
                raise refuse(
                    "pinned_facts",
                    f"a memory holds at most {MAX_PINNED} pinned facts ({total - _count(marked)} pinned now); "
                    "unpin some with unpin_facts first",
                    max_pinned=MAX_PINNED,
                )
            await _recorded(tx, marked, pin, who.actor)
        held = {(m.entity_id, m.text): m.changed for m in marked}
        changed: dict[str, PinChange] = {}
        unchanged, missing, seen = [], [], set()
        for item in items:
            row = found[item.entity]
            for text in item.observations:
                if (row.id, text) in seen:  # each fact reported once
                    continue
                seen.add((row.id, text))
                state = held.get((row.id, text))
                if state is None:
                    missing.append(PinRef(entity=item.entity, observation=text))
                elif state:
                    changed.setdefault(row.id, PinChange(entity_id=row.id, name=row.name, observations=[]))
                    changed[row.id].observations.append(text)
                else:
                    unchanged.append(PinRef(entity=item.entity, observation=text))
        return PinResult(changed=list(changed.values()), unchanged=unchanged, not_found=missing, pinned=total)

    async def listing(self, who: Principal, when: When = NOW) -> list[PinnedFact]:
        """The tenant's pins on facts that count at `when` (the console: EVERYTHING, ended ones
        too, which still count against the bound), oldest pin first."""
        async with self.tx(who, readonly=True) as tx:
            rows = await pins.listing(tx, MAX_PINNED, when)
        return [_pinned(r) for r in rows]


async def pinned_facts(tx: Tx) -> list[Fact]:
    """The tenant's pins on facts valid now (at most MAX_PINNED, oldest pin first), as recall and the
    briefs print facts: what every session's brief leads with."""
    rows = await pins.listing(tx, MAX_PINNED)
    return [_fact(_pinned(r)) for r in rows]


def _count(marked: Sequence[pins.Marked]) -> int:
    return sum(m.changed for m in marked)


async def _recorded(tx: Tx, marked: Sequence[pins.Marked], pin: bool, actor: str) -> None:
    """Each entity's history says which facts were pinned or unpinned, and by whom."""
    texts: dict[str, list[str]] = {}
    for m in marked:
        if m.changed:
            texts.setdefault(m.entity_id, []).append(m.text)
    action = "observations_pinned" if pin else "observations_unpinned"
    await history.record(tx, [Event(e, action, {"observations": t}) for e, t in texts.items()], actor)


def _pinned(p: pins.Pin) -> PinnedFact:
    fields = asdict(p)
    return PinnedFact(record=models.ObservationRecord(**fields.pop("fact")), **fields)


def _fact(p: PinnedFact) -> Fact:
    """A pin as recall's facts are: an observation of its entity, marked pinned."""
    entity = EntityRef(id=p.entity_id, name=p.entity_name, type=p.entity_type)
    record = p.record.model_dump(exclude={"pinned_at"})
    return Fact(kind="observation", entity=entity, pinned=True, scores=RecallScores(fused=1.0), **record)
