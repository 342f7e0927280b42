"""Store rows → the models tools return, read by attribute: each model takes the fields it declares."""

from __future__ import annotations

from app.services import models
from app.store.audit import AuditRow
from app.store.entities import EntityRow
from app.store.history import Change


def summary(row: EntityRow) -> models.EntitySummary:
    return models.EntitySummary.model_validate(row, from_attributes=True)


def entity(row: EntityRow, **more: object) -> models.Entity:
    """The full entity: its row's fields and what the read adds (observations, relations, history)."""
    fields = {f: getattr(row, f) for f in models.Entity.model_fields if f not in more}
    return models.Entity(**fields, **more)


def history_entry(change: Change) -> models.HistoryEntry:
    return models.HistoryEntry.model_validate(change, from_attributes=True)


def audit_entry(row: AuditRow) -> models.AuditEntry:
    return models.AuditEntry.model_validate(row, from_attributes=True)
