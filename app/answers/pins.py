"""The answers of pin_facts and unpin_facts (app/mcp/tools/pins.py): what changed, what was so
already, what the entities do not hold, and how many of the bound the tenant's pins take.

    Pinned 2 facts: Ada Lovelace: 2.
    Pinned already: Ada Lovelace: "plays the cello".
    Not found: Grace: "writes compilers".
    3 of 50 facts pinned.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.answers.text import block
from app.services.pins import PinRef, PinResult


def _refs(refs: Sequence[PinRef]) -> str:
    return "; ".join(f'{block(r.entity)}: "{block(r.observation)}"' for r in refs)


def marked(r: PinResult, verb: str) -> str:
    done = sum(len(c.observations) for c in r.changed)
    per = ", ".join(f"{block(c.name)}: {len(c.observations)}" for c in r.changed)
    out = [f"{verb} {done} facts" + (f": {per}." if per else ".")]
    if r.unchanged:
        out.append(f"{verb} already: {_refs(r.unchanged)}.")
    if r.not_found:
        out.append(f"Not found: {_refs(r.not_found)}.")
    out.append(f"{r.pinned} of {r.max_pinned} facts pinned.")
    return "\n".join(out)
