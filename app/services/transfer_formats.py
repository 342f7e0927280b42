"""The file formats of export and import: reading records line by line (or item by item from a
KnowledgeGraph document), checking each against the tools' bounds, and writing lines.

Formats (docs/import-export.md):
- `engram`: Engram's own JSON Lines, lossless: a header, entities (ids, versions, every field,
  observations with their authors and times), relations (ids and metadata), optionally history,
  and an end line that counts what came before it.
- `memory`: the file of `@modelcontextprotocol/server-memory`: `{"type":"entity","name",
  "entityType","observations"}` and `{"type":"relation","from","to","relationType"}` lines.
- `neo4j`: the data model of `mcp-neo4j-memory`: a KnowledgeGraph document `{"entities":
  [{name,type,observations}], "relations": [{source,target,relationType}]}` in any layout, or
  those items one per line.

Reading never holds more than one record (bounded by MAX_RECORD_BYTES) and one read chunk.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, BinaryIO, Literal

import orjson

from app.services.models import MAX_JSON_DEPTH, bounded_properties, clean_text, storable_json
from app.services.recall_models import EPISODE_MAX_CHARS as MAX_EPISODE_CHARS
from app.store.entities import is_uuid

Format = Literal["engram", "memory", "neo4j"]
FORMATS: tuple[Format, ...] = ("engram", "memory", "neo4j")
ENGRAM_VERSION = 1

# Bounds of a file's records, beyond the tools' own bounds on each field.
MAX_RECORD_BYTES = 8 * 1024 * 1024  # one line (or one item of a document)
MAX_OBSERVATIONS = 10_000  # observations of one entity record
MAX_HISTORY_CHANGES_BYTES = 4 * 1024 * 1024
MAX_ACTOR = 500  # created_by, updated_by, actor
MAX_ALIASES = 100  # aliases of one entity record (as many as an entity may hold)
MAX_EPISODE_ENTITIES = 1000  # entities of one episode record (speakers, participants, mentions)
_INT32 = 2**31 - 1
_CHUNK = 1024 * 1024


class Refusal(Exception):
    """A record that cannot be imported: `invalid` (its shape or a bound), with the reason."""

    def __init__(self, reason: str, code: str = "invalid") -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code


@dataclass(slots=True)
class Obs:
    text: str
    created_at: datetime | None = None
    created_by: str | None = None
    source: str | None = None
    valid_from: datetime | None = None
    valid_until: datetime | None = None


@dataclass(slots=True)
class EntityRecord:
    line: int
    name: str
    type: str | None  # None: not given (merges keep the stored type)
    observations: list[Obs]
    id: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)  # description, area, ..., properties: as given
    version: int = 1
    created_at: datetime | None = None
    updated_at: datetime | None = None
    created_by: str | None = None
    updated_by: str | None = None
    deleted_at: datetime | None = None
    aliases: list[str] = field(default_factory=list)  # engram format only
    merged_into: str | None = None


@dataclass(slots=True)
class RelationRecord:
    line: int
    source: str  # names
    target: str
    type: str
    id: str | None = None
    source_id: str | None = None
    target_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # strength, notes, properties, created_at, created_by


@dataclass(slots=True)
class HistoryRecord:
    line: int
    entity_id: str
    other_id: str | None
    relation_id: str | None
    action: str
    changes: dict[str, Any]
    actor: str
    at: datetime


@dataclass(slots=True)
class EpisodeRecord:
    line: int
    text: str
    at: datetime
    source: str | None
    created_by: str | None
    created_at: datetime | None
    valid_from: datetime | None
    valid_until: datetime | None
    ended_why: str | None
    entities: list[tuple[str | None, str, str]]  # (id, name, role)


@dataclass(slots=True)
class Marker:
    """The engram header or end line."""

    line: int
    kind: Literal["header", "end"]
    data: dict[str, Any]


Record = EntityRecord | RelationRecord | HistoryRecord | EpisodeRecord | Marker


@dataclass(slots=True)
class Bad:
    """A record refused before any database work; `kind` is what it claimed to be, when known."""

    line: int
    reason: str
    kind: str | None = None


# --- reading ----------------------------------------------------------------------------------


def lines(stream: BinaryIO) -> Iterator[tuple[int, bytes | None]]:
    """(line number, line without its end) of a byte stream; None for a line over MAX_RECORD_BYTES
    (the rest of it is skipped). Memory: one chunk and one line."""
    number = 0
    while True:
        raw = stream.readline(MAX_RECORD_BYTES + 1)
        if not raw:
            return
        number += 1
        if len(raw) > MAX_RECORD_BYTES and not raw.endswith(b"\n"):
            while (more := stream.readline(_CHUNK)) and not more.endswith(b"\n"):
                pass
            yield number, None
            continue
        yield number, raw.rstrip(b"\r\n")


_DOCUMENT = re.compile(rb'^\s*(\[|\{\s*"(entities|relations)"\s*:)')


def is_document(head: bytes) -> bool:
    """Whether a file starting with `head` is a JSON document (an array, or a KnowledgeGraph object)
    rather than JSON Lines."""
    return _DOCUMENT.match(head) is not None


def document_items(stream: BinaryIO) -> Iterator[tuple[int, str | None, bytes | None]]:
    """The items of a KnowledgeGraph document `{"entities": [...], "relations": [...]}` (or of a top-level
    array), in any layout: (line the item starts on, the key of its array or None, its bytes; None
    when over MAX_RECORD_BYTES). A document that ends early gives a last item (its line, "end", None)."""
    scanner = _Scanner()
    while chunk := stream.read(_CHUNK):
        yield from scanner.feed(chunk)
    if scanner.stack or scanner.in_string:
        yield scanner.line, "end", None


_NL, _QUOTE, _BACKSLASH, _LBRACE, _LBRACKET, _RBRACE = 0x0A, 0x22, 0x5C, 0x7B, 0x5B, 0x7D


class _Scanner:
    """Finds the items of a JSON document by its strings and brackets, without parsing the rest."""

    _TOKEN = re.compile(rb'["\\{}\[\]\n]')

    def __init__(self) -> None:
        self.stack = bytearray()  # the open containers, b"{" or b"["
        self.keys: list[str | None] = []  # per open array: the key of the top-level object it is the value of
        self.in_string = False
        self.escape = False  # the chunk ended right after a backslash in a string
        self.line = 1
        self.string: bytearray | None = None  # a string directly inside the top-level object, being read
        self.last_string = ""
        self.item: bytearray | None = None  # the item being collected
        self.item_line = 0
        self.item_key: str | None = None
        self.item_over = False

    def _item_level(self) -> bool:
        """Inside a top-level array, or an array that is a value of the top-level object."""
        return self.stack == b"[" or self.stack == b"{["

    def feed(self, chunk: bytes) -> Iterator[tuple[int, str | None, bytes | None]]:
        item_from = 0 if self.item is not None else None
        string_from = 0 if self.string is not None else None
        skip = 0 if self.escape else -1
        self.escape = False
        for m in self._TOKEN.finditer(chunk):
            i = m.start()
            if i == skip:  # the character after a backslash
                continue
            c = chunk[i]
            if c == _NL:
                self.line += 1
            elif self.in_string:
                if c == _BACKSLASH:
                    if i + 1 < len(chunk):
                        skip = i + 1
                    else:
                        self.escape = True
                elif c == _QUOTE:
                    self.in_string = False
                    if self.string is not None and string_from is not None:
                        self.string += chunk[string_from:i]
                        self.last_string = self.string.decode(errors="replace")
                        self.string, string_from = None, None
            elif c == _QUOTE:
                self.in_string = True
                if self.item is None and self.stack == b"{":
                    self.string, string_from = bytearray(), i + 1
            elif c in (_LBRACE, _LBRACKET):
                if c == _LBRACE and self.item is None and self._item_level():
                    self.item, self.item_line, self.item_over = bytearray(), self.line, False
                    self.item_key = self.keys[-1] if self.keys else None
                    item_from = i
                if c == _LBRACKET:
                    self.keys.append(self.last_string if self.stack == b"{" else None)
                self.stack.append(c)
            elif self.stack:  # } or ]
                if self.stack.pop() == _LBRACKET and self.keys:
                    self.keys.pop()
                if c == _RBRACE and self.item is not None and item_from is not None and self._item_level():
                    self._collect(chunk[item_from : i + 1])
                    yield self.item_line, self.item_key, None if self.item_over else bytes(self.item)
                    self.item, item_from = None, None
        if self.item is not None and item_from is not None:
            self._collect(chunk[item_from:])
        if self.string is not None and string_from is not None:
            self.string += chunk[string_from:]

    def _collect(self, part: bytes) -> None:
        assert self.item is not None
        if self.item_over:
            return
        if len(self.item) + len(part) > MAX_RECORD_BYTES:
            self.item_over = True
            self.item = bytearray()
            return
        self.item += part


def detect(head: bytes) -> Format | None:
    """The format of a file from its first bytes, or None when they do not tell."""
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


def records(stream: BinaryIO, fmt: Format, head: bytes, *, entities: bool = True) -> Iterator[Record | Bad]:
    """Every record of the stream in order, each checked, or `Bad` with the reason; `head` is the
    stream's first bytes (a neo4j file may be a document). Without `entities`, entity records are
    passed over unread where that is cheap to tell (a pass that has no use for them)."""
    if fmt == "neo4j" and is_document(head):
        for line, key, raw in document_items(stream):
            if key == "entities" and not entities:
                continue
            if key == "end":
                yield Bad(line, "the document ends before it is closed")
            elif raw is None:
                yield Bad(line, f"an item over {MAX_RECORD_BYTES} bytes")
            else:
                yield _parse(line, raw, fmt, key)
        return
    for line, raw in lines(stream):
        if raw is None:
            yield Bad(line, f"a line over {MAX_RECORD_BYTES} bytes")
        elif not entities and raw.startswith(b'{"type":"entity"'):
            continue
        elif raw.strip() and raw.strip() not in (b"[", b"]", b","):
            yield _parse(line, raw, fmt, None)


def _parse(line: int, raw: bytes, fmt: Format, key: str | None) -> Record | Bad:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return Bad(line, f"not JSON ({str(exc).split(':')[0]})")
    if not isinstance(value, dict):
        return Bad(line, "not a JSON object")
    kind = _kind(value, fmt, key)
    try:
        if kind == "entity":
            return _ENTITY[fmt](line, value)
        if kind == "relation":
            return _RELATION[fmt](line, value)
        if kind == "history" and fmt == "engram":
            return _history(line, value)
        if kind == "episode" and fmt == "engram":
            return _episode(line, value)
        if kind in ("header", "end") and fmt == "engram":
            return _marker(line, kind, value)
    except Refusal as exc:
        return Bad(line, exc.reason, kind)
    return Bad(line, f"not a record of the {fmt} format")


def _kind(value: dict[str, Any], fmt: Format, key: str | None) -> str | None:
    if fmt != "neo4j":
        kind = value.get("type")
        return kind if isinstance(kind, str) else None
    if key == "entities":
        return "entity"
    if key == "relations":
        return "relation"
    if "source" in value or "target" in value or "relationType" in value:
        return "relation"
    if "name" in value:
        return "entity"
    return None


# --- checks: the tools' bounds ----------------------------------------------------------------


def _text(value: Any, what: str, *, low: int, high: int, strip: bool = True) -> str:
    if not isinstance(value, str):
        raise Refusal(f"{what}: must be a string")
    try:
        clean_text(value)
    except ValueError as exc:
        raise Refusal(f"{what}: {exc}") from None
    if strip:
        value = value.strip()
    if len(value) < low:
        raise Refusal(f"{what}: must not be empty")
    if len(value) > high:
        raise Refusal(f"{what}: at most {high} characters")
    return value


def _optional(value: Any, what: str, high: int) -> str | None:
    return None if value is None else _text(value, what, low=1, high=high)


def _name(value: Any, what: str = "name") -> str:
    return _text(value, what, low=1, high=200)


def _type(value: Any, what: str) -> str:
    return _text(value, what, low=1, high=100)


def _observation(value: Any, what: str) -> str:
    return _text(value, what, low=1, high=4000)


def _id(value: Any, what: str) -> str:
    if not isinstance(value, str) or not is_uuid(value):
        raise Refusal(f"{what}: must be an id (lowercase 8-4-4-4-12)")
    return value


def _optional_id(value: Any, what: str) -> str | None:
    return None if value is None else _id(value, what)


def _time(value: Any, what: str) -> datetime:
    if not isinstance(value, str) or len(value) > 64:
        raise Refusal(f"{what}: must be an ISO 8601 time")
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise Refusal(f"{what}: must be an ISO 8601 time") from None
    if at.tzinfo is None:
        raise Refusal(f"{what}: must carry a UTC offset")
    return at


def _optional_time(value: Any, what: str) -> datetime | None:
    return None if value is None else _time(value, what)


def _int(value: Any, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise Refusal(f"{what}: must be an integer from {low} to {high}")
    return value


def _properties(value: Any, what: str = "properties") -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise Refusal(f"{what}: must be a JSON object")
    try:
        return bounded_properties(value)
    except ValueError as exc:
        raise Refusal(f"{what}: {exc}") from None


def _list(value: Any, what: str, high: int) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise Refusal(f"{what}: must be a list")
    if len(value) > high:
        raise Refusal(f"{what}: at most {high} items")
    return value


def _strength(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise Refusal("strength: must be a number from 0 to 1")
    if not 0 <= value <= 1:
        raise Refusal("strength: must be a number from 0 to 1")
    return value


def _plain_observations(value: Any) -> list[Obs]:
    return [
        Obs(_observation(o, f"observations.{i}")) for i, o in enumerate(_list(value, "observations", MAX_OBSERVATIONS))
    ]


def _memory_entity(line: int, v: dict[str, Any]) -> EntityRecord:
    # Older versions of the reference wrote every field a client sent: the others are left out.
    return EntityRecord(
        line, _name(v.get("name")), _type(v.get("entityType"), "entityType"), _plain_observations(v.get("observations"))
    )


def _memory_relation(line: int, v: dict[str, Any]) -> RelationRecord:
    return RelationRecord(
        line, _name(v.get("from"), "from"), _name(v.get("to"), "to"), _type(v.get("relationType"), "relationType")
    )


def _neo4j_entity(line: int, v: dict[str, Any]) -> EntityRecord:
    return EntityRecord(
        line, _name(v.get("name")), _type(v.get("type"), "type"), _plain_observations(v.get("observations"))
    )


def _neo4j_relation(line: int, v: dict[str, Any]) -> RelationRecord:
    return RelationRecord(
        line,
        _name(v.get("source"), "source"),
        _name(v.get("target"), "target"),
        _type(v.get("relationType"), "relationType"),
    )


_ENGRAM_ENTITY = {
    "type", "id", "name", "entity_type", "description", "area", "topic", "subtopic", "certainty", "properties",
    "version", "created_at", "updated_at", "created_by", "updated_by", "deleted_at", "observations",
    "aliases", "merged_into",
}  # fmt: skip
_ENGRAM_RELATION = {
    "type", "id", "from", "to", "from_id", "to_id", "relation_type", "strength", "notes", "properties",
    "created_at", "created_by", "source", "valid_from", "valid_until",
}  # fmt: skip
_ENGRAM_OBSERVATION = {"text", "created_at", "created_by", "source", "valid_from", "valid_until"}
MAX_SOURCE = 200
MAX_REASON = 1000
_ENGRAM_HISTORY = {"type", "entity_id", "other_id", "relation_id", "action", "changes", "actor", "at"}
_ACTION = re.compile(r"^[a-z][a-z_]{0,49}$")


def _unknown(v: dict[str, Any], known: set[str]) -> None:
    extra = sorted(k for k in v if k not in known)
    if extra:
        raise Refusal(f"unknown field {extra[0][:60]!r}")


def _engram_entity(line: int, v: dict[str, Any]) -> EntityRecord:
    _unknown(v, _ENGRAM_ENTITY)
    observations = []
    for i, o in enumerate(_list(v.get("observations"), "observations", MAX_OBSERVATIONS)):
        if not isinstance(o, dict) or set(o) - _ENGRAM_OBSERVATION:
            raise Refusal(f"observations.{i}: must be {{{', '.join(sorted(_ENGRAM_OBSERVATION))}}}")
        obs = Obs(
            _observation(o.get("text"), f"observations.{i}.text"),
            _optional_time(o.get("created_at"), f"observations.{i}.created_at"),
            _optional(o.get("created_by"), f"observations.{i}.created_by", MAX_ACTOR),
            _optional(o.get("source"), f"observations.{i}.source", MAX_SOURCE),
            _optional_time(o.get("valid_from"), f"observations.{i}.valid_from"),
            _optional_time(o.get("valid_until"), f"observations.{i}.valid_until"),
        )
        _interval(obs.valid_from, obs.valid_until, f"observations.{i}")
        observations.append(obs)
    description = v.get("description")
    fields = {
        "description": "" if description is None else _text(description, "description", low=0, high=4000, strip=False),
        "area": _optional(v.get("area"), "area", 100),
        "topic": _optional(v.get("topic"), "topic", 100),
        "subtopic": _optional(v.get("subtopic"), "subtopic", 100),
        "certainty": None if v.get("certainty") is None else _int(v.get("certainty"), "certainty", 0, 100),
        "properties": _properties(v.get("properties")) or {},
    }
    return EntityRecord(
        line,
        _name(v.get("name")),
        _type(v.get("entity_type"), "entity_type"),
        observations,
        id=_id(v.get("id"), "id"),
        fields=fields,
        version=1 if v.get("version") is None else _int(v.get("version"), "version", 1, _INT32),
        created_at=_optional_time(v.get("created_at"), "created_at"),
        updated_at=_optional_time(v.get("updated_at"), "updated_at"),
        created_by=_optional(v.get("created_by"), "created_by", MAX_ACTOR),
        updated_by=_optional(v.get("updated_by"), "updated_by", MAX_ACTOR),
        deleted_at=_optional_time(v.get("deleted_at"), "deleted_at"),
        aliases=[_name(a, f"aliases.{i}") for i, a in enumerate(_list(v.get("aliases"), "aliases", MAX_ALIASES))],
        merged_into=_optional_id(v.get("merged_into"), "merged_into"),
    )


def _engram_relation(line: int, v: dict[str, Any]) -> RelationRecord:
    _unknown(v, _ENGRAM_RELATION)
    extra: dict[str, Any] = {}
    if (strength := _strength(v.get("strength"))) is not None:
        extra["strength"] = strength
    if v.get("notes") is not None:
        extra["notes"] = _text(v.get("notes"), "notes", low=0, high=2000, strip=False)
    if (props := _properties(v.get("properties"))) is not None:
        extra["properties"] = props
    if v.get("created_at") is not None:
        _time(v.get("created_at"), "created_at")
        extra["created_at"] = v["created_at"]  # kept as written
    if v.get("created_by") is not None:
        extra["created_by"] = _text(v.get("created_by"), "created_by", low=1, high=MAX_ACTOR)
    if v.get("source") is not None:
        extra["source"] = _text(v.get("source"), "source", low=1, high=MAX_SOURCE)
    bounds = [_optional_time(v.get(k), k) for k in ("valid_from", "valid_until")]
    _interval(*bounds, "relation")
    for key in ("valid_from", "valid_until"):
        if v.get(key) is not None:
            extra[key] = v[key]  # kept as written
    return RelationRecord(
        line,
        _name(v.get("from"), "from"),
        _name(v.get("to"), "to"),
        _type(v.get("relation_type"), "relation_type"),
        id=_optional_id(v.get("id"), "id"),
        source_id=_optional_id(v.get("from_id"), "from_id"),
        target_id=_optional_id(v.get("to_id"), "to_id"),
        extra=extra,
    )


def _interval(valid_from: datetime | None, valid_until: datetime | None, what: str) -> None:
    if valid_from is not None and valid_until is not None and valid_from >= valid_until:
        raise Refusal(f"{what}: valid_from must be before valid_until")


def _history(line: int, v: dict[str, Any]) -> HistoryRecord:
    _unknown(v, _ENGRAM_HISTORY)
    action = v.get("action")
    if not isinstance(action, str) or not _ACTION.match(action):
        raise Refusal("action: must be a history action such as 'created'")
    changes = v.get("changes", {})
    if not isinstance(changes, dict):
        raise Refusal("changes: must be a JSON object")
    try:
        storable_json(changes)
    except ValueError as exc:
        raise Refusal(f"changes: {str(exc).replace('properties', 'values')}") from None
    if len(orjson.dumps(changes)) > MAX_HISTORY_CHANGES_BYTES:
        raise Refusal(f"changes: at most {MAX_HISTORY_CHANGES_BYTES} bytes of JSON")
    return HistoryRecord(
        line,
        _id(v.get("entity_id"), "entity_id"),
        _optional_id(v.get("other_id"), "other_id"),
        _optional_id(v.get("relation_id"), "relation_id"),
        action,
        changes,
        _text(v.get("actor"), "actor", low=1, high=MAX_ACTOR),
        _time(v.get("at"), "at"),
    )


_ENGRAM_EPISODE = {
    "type", "text", "at", "source", "created_by", "created_at", "valid_from", "valid_until", "ended_why", "entities",
}  # fmt: skip
_ROLES = ("speaker", "participant", "mentioned")


def _episode(line: int, v: dict[str, Any]) -> EpisodeRecord:
    _unknown(v, _ENGRAM_EPISODE)
    bounds = [_optional_time(v.get(k), k) for k in ("valid_from", "valid_until")]
    _interval(*bounds, "episode")
    involved = []
    for i, e in enumerate(_list(v.get("entities"), "entities", MAX_EPISODE_ENTITIES)):
        if not isinstance(e, dict) or set(e) - {"id", "name", "role"}:
            raise Refusal(f"entities.{i}: must be an object of id, name and role")
        if e.get("role") not in _ROLES:
            raise Refusal(f"entities.{i}.role: must be one of {', '.join(_ROLES)}")
        ref = _optional_id(e.get("id"), f"entities.{i}.id")
        involved.append((ref, _name(e.get("name"), f"entities.{i}.name"), e["role"]))
    return EpisodeRecord(
        line,
        _text(v.get("text"), "text", low=1, high=MAX_EPISODE_CHARS),
        _time(v.get("at"), "at"),
        _optional(v.get("source"), "source", MAX_SOURCE),
        _optional(v.get("created_by"), "created_by", MAX_ACTOR),
        _optional_time(v.get("created_at"), "created_at"),
        *bounds,
        _optional(v.get("ended_why"), "ended_why", MAX_REASON),
        involved,
    )


def _marker(line: int, kind: Literal["header", "end"], v: dict[str, Any]) -> Marker:
    if kind == "header" and (v.get("format") != "engram" or v.get("version") != ENGRAM_VERSION):
        raise Refusal(f"this reads version {ENGRAM_VERSION} of the engram format")
    for key, value in v.items():
        if key not in ("type", "format") and not (isinstance(value, int | bool) or value is None):
            raise Refusal(f"{key[:60]}: must be a number or a boolean")
    return Marker(line, kind, v)


_ENTITY = {"engram": _engram_entity, "memory": _memory_entity, "neo4j": _neo4j_entity}
_RELATION = {"engram": _engram_relation, "memory": _memory_relation, "neo4j": _neo4j_relation}
assert MAX_JSON_DEPTH <= 64  # orjson's own nesting limit (1024) is far above the checks above


# --- writing ----------------------------------------------------------------------------------


def _when(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()


def line(value: dict[str, Any]) -> bytes:
    return orjson.dumps(value) + b"\n"


def header(deleted: bool, history: bool) -> bytes:
    return line(
        {"type": "header", "format": "engram", "version": ENGRAM_VERSION, "deleted": deleted, "history": history}
    )


def end(entities: int, relations: int, history: int, episodes: int = 0) -> bytes:
    """The end line; `episodes` only where there are any (files without them read as before)."""
    counts = {"entities": entities, "relations": relations, "history": history}
    return line({"type": "end", **counts, **({"episodes": episodes} if episodes else {})})


def engram_entity(
    row: Any, observations: Iterable[Any], aliases: Sequence[str] = (), merged_into: str | None = None
) -> bytes:
    """An entity line; `aliases` and `merged_into` only where there are any (files of entities
    without them read as before)."""
    extra: dict[str, Any] = {"aliases": list(aliases)} if aliases else {}
    if merged_into:
        extra["merged_into"] = merged_into
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
                for o in observations
            ],
        }
    )


def engram_relation(r: Any) -> bytes:
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
    for key in ("strength", "notes", "properties", "created_at", "created_by", "source", "valid_from", "valid_until"):
        if p.get(key) is not None:
            out[key] = p[key]
    return line(out)


def engram_history(h: Any) -> bytes:
    return line(
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


def engram_episode(e: Any) -> bytes:
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
        }
    )


def memory_entity(row: Any, observations: Iterable[Any]) -> bytes:
    texts = [o.text for o in observations]
    return line({"type": "entity", "name": row.name, "entityType": row.type, "observations": texts})


def memory_relation(r: Any) -> bytes:
    return line({"type": "relation", "from": r.source, "to": r.target, "relationType": r.props.get("type")})


NEO4J_OPEN = b'{"entities": [\n'
NEO4J_MIDDLE = b'\n],\n"relations": [\n'
NEO4J_CLOSE = b"\n]}\n"


def neo4j_entity(row: Any, observations: Iterable[Any], first: bool) -> bytes:
    item = orjson.dumps({"name": row.name, "type": row.type, "observations": [o.text for o in observations]})
    return (b"" if first else b",\n") + item


def neo4j_relation(r: Any, first: bool) -> bytes:
    item = orjson.dumps({"source": r.source, "target": r.target, "relationType": r.props.get("type")})
    return (b"" if first else b",\n") + item
