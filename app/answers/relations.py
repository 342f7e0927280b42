"""The answers of the relation tools (app/mcp/tools/relations.py): what a write changed, a relation
a line (app/answers/summaries.py)."""

from __future__ import annotations

from app.answers.summaries import relation_line
from app.services import models


def connected(r: models.ConnectResult) -> str:
    by: dict[str, list[str]] = {}
    for item in r.results:
        by.setdefault(item.status, []).append(relation_line(item.relation))
    return "\n".join(f"{'Created' if s == 'created' else 'Existed'}: {'; '.join(x)}." for s, x in by.items())


def disconnected(r: models.DisconnectResult) -> str:
    done = "; ".join(relation_line(x) for x in r.removed)
    out = f"Deleted: {done}." if done else "Deleted: none."
    return out + (f" {r.not_found} not found." if r.not_found else "")


def relations_ended(r: models.InvalidatedRelations) -> str:
    done = "; ".join(relation_line(x) for x in r.invalidated)
    out = f"Ended: {done}." if done else "Ended: none."
    return out + (f" {r.unchanged} unknown or already ended." if r.unchanged else "")
