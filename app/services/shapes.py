"""Store rows → the models tools return, read by attribute: each model takes the fields it declares."""

from __future__ import annotations

from app.services import models
from app.store.audit import AuditRow
from app.store.entities import EntityRow
from app.store.history import Change
from app.store.listings import Found
from app.store.relations import Relation


def summary(row: EntityRow) -> models.EntitySummary:
    return models.EntitySummary.model_validate(row, from_attributes=True)


def found(hit: Found) -> models.FoundEntity:
    """A listing's entity, with the alias that matched its name filter if its name did not."""
    return models.FoundEntity.model_validate(hit.row, from_attributes=True).model_copy(
        update={"matched_alias": hit.matched_alias}
    )


def entity(row: EntityRow, **more: object) -> models.Entity:
    """The full entity: its row's fields and what the read adds (observations, relations, history)."""
    fields = {f: getattr(row, f) for f in models.Entity.model_fields if f not in more}
    return models.Entity(**fields, **more)


def history_entry(change: Change) -> models.HistoryEntry:
    return models.HistoryEntry.model_validate(change, from_attributes=True)


def audit_entry(row: AuditRow) -> models.AuditEntry:
    return models.AuditEntry.model_validate(row, from_attributes=True)


def relation(rel: Relation) -> models.Relation:
    p = rel.props
    return models.Relation(
        id=p["id"],
        type=p["type"],
        from_=rel.source,
        to=rel.target,
        from_id=rel.source_id,
        to_id=rel.target_id,
        strength=p.get("strength"),
        notes=p.get("notes"),
        properties=p.get("properties"),
        created_at=p.get("created_at"),
        created_by=p.get("created_by"),
        source=p.get("source"),
        valid_from=p.get("valid_from"),
        valid_until=p.get("valid_until"),
    )
