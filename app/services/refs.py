"""Which entity a caller's reference means.

A reference is an id or a name. An exact id or name wins (the id of an entity merged into another
means the survivor); then an exact alias; otherwise a case-insensitive match of names and aliases
together, which must be unique. With `exact`, a reference is a name and only an exact name counts
(the compatibility dialects' rule: they know no aliases). The store finds the candidates; the rule
is applied here.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.errors import EngramError
from app.store import entities
from app.store.database import Tx
from app.store.entities import Candidate, EntityRow, name_key


async def resolve(
    tx: Tx, refs: Sequence[str], *, lock: bool = False, missing_ok: bool = False, exact: bool = False
) -> dict[str, EntityRow]:
    """Map each reference to a live entity (`lock`: and lock the candidates' rows).

    A reference that matches nothing fails with `not_found`, unless `missing_ok` leaves it out;
    one that matches several entities fails with `ambiguous`, listing them.
    """
    return choose(refs, await entities.resolve(tx, refs, lock=lock), missing_ok=missing_ok, exact=exact)


def _meant(ref: str, candidates: Sequence[Candidate], exact: bool) -> list[EntityRow]:
    """The candidates `ref` may mean, by the first rule that matches any."""
    if exact:
        return [c.row for c in candidates if c.row.name == ref]
    key = name_key(ref)
    return (
        [c.row for c in candidates if c.row.id == ref or c.row.name == ref or ref in c.merged_ids]
        or [c.row for c in candidates if ref in c.aliases]
        or [c.row for c in candidates if c.row.name_key == key or any(name_key(a) == key for a in c.aliases)]
    )


def choose(
    refs: Sequence[str],
    candidates: Sequence[Candidate | EntityRow],
    *,
    missing_ok: bool = False,
    exact: bool = False,
) -> dict[str, EntityRow]:
    """The rule itself, over the candidates the store found for all of `refs` (a bare row: an
    entity with no aliases)."""
    found: dict[str, EntityRow] = {}
    known = [c if isinstance(c, Candidate) else Candidate(c) for c in candidates]
    for ref in refs:
        loose = _meant(ref, known, exact)
        if not loose and missing_ok:
            continue
        if not loose:
            raise EngramError("not_found", f"no entity with id or name {ref!r}", ref=ref)
        if len(loose) > 1:
            raise EngramError(
                "ambiguous",
                f"{ref!r} matches several entities by name; use the exact name or id",
                ref=ref,
                candidates=[{"id": r.id, "name": r.name, "type": r.type} for r in loose],
            )
        found[ref] = loose[0]
    return found
