"""What an import reads from a file: one typed record per line (or document item), or `Bad`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from app.services.writer import EntityIn
from app.store.entities import Provenance
from app.store.episodes import NewEpisode
from app.store.history import Change
from app.store.relations import End, NewRelation

# Bounds of a file's records, beyond the tools' own bounds on each field.
MAX_RECORD_BYTES = 8 * 1024 * 1024  # one line (or one item of a document)
MAX_OBSERVATIONS = 10_000  # observations of one entity record
MAX_HISTORY_CHANGES_BYTES = 4 * 1024 * 1024
MAX_ACTOR = 500  # created_by, updated_by, actor
MAX_ALIASES = 100  # aliases of one entity record (as many as an entity may hold)
MAX_EPISODE_ENTITIES = 1000  # entities of one episode record (speakers, participants, mentions)


class Refusal(Exception):
    """A record that cannot be imported: `invalid` (its shape or a bound), with the reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(slots=True)
class EntityRecord:
    line: int
    entity: EntityIn  # what the write path takes; its `fields` lack "type" where the file gives none
    empty: int = 0  # empty observations left out


@dataclass(slots=True)
class RelationRecord:
    line: int
    source: str  # names
    target: str
    type: str
    id: str | None = None
    source_id: str | None = None
    target_id: str | None = None
    strength: float | None = None
    notes: str | None = None
    properties: dict[str, Any] | None = None
    provenance: Provenance = field(default_factory=Provenance)
    created_by: str | None = None
    written: dict[str, str] = field(default_factory=dict)  # created_at, valid_from, valid_until as written

    def between(self, source: End, target: End) -> NewRelation:
        """The relation to write, once its ends are found."""
        return NewRelation(
            source,
            target,
            self.type,
            self.strength,
            self.notes,
            self.properties,
            self.provenance,
            self.id,
            self.created_by,
            self.written,
        )


@dataclass(slots=True)
class HistoryRecord:
    line: int
    change: Change


@dataclass(slots=True)
class EpisodeRecord:
    line: int
    episode: NewEpisode  # what the write path takes, involving no one until its entities are found
    entities: list[tuple[str | None, str, str]]  # (id, name, role)


@dataclass(slots=True)
class Marker:
    """The engram header or end line."""

    line: int
    kind: Literal["header", "end"]
    data: dict[str, Any]


Record = EntityRecord | RelationRecord | HistoryRecord | EpisodeRecord | Marker
Kind = Literal["entity", "relation", "history", "episode"]
KINDS: dict[type, Kind] = {
    EntityRecord: "entity",
    RelationRecord: "relation",
    HistoryRecord: "history",
    EpisodeRecord: "episode",
}


@dataclass(slots=True)
class Bad:
    """A record refused before any database work; `kind` is what it claimed to be, when known."""

    line: int
    reason: str
    kind: str | None = None
