"""What every file format is to export and import: one interface, one module per format."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import orjson

from app.services.transfer.records import Record, Refusal
from app.store.episodes import EpisodeRow
from app.store.history import Change
from app.store.transfer import ExportedEntity, ExportedRelation

Format = Literal["engram", "memory", "neo4j"]


def line(value: dict[str, Any]) -> bytes:
    return orjson.dumps(value) + b"\n"


class FileFormat:
    """A format's lines out (export) and records in (import). The defaults are those of a format
    that carries only the graph as it holds now, entity names being its keys."""

    name: Format
    lossless = False  # ids, records, history, episodes and deleted entities travel
    document = False  # may be one JSON document rather than JSON Lines

    # -- export: the pieces of a file, in order

    def opening(self, deleted: bool, history: bool) -> bytes:
        return b""

    def entities(self, page: Sequence[ExportedEntity], first: bool) -> bytes:
        raise NotImplementedError

    def between(self) -> bytes:
        """Between the entities and the relations."""
        return b""

    def relations(self, page: Sequence[ExportedRelation], first: bool) -> bytes:
        raise NotImplementedError

    def episodes(self, page: Sequence[EpisodeRow]) -> bytes:
        raise NotImplementedError

    def history(self, page: Sequence[Change]) -> bytes:
        raise NotImplementedError

    def closing(self, counts: dict[str, int]) -> bytes:
        return b""

    # -- import

    def kind(self, value: dict[str, Any], key: str | None) -> str | None:
        """What a JSON object of the file is (`key`: the document array it came from, if any)."""
        kind = value.get("type")
        return kind if isinstance(kind, str) else None

    def parse(self, kind: str, line: int, value: dict[str, Any]) -> Record | None:
        """The record of a checked object of that kind, or None when the format has no such kind.
        Raises `Refusal` for a record that breaks a bound."""
        raise NotImplementedError


__all__ = ["FileFormat", "Format", "Refusal", "line"]
