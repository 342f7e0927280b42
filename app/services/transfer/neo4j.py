"""`neo4j`: the data model of `mcp-neo4j-memory`, a KnowledgeGraph document `{"entities":
[{name,type,observations}], "relations": [{source,target,relationType}]}` in any layout, or those
items one per line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from app.services.transfer.format import Format
from app.services.transfer.memory import Memory
from app.store.transfer import ExportedEntity, ExportedRelation


def _items(values: list[dict[str, Any]], first: bool) -> bytes:
    return (b"" if first else b",\n") + b",\n".join(orjson.dumps(v) for v in values)


class Neo4j(Memory):
    """Records as the memory format's, under other keys; exported as one document."""

    name: Format = "neo4j"
    document = True
    entity_keys = ("name", "type", "observations")
    relation_keys = ("source", "target", "relationType")

    def opening(self, deleted: bool, history: bool) -> bytes:
        return b'{"entities": [\n'

    def entities(self, page: Sequence[ExportedEntity], first: bool) -> bytes:
        return _items(
            [{"name": e.row.name, "type": e.row.type, "observations": [o.text for o in e.observations]} for e in page],
            first,
        )

    def between(self) -> bytes:
        return b'\n],\n"relations": [\n'

    def relations(self, page: Sequence[ExportedRelation], first: bool) -> bytes:
        return _items(
            [{"source": r.source, "target": r.target, "relationType": r.props.get("type")} for r in page], first
        )

    def closing(self, counts: dict[str, int]) -> bytes:
        return b"\n]}\n"

    def kind(self, value: dict[str, Any], key: str | None) -> str | None:
        if key == "entities":
            return "entity"
        if key == "relations":
            return "relation"
        if "source" in value or "target" in value or "relationType" in value:
            return "relation"
        return "entity" if "name" in value else None
