"""The answer of `purge_entities` (app/mcp/tools/purge.py)."""

from __future__ import annotations

from app.answers.text import block
from app.services.purges import PrivateErased, PurgeResult


def purged(r: PurgeResult) -> str:
    """What a purge erased, or (a preview) would erase and how to confirm it."""
    if r.erased or not r.names:
        return r.summary
    more = r.counts.entities - len(r.names)
    names = ", ".join(block(n) for n in r.names) + (f" and {more} more" if more > 0 else "")
    return f"{r.summary}\nEntities: {names}."


def private_erased(r: PrivateErased) -> str:
    """How many episodes of a private memory were (or would be) erased."""
    return r.summary
