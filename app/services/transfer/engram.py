"""`engram`: Engram's own JSON Lines, lossless: a header, entities (ids, versions, every field,
observations with their authors and times, aliases), relations (ids and metadata), episodes,
optionally history, and an end line that counts what came before it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

import orjson

from app.services import models
from app.services.recall_models import EpisodeText
from app.services.transfer import checks
from app.services.transfer.format import FileFormat, Format, line
from app.services.transfer.memory import entity_record
from app.services.transfer.records import (
    MAX_ALIASES,
    MAX_EPISODE_ENTITIES,
    MAX_HISTORY_CHANGES_BYTES,
    MAX_OBSERVATIONS,
    EpisodeRecord,
    HistoryRecord,
    Marker,
    Record,
    Refusal,
    RelationRecord,
)
from app.services.writer import FactIn
from app.store.entities import Provenance, Stamps
from app.store.episodes import EpisodeRow, NewEpisode
from app.store.history import Change
from app.store.transfer import ExportedEntity, ExportedRelation

VERSION = 1

_ENTITY = {
    "type", "id", "name", "entity_type", "description", "area", "topic", "subtopic", "certainty", "properties",
    "version", "created_at", "updated_at", "created_by", "updated_by", "deleted_at", "observations",
    "aliases", "merged_into",
}  # fmt: skip
_RELATION = {
    "type", "id", "from", "to", "from_id", "to_id", "relation_type", "strength", "notes", "properties",
    "created_at", "created_by", "source", "valid_from", "valid_until",
}  # fmt: skip
_OBSERVATION = {"text", "created_at", "created_by", "source", "valid_from", "valid_until"}
_HISTORY = {"type", "entity_id", "other_id", "relation_id", "action", "changes", "actor", "at"}
_EPISODE = {
    "type", "text", "at", "source", "created_by", "created_at", "valid_from", "valid_until", "ended_why", "entities",
    "owner",
}  # fmt: skip
_OWNER = re.compile(r"[0-9a-f]{32}")  # a principal's key (Principal.key): whose private memory
_ACTION = re.compile(r"^[a-z][a-z_]{0,49}$")
_ROLES = ("speaker", "participant", "mentioned")
# What a relation's properties hold besides its id and type, in the order a line gives them.
_RELATION_EXTRAS = (
    "strength",
    "notes",
    "properties",
    "created_at",
    "created_by",
    "source",
    "valid_from",
    "valid_until",
)


def _when(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()


class Engram(FileFormat):
    name: Format = "engram"
    lossless = True

    # -- export

    def opening(self, deleted: bool, history: bool) -> bytes:
        return line({"type": "header", "format": "engram", "version": VERSION, "deleted": deleted, "history": history})

    def entities(self, page: Sequence[ExportedEntity], first: bool) -> bytes:
        return b"".join(_entity_line(e) for e in page)

    def relations(self, page: Sequence[ExportedRelation], first: bool) -> bytes:
        return b"".join(_relation_line(r) for r in page)

    def episodes(self, page: Sequence[EpisodeRow]) -> bytes:
        return b"".join(_episode_line(e) for e in page)

    def history(self, page: Sequence[Change]) -> bytes:
        return b"".join(
            line(
                {
                    "type": "history",
                    "entity_id": h.entity_id,
                    "other_id": h.other_id,
                    "relation_id": h.relation_id,
                    "action": h.action,
                    "changes": h.changes,
                    "actor": h.actor,
                    "at": _when(h.at),
                }
            )
            for h in page
        )

    def closing(self, counts: dict[str, int]) -> bytes:
        """The end line; `episodes` only where there are any (files without them read as before)."""
        said = {k: counts[k] for k in ("entities", "relations", "history")}
        return line({"type": "end", **said, **({"episodes": counts["episodes"]} if counts.get("episodes") else {})})

    # -- import

    def parse(self, kind: str, line_: int, v: dict[str, Any]) -> Record | None:
        if kind == "entity":
            return _entity(line_, v)
        if kind == "relation":
            return _relation(line_, v)
        if kind == "history":
            return _history(line_, v)
        if kind == "episode":
            return _episode(line_, v)
        if kind in ("header", "end"):
            return _marker(line_, "header" if kind == "header" else "end", v)
        return None


def _entity_line(e: ExportedEntity) -> bytes:
    """An entity line; `aliases` and `merged_into` only where there are any (files of entities
    without them read as before)."""
    row = e.row
    extra: dict[str, Any] = {"aliases": list(e.aliases)} if e.aliases else {}
    if e.merged_into:
        extra["merged_into"] = e.merged_into
    return line(
        {
            "type": "entity",
            "id": row.id,
            "name": row.name,
            "entity_type": row.type,
            "description": row.description,
            "area": row.area,
            "topic": row.topic,
            "subtopic": row.subtopic,
            "certainty": row.certainty,
            "properties": row.properties,
            "version": row.version,
            "created_at": _when(row.created_at),
            "updated_at": _when(row.updated_at),
            "created_by": row.created_by,
            "updated_by": row.updated_by,
            "deleted_at": _when(row.deleted_at),
            **extra,
            "observations": [
                {
                    "text": o.text,
                    "created_at": _when(o.created_at),
                    "created_by": o.created_by,
                    "source": o.source,
                    "valid_from": _when(o.valid_from),
                    "valid_until": _when(o.valid_until),
                }
                for o in e.observations
            ],
        }
    )


def _relation_line(r: ExportedRelation) -> bytes:
    p = r.props
    out = {
        "type": "relation",
        "id": p.get("id"),
        "from": r.source,
        "to": r.target,
        "from_id": r.source_id,
        "to_id": r.target_id,
        "relation_type": p.get("type"),
    }
    out.update((key, p[key]) for key in _RELATION_EXTRAS if p.get(key) is not None)
    return line(out)


def _episode_line(e: EpisodeRow) -> bytes:
    return line(
        {
            "type": "episode",
            "text": e.content,
            "at": _when(e.at),
            "source": e.source,
            "created_by": e.created_by,
            "created_at": _when(e.created_at),
            "valid_from": _when(e.valid_from),
            "valid_until": _when(e.valid_until),
            "ended_why": e.ended_why,
            "entities": [{"id": x.id, "name": x.name, "role": role} for x, role in e.involved],
            **({"owner": e.owner} if e.owner is not None else {}),  # a private episode: whose
        }
    )


def _entity(line_: int, v: dict[str, Any]) -> Record:
    checks.unknown(v, _ENTITY)
    facts = []
    for i, o in enumerate(checks.listed(v.get("observations"), "observations", MAX_OBSERVATIONS)):
        if not isinstance(o, dict) or set(o) - _OBSERVATION:
            raise Refusal(f"observations.{i}: must be {{{', '.join(sorted(_OBSERVATION))}}}")
        given = Provenance(
            checks.optional(models.Source, o.get("source"), f"observations.{i}.source"),
            checks.optional_time(o.get("valid_from"), f"observations.{i}.valid_from"),
            checks.optional_time(o.get("valid_until"), f"observations.{i}.valid_until"),
        )
        checks.interval(given.valid_from, given.valid_until, f"observations.{i}")
        facts.append(
            FactIn(
                checks.observation(o.get("text"), f"observations.{i}.text"),
                given,
                checks.optional_time(o.get("created_at"), f"observations.{i}.created_at"),
                checks.actor(o.get("created_by"), f"observations.{i}.created_by"),
            )
        )
    description = v.get("description")
    certainty = v.get("certainty")
    fields = {
        "description": "" if description is None else checks.check(models.Description, description, "description"),
        "area": checks.optional(models.Label, v.get("area"), "area"),
        "topic": checks.optional(models.Label, v.get("topic"), "topic"),
        "subtopic": checks.optional(models.Label, v.get("subtopic"), "subtopic"),
        "certainty": None if certainty is None else checks.integer(certainty, "certainty", 0, 100),
        "properties": checks.properties(v.get("properties")) or {},
    }
    version = v.get("version")
    stamps = Stamps(
        version=1 if version is None else checks.integer(version, "version", 1, checks.INT32),
        created_at=checks.optional_time(v.get("created_at"), "created_at"),
        updated_at=checks.optional_time(v.get("updated_at"), "updated_at"),
        created_by=checks.actor(v.get("created_by"), "created_by"),
        updated_by=checks.actor(v.get("updated_by"), "updated_by"),
        deleted_at=checks.optional_time(v.get("deleted_at"), "deleted_at"),
    )
    aliases = checks.listed(v.get("aliases"), "aliases", MAX_ALIASES)
    return entity_record(
        line_,
        checks.name(v.get("name")),
        checks.type_(v.get("entity_type"), "entity_type"),
        facts,
        id=checks.id_(v.get("id"), "id"),
        fields=fields,
        stamps=stamps,
        aliases=[checks.name(a, f"aliases.{i}") for i, a in enumerate(aliases)],
        merged_into=checks.optional_id(v.get("merged_into"), "merged_into"),
    )


def _relation(line_: int, v: dict[str, Any]) -> RelationRecord:
    checks.unknown(v, _RELATION)
    valid_from = checks.optional_time(v.get("valid_from"), "valid_from")
    valid_until = checks.optional_time(v.get("valid_until"), "valid_until")
    checks.interval(valid_from, valid_until, "relation")
    if v.get("created_at") is not None:
        checks.time(v.get("created_at"), "created_at")
    return RelationRecord(
        line_,
        checks.name(v.get("from"), "from"),
        checks.name(v.get("to"), "to"),
        checks.type_(v.get("relation_type"), "relation_type"),
        id=checks.optional_id(v.get("id"), "id"),
        source_id=checks.optional_id(v.get("from_id"), "from_id"),
        target_id=checks.optional_id(v.get("to_id"), "to_id"),
        strength=checks.strength(v.get("strength")),
        notes=checks.optional(models.Notes, v.get("notes"), "notes"),
        properties=checks.properties(v.get("properties")),
        provenance=Provenance(checks.optional(models.Source, v.get("source"), "source"), valid_from, valid_until),
        created_by=checks.actor(v.get("created_by"), "created_by"),
        # kept as written, so that an export gives them back unchanged
        written={k: v[k] for k in ("created_at", "valid_from", "valid_until") if v.get(k) is not None},
    )


def _history(line_: int, v: dict[str, Any]) -> HistoryRecord:
    checks.unknown(v, _HISTORY)
    action = v.get("action")
    if not isinstance(action, str) or not _ACTION.match(action):
        raise Refusal("action: must be a history action such as 'created'")
    changes = v.get("changes", {})
    if not isinstance(changes, dict):
        raise Refusal("changes: must be a JSON object")
    try:
        models.storable_json(changes)
    except ValueError as exc:
        raise Refusal(f"changes: {str(exc).replace('properties', 'values')}") from None
    if len(orjson.dumps(changes)) > MAX_HISTORY_CHANGES_BYTES:
        raise Refusal(f"changes: at most {MAX_HISTORY_CHANGES_BYTES} bytes of JSON")
    actor = checks.actor(v.get("actor"), "actor")
    if actor is None:
        raise Refusal("actor: must be a string")
    return HistoryRecord(
        line_,
        Change(
            checks.id_(v.get("entity_id"), "entity_id"),
            checks.optional_id(v.get("other_id"), "other_id"),
            checks.optional_id(v.get("relation_id"), "relation_id"),
            action,
            changes,
            actor,
            checks.time(v.get("at"), "at"),
        ),
    )


def _episode(line_: int, v: dict[str, Any]) -> EpisodeRecord:
    checks.unknown(v, _EPISODE)
    valid_from = checks.optional_time(v.get("valid_from"), "valid_from")
    valid_until = checks.optional_time(v.get("valid_until"), "valid_until")
    checks.interval(valid_from, valid_until, "episode")
    involved = []
    for i, e in enumerate(checks.listed(v.get("entities"), "entities", MAX_EPISODE_ENTITIES)):
        if not isinstance(e, dict) or set(e) - {"id", "name", "role"}:
            raise Refusal(f"entities.{i}: must be an object of id, name and role")
        if e.get("role") not in _ROLES:
            raise Refusal(f"entities.{i}.role: must be one of {', '.join(_ROLES)}")
        ref = checks.optional_id(e.get("id"), f"entities.{i}.id")
        involved.append((ref, checks.name(e.get("name"), f"entities.{i}.name"), str(e["role"])))
    episode = NewEpisode(
        content=checks.check(EpisodeText, v.get("text"), "text"),
        at=checks.time(v.get("at"), "at"),
        source=checks.optional(models.Source, v.get("source"), "source"),
        valid_from=valid_from,
        valid_until=valid_until,
        created_by=checks.actor(v.get("created_by"), "created_by"),
        created_at=checks.optional_time(v.get("created_at"), "created_at"),
        ended_why=checks.optional(models.Reason, v.get("ended_why"), "ended_why"),
        owner=_owner(v.get("owner")),
    )
    return EpisodeRecord(line_, episode, involved)


def _owner(value: Any) -> str | None:
    """A private episode's owner, as an export wrote it (a principal's key); None: shared."""
    if value is None:
        return None
    if not isinstance(value, str) or not _OWNER.fullmatch(value):
        raise Refusal("owner: must be a principal's key (32 hex digits) as an export wrote it")
    return value


def _marker(line_: int, kind: Literal["header", "end"], v: dict[str, Any]) -> Marker:
    if kind == "header" and (v.get("format") != "engram" or v.get("version") != VERSION):
        raise Refusal(f"this reads version {VERSION} of the engram format")
    for key, value in v.items():
        if key not in ("type", "format") and not (isinstance(value, int | bool) or value is None):
            raise Refusal(f"{key[:60]}: must be a number or a boolean")
    return Marker(line_, kind, v)
