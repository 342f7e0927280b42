"""Stored rows built in memory, for the tests of the services' pure rules (no database)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from app.store import entities
from app.store.entities import EntityRow

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def entity_row(name: str, id: str | None = None, **fields: Any) -> EntityRow:
    """A live entity as the store reads it: an id of its own name unless given, version 1, written
    by "me" at NOW; `fields` replace any column."""
    values: dict[str, Any] = {
        "id": id or f"00000000-0000-4000-8000-{abs(hash(name)) % 10**12:012d}",
        "gid": "1",
        "name": name,
        "name_key": entities.name_key(name),
        "type": "person",
        "description": "",
        "area": None,
        "topic": None,
        "subtopic": None,
        "certainty": None,
        "properties": {},
        "version": 1,
        "created_at": NOW,
        "updated_at": NOW,
        "created_by": "me",
        "updated_by": "me",
        "deleted_at": None,
    }
    return EntityRow(**{**values, **fields})
