"""Which entity a caller's reference means.

A reference is an id or a name. An exact id or name wins; otherwise a case-insensitive name match,
which must be unique. With `exact`, a reference is a name and only an exact match counts (the
compatibility dialects' rule). The store finds the candidates; the rule is applied here.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.errors import EngramError
from app.store import entities
from app.store.database import Tx
from app.store.entities import EntityRow, name_key


async def resolve(
    tx: Tx, refs: Sequence[str], *, lock: bool = False, missing_ok: bool = False, exact: bool = False
) -> dict[str, EntityRow]:
    """Map each reference to a live entity (`lock`: and lock the candidates' rows).

    A reference that matches nothing fails with `not_found`, unless `missing_ok` leaves it out;
    one that matches several entities fails with `ambiguous`, listing them.
    """
    return choose(refs, await entities.resolve(tx, refs, lock=lock), missing_ok=missing_ok, exact=exact)


def choose(
    refs: Sequence[str], candidates: Sequence[EntityRow], *, missing_ok: bool = False, exact: bool = False
) -> dict[str, EntityRow]:
    """The rule itself, over the candidates the store found for all of `refs`."""
    found: dict[str, EntityRow] = {}
    for ref in refs:
        if exact:
            loose = [r for r in candidates if r.name == ref]
        else:
            same = [r for r in candidates if r.id == ref or r.name == ref]
            loose = same or [r for r in candidates if r.name_key == name_key(ref)]
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
