"""The shapes native tools accept and return. Every string, list and number is bounded here, at the edge."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any, Literal

import orjson
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, field_validator

from app.store.entities import UUID_PATTERN

MAX_JSON_DEPTH = 32
_INT64 = (-(2**63), 2**63 - 1)


def clean_text(value: str) -> str:
    """Refuse what PostgreSQL cannot store in `text` or `jsonb`: NUL characters and lone surrogates."""
    if "\x00" in value:
        raise ValueError("must not contain NUL (\\u0000) characters")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode (no lone surrogates)") from None
    return value


Clean = AfterValidator(clean_text)
Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200), Clean]
TypeName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=100), Clean]
Ref = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200), Clean]
Label = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=100), Clean]
Observation = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=4000), Clean]
Description = Annotated[str, StringConstraints(max_length=4000), Clean]
Notes = Annotated[str, StringConstraints(max_length=2000), Clean]
Text = Annotated[str, StringConstraints(min_length=1, max_length=200), Clean]  # a search or filter string
LongText = Annotated[str, StringConstraints(max_length=1000), Clean]  # a search query
# Ids are the canonical form Engram returns (lowercase 8-4-4-4-12); other spellings are refused.
Id = Annotated[str, StringConstraints(pattern=UUID_PATTERN)]
# A cursor is base64url text, a dot, and its signature: nothing else can be one.
Cursor = Annotated[str, StringConstraints(min_length=1, max_length=1000, pattern=r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$")]
Certainty = Annotated[int, Field(ge=0, le=100)]
Direction = Literal["out", "in", "both"]
ClearableField = Literal["description", "area", "topic", "subtopic", "certainty"]


def _check_json(value: Any, depth: int = 1) -> None:
    """Values every store keeps exactly: text without NUL, 64-bit integers, finite doubles below 2^63."""
    if isinstance(value, dict | list) and depth > MAX_JSON_DEPTH:
        raise ValueError(f"properties may nest at most {MAX_JSON_DEPTH} levels deep")
    if isinstance(value, str):
        clean_text(value)
    elif isinstance(value, bool) or value is None:
        pass
    elif isinstance(value, int):
        if not _INT64[0] <= value <= _INT64[1]:
            raise ValueError("integers in properties must fit in 64 bits")
    elif isinstance(value, float):
        if not math.isfinite(value) or abs(value) >= 2.0**63:
            raise ValueError("numbers in properties must be finite and below 2^63 in magnitude")
    elif isinstance(value, dict):
        for key, item in value.items():
            clean_text(key)
            _check_json(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_json(item, depth + 1)
    else:
        raise ValueError(f"properties hold JSON values only, not {type(value).__name__}")


def storable_json(value: Any) -> None:
    """Refuse JSON that the stores would not keep exactly (see `_check_json`), nested at most 32 levels."""
    _check_json(value)


def bounded_properties(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """Free-form JSON, but small and storable: at most 50 keys, 32 levels and 8 KiB once encoded."""
    if value is None:
        return None
    if len(value) > 50:
        raise ValueError("at most 50 properties")
    _check_json(value)
    if len(orjson.dumps(value)) > 8192:
        raise ValueError("properties must encode to at most 8 KiB of JSON")
    return value


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


# --- inputs ---------------------------------------------------------------------------------


class EntityIn(Strict):
    name: Name = Field(description="Unique name within the memory, e.g. 'Ada Lovelace'.")
    type: TypeName = Field(description="Free-text kind, e.g. 'person', 'project'.")
    description: Description | None = None
    observations: Annotated[list[Observation], Field(max_length=100)] = Field(
        default_factory=list, description="Atomic facts about the entity, one per string."
    )
    area: Label | None = None
    topic: Label | None = None
    subtopic: Label | None = None
    certainty: Certainty | None = Field(None, description="How sure the facts are, 0-100.")
    properties: dict[str, Any] | None = Field(None, description="Any small JSON object (≤ 50 keys, ≤ 8 KiB).")

    _check_properties = field_validator("properties")(bounded_properties)


class RelationIn(Strict):
    from_: Ref = Field(alias="from", description="Source entity: id or name.")
    to: Ref = Field(description="Target entity: id or name.")
    type: TypeName = Field(description="Active-voice relation, e.g. 'works at', 'depends on'.")
    strength: float | None = Field(None, ge=0, le=1, allow_inf_nan=False)
    notes: Notes | None = None
    properties: dict[str, Any] | None = None

    _check_properties = field_validator("properties")(bounded_properties)


class RelationKey(Strict):
    from_: Ref = Field(alias="from", description="Source entity: id or name.")
    to: Ref = Field(description="Target entity: id or name.")
    type: TypeName


class ObservationsIn(Strict):
    entity: Ref = Field(description="The entity: id or name.")
    observations: Annotated[list[Observation], Field(min_length=1, max_length=100)]


class EntityPatch(Strict):
    """Fields to change; a field left out keeps its value."""

    name: Name | None = None
    type: TypeName | None = None
    description: Description | None = None
    area: Label | None = None
    topic: Label | None = None
    subtopic: Label | None = None
    certainty: Certainty | None = None
    properties: dict[str, Any] | None = Field(None, description="Merged key by key into the stored properties.")
    unset_properties: Annotated[
        list[Annotated[str, StringConstraints(max_length=200), Clean]], Field(max_length=50)
    ] = []
    clear: Annotated[list[ClearableField], Field(max_length=5)] = Field(
        default_factory=list, description="Fields to empty."
    )

    _check_properties = field_validator("properties")(bounded_properties)


# --- outputs --------------------------------------------------------------------------------


class EntitySummary(BaseModel):
    id: str
    name: str
    type: str
    description: str = ""
    area: str | None = None
    topic: str | None = None
    subtopic: str | None = None
    certainty: int | None = None


class Relation(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    id: str
    type: str
    from_: str = Field(alias="from", description="Source entity name.")
    to: str = Field(description="Target entity name.")
    from_id: str
    to_id: str
    strength: float | None = None
    notes: str | None = None
    properties: dict[str, Any] | None = None
    created_at: str | None = None
    created_by: str | None = None


class HistoryEntry(BaseModel):
    id: int
    at: datetime
    actor: str
    action: str
    entity_id: str
    other_id: str | None = None
    relation_id: str | None = None
    changes: dict[str, Any]


class Entity(EntitySummary):
    properties: dict[str, Any] = Field(default_factory=dict)
    observations: list[str]
    observations_total: int = Field(description="All observations; more than listed when capped.")
    version: int
    created_at: datetime
    updated_at: datetime
    created_by: str
    updated_by: str
    relations: list[Relation] | None = Field(None, description="Relations touching this entity (depth 1).")
    relations_truncated: bool = False
    history: list[HistoryEntry] | None = None


class UpsertItem(BaseModel):
    name: str
    id: str
    status: Literal["created", "updated", "unchanged", "skipped"]
    version: int
    observations_added: int


class UpsertResult(BaseModel):
    results: list[UpsertItem]
    embeddings_pending: int = Field(
        0,
        description="Texts saved without an embedding yet (provider unavailable): `search` finds them by words now, "
        "by meaning once a background task has embedded them.",
    )


class Changed(BaseModel):
    id: str
    name: str
    version: int


class ChangeResult(BaseModel):
    changed: list[Changed] = Field(description="Entities this call changed, with their new versions.")
    unchanged: list[str] = Field(default_factory=list, description="Ids or names that needed no change.")


class ObservationsChange(BaseModel):
    entity_id: str
    name: str
    observations: list[str] = Field(description="The observations added, or removed.")
    version: int


class ObservationsResult(BaseModel):
    results: list[ObservationsChange]


class ConnectItem(BaseModel):
    status: Literal["created", "exists"]
    relation: Relation


class ConnectResult(BaseModel):
    results: list[ConnectItem]


class DisconnectResult(BaseModel):
    removed: list[Relation]
    not_found: int = Field(description="How many of the given relations did not exist.")


class HistoryPage(BaseModel):
    entity: EntitySummary
    entries: list[HistoryEntry]
    next_cursor: str | None = None


class EntityPage(BaseModel):
    entities: list[EntitySummary]
    total: int
    next_cursor: str | None = None


class Neighbor(BaseModel):
    entity: EntitySummary
    depth: int = Field(description="Relations between the start and this entity.")
    via: Relation = Field(description="The relation by which the walk first reached this entity.")


class NeighborsResult(BaseModel):
    start: EntitySummary
    neighbors: list[Neighbor]
    truncated: bool = Field(
        description="True when `limit` cut the walk short, or a server bound on one level's size (a hub's "
        "relations) did: narrow it with `relation_types` or `direction`."
    )


class PathResult(BaseModel):
    found: bool
    length: int | None = Field(None, description="Relations on the path.")
    nodes: list[EntitySummary] = Field(default_factory=list, description="From start to end.")
    relations: list[Relation] = Field(default_factory=list, description="relations[i] joins nodes[i] and nodes[i+1].")
    truncated: bool = Field(
        False,
        description="True when a server bound on one search level's size cut the search: a path (or a shorter "
        "one) may exist beyond what was read; narrow it with `relation_types` or `direction`.",
    )


class SubgraphResult(BaseModel):
    entities: list[EntitySummary]
    relations: list[Relation]
    truncated: bool


class HierarchyNode(BaseModel):
    name: str | None = Field(description="None groups the entities without a value at this level.")
    count: int
    children: list[HierarchyNode] = Field(default_factory=list)


class HierarchyResult(BaseModel):
    areas: list[HierarchyNode]
    total: int
    truncated: bool = Field(
        False,
        description="True when the tree was cut to its bounds (children per node, nodes in all); counts stay "
        "exact. List one area or topic with find_entities.",
    )


class Count(BaseModel):
    name: str
    count: int


class Connected(BaseModel):
    id: str
    name: str
    type: str
    degree: int


class Activity(BaseModel):
    at: datetime
    actor: str
    action: str
    entity_id: str


class StatsResult(BaseModel):
    entities: int
    deleted_entities: int
    relations: int
    observations: int
    entity_types: list[Count]
    relation_types: list[Count]
    most_connected: list[Connected]
    recent_activity: list[Activity]


class StatusResult(BaseModel):
    database: Literal["ok", "unavailable"]
    graph: Literal["ok", "unavailable"]
    embeddings: str
    tools: list[str] = Field(description="Tools usable right now.")
    version: str


class AuditEntry(BaseModel):
    id: int
    at: datetime
    subject: str
    client_id: str
    tool: str
    affected: list[str]
    outcome: str
    duration_ms: float
    request_id: str


class ApiKey(BaseModel):
    id: str
    name: str
    scopes: list[str]
    created_at: datetime
    expires_at: datetime | None = None
    revoked_at: datetime | None = None


ApiKeyId = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]{12}$")]
Scope = Literal["memory:read", "memory:write", "memory:admin"]
# A label to recognise a key by: printable (no control characters, NUL included), at most 200.
KeyName = Annotated[
    str, StringConstraints(strip_whitespace=True, max_length=200, pattern=r"^[^\x00-\x1f\x7f-\x9f]*$"), Clean
]


class NewApiKey(BaseModel):
    """A key a tenant's administrator makes: scopes among their own, an optional lifetime in days."""

    model_config = ConfigDict(extra="forbid")

    name: KeyName = ""
    scopes: Annotated[list[Scope], Field(min_length=1, max_length=3)]
    expires_days: Annotated[int, Field(ge=1, le=3650)] | None = None

    @field_validator("scopes")
    @classmethod
    def _distinct(cls, scopes: list[str]) -> list[str]:
        if len(set(scopes)) != len(scopes):
            raise ValueError("each scope at most once")
        return scopes


class CreatedApiKey(BaseModel):
    """A key just made: `key` is its only showing (only a hash of the secret is kept)."""

    key: str
    api_key: ApiKey


class AuditPage(BaseModel):
    entries: list[AuditEntry]
    next_cursor: str | None = None
