"""The formats by name, and telling a file's format from its first bytes."""

from __future__ import annotations

import orjson

from app.services.transfer.engram import Engram
from app.services.transfer.format import FileFormat, Format
from app.services.transfer.memory import Memory
from app.services.transfer.neo4j import Neo4j
from app.services.transfer.reading import is_document

FORMATS: dict[Format, FileFormat] = {f.name: f for f in (Engram(), Memory(), Neo4j())}
NAMES: tuple[Format, ...] = tuple(FORMATS)


def detect(head: bytes) -> Format | None:
    """The format of a file from its first bytes (at least its first line), or None when they do not tell."""
    if is_document(head):
        return "neo4j"
    first = next((line for line in head.splitlines() if line.strip()), b"")
    try:
        value = orjson.loads(first)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(value, dict):
        return None
    if value.get("type") == "header" and value.get("format") == "engram":
        return "engram"
    if value.get("type") in ("entity", "relation"):
        return "engram" if "id" in value and "entity_type" in value else "memory"
    if "source" in value or ("name" in value and "type" in value):
        return "neo4j"
    return None
