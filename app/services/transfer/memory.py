"""`memory`: the file of `@modelcontextprotocol/server-memory`, one JSON object a line:
`{"type":"entity","name","entityType","observations"}` and `{"type":"relation","from","to","relationType"}`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.services.transfer import checks
from app.services.transfer.format import FileFormat, Format, line
from app.services.transfer.records import MAX_OBSERVATIONS, EntityRecord, Record, RelationRecord
from app.services.writer import EntityIn, FactIn
from app.store.transfer import ExportedEntity, ExportedRelation


def entity_record(line_: int, name: str, type_: str | None, facts: list[FactIn], **more: Any) -> EntityRecord:
    """An entity record; empty observations are left out and counted."""
    kept = [f for f in facts if f.text]
    fields = more.pop("fields", {}) | ({"type": type_} if type_ is not None else {})
    return EntityRecord(line_, EntityIn(name, fields, kept, **more), len(facts) - len(kept))


class Memory(FileFormat):
    name: Format = "memory"

    def entities(self, page: Sequence[ExportedEntity], first: bool) -> bytes:
        return b"".join(
            line(
                {
                    "type": "entity",
                    "name": e.row.name,
                    "entityType": e.row.type,
                    "observations": [o.text for o in e.observations],
                }
            )
            for e in page
        )

    def relations(self, page: Sequence[ExportedRelation], first: bool) -> bytes:
        return b"".join(
            line({"type": "relation", "from": r.source, "to": r.target, "relationType": r.props.get("type")})
            for r in page
        )

    # The keys of an entity (name, type, observations) and of a relation (from, to, type).
    entity_keys = ("name", "entityType", "observations")
    relation_keys = ("from", "to", "relationType")

    def parse(self, kind: str, line_: int, v: dict[str, Any]) -> Record | None:
        # Older versions of the reference wrote every field a client sent: the others are left out.
        if kind == "entity":
            name, type_, observations = self.entity_keys
            return entity_record(
                line_,
                checks.name(v.get(name)),
                checks.type_(v.get(type_), type_),
                checks.plain_observations(v.get(observations), MAX_OBSERVATIONS),
            )
        if kind == "relation":
            source, target, type_ = self.relation_keys
            return RelationRecord(
                line_,
                checks.name(v.get(source), source),
                checks.name(v.get(target), target),
                checks.type_(v.get(type_), type_),
            )
        return None
