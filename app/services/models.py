"""The shapes native tools accept and return. Every string, list and number is bounded here, at the edge."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal

import orjson
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from app.ids import UUID_PATTERN as UUID_PATTERN  # the console checks ids with it too
from app.scopes import Scope
from app.services.budget import Clipped

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
CURSOR_PATTERN = r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$"
Cursor = Annotated[str, StringConstraints(min_length=1, max_length=1000, pattern=CURSOR_PATTERN)]
Certainty = Annotated[int, Field(ge=0, le=100)]
# Where a fact came from, in its writer's words (a document, a conversation, a tool): free text.
Source = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200), Clean]
Reason = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=1000), Clean]

# Names, types and facts as `@modelcontextprotocol/server-memory` keeps them, for its drop-in tools
# and for imported files: byte for byte (" Ada", "Ada " and "Ada" are three entities there), and
# longer than the native tools' bounds, since the reference has none. A name is indexed (exact,
# case-folded, trigram); B-tree entries hold at most 2,704 bytes, so 500 characters of up to four
# bytes each fit. An empty fact is accepted and skipped (the reference would store it).
EXACT_NAME_MAX = 500
EXACT_OBSERVATION_MAX = 16_000
ExactName = Annotated[str, StringConstraints(min_length=1, max_length=EXACT_NAME_MAX), Clean]
ExactType = Annotated[str, StringConstraints(min_length=1, max_length=200), Clean]
ExactObservation = Annotated[str, StringConstraints(max_length=EXACT_OBSERVATION_MAX), Clean]


_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}")


def iso_only(value: Any) -> Any:
    """Times are ISO 8601 text: numbers (which the parser would read as Unix times) are refused."""
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str) or not _ISO_DATE.match(value):
        raise ValueError("must be an ISO 8601 time, e.g. 2024-01-31T12:00:00Z")
    return value


def aware(value: datetime) -> datetime:
    """A moment in UTC: a time without a zone is taken as UTC; one that leaves the calendar once
    in UTC (year 1 or 9999 with an offset) is refused."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("must lie between years 1 and 9999 in UTC") from None


# A point in time (ISO 8601); without a zone, UTC.
Moment = Annotated[datetime, BeforeValidator(iso_only), AfterValidator(aware)]


# What the reading tools take to see the graph at another moment, or whole.
AsOf = Moment | None  # read the memory as it was (or will be) then
IncludeInvalid = Annotated[
    bool,
    Field(
        strict=True,  # true or false: not "yes", not 1
    ),
]
Sources = Annotated[
    list[Source] | None,
    Field(max_length=20, description="Only facts from these sources."),
]
Since = Annotated[Moment | None, Field(description="Only facts written since.")]
Until = Annotated[Moment | None, Field(description="Only facts written before.")]
At = Annotated[Moment | None, Field(description="When they end; default now.")]
WhyEnded = Annotated[Reason | None, Field(description="Why; kept in the history.")]


def check_interval(valid_from: datetime | None, valid_until: datetime | None) -> None:
    """A validity interval must not be empty."""
    if valid_from is not None and valid_until is not None and valid_from >= valid_until:
        raise ValueError("`valid_from` must be before `valid_until`")


# The bounds of a fact's validity interval [valid_from, valid_until), as writes take them.
ValidFrom = Annotated[
    Moment | None,
    Field(description="Default: always."),
]
ValidUntil = Annotated[Moment | None, Field(description="Default: no end.")]


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
    name: Name = Field(description="Unique name, e.g. 'Ada Lovelace'.")
    type: TypeName = Field(description="Kind, e.g. 'person'.")
    description: Description | None = None
    observations: Annotated[list[Observation], Field(max_length=100)] = Field(
        default_factory=list, description="Facts, one per string."
    )
    area: Label | None = None
    topic: Label | None = None
    subtopic: Label | None = None
    certainty: Certainty | None = Field(None)
    properties: dict[str, Any] | None = Field(None)
    # As an item of append_observations: the interval covers this entry's observations.
    valid_from: ValidFrom = None
    valid_until: ValidUntil = None

    _check_properties = field_validator("properties")(bounded_properties)

    @model_validator(mode="after")
    def _interval(self) -> EntityIn:
        check_interval(self.valid_from, self.valid_until)
        if (self.valid_from is not None or self.valid_until is not None) and not self.observations:
            # Entities have no interval: a bound without facts would be silently dropped.
            raise ValueError("`valid_from`/`valid_until` apply to the entry's observations: give some")
        return self


class Validity(Strict):
    """When the facts of a write hold, and where they came from: both bounds are optional."""

    valid_from: ValidFrom = None
    valid_until: ValidUntil = None
    source: Source | None = Field(None, description="Default: your client id.")

    @model_validator(mode="after")
    def _interval(self) -> Validity:
        check_interval(self.valid_from, self.valid_until)
        return self


class RelationIn(Validity):
    from_: Ref = Field(alias="from", description="Entity id or name.")
    to: Ref = Field(description="Entity id or name.")
    type: TypeName = Field(description="Active voice, e.g. 'works at'.")
    strength: float | None = Field(None, ge=0, le=1, allow_inf_nan=False)
    notes: Notes | None = None
    properties: dict[str, Any] | None = None

    _check_properties = field_validator("properties")(bounded_properties)


class RelationKey(Strict):
    from_: Ref = Field(alias="from", description="Entity id or name.")
    to: Ref = Field(description="Entity id or name.")
    type: TypeName


class ObservationsIn(Strict):
    entity: Ref = Field(description="Entity id or name.")
    observations: Annotated[list[Observation], Field(min_length=1, max_length=100)]


class NewObservations(ObservationsIn, Validity):
    """Facts for one entity."""


class EntityPatch(Strict):
    """Fields to set; others stay."""

    name: Name | None = None
    type: TypeName | None = None
    description: Description | None = None
    area: Label | None = None
    topic: Label | None = None
    subtopic: Label | None = None
    certainty: Certainty | None = None
    properties: dict[str, Any] | None = Field(None, description="Merged by key.")
    unset_properties: Annotated[
        list[Annotated[str, StringConstraints(max_length=200), Clean]], Field(max_length=50)
    ] = []
    clear: Annotated[list[ClearableField], Field(max_length=5)] = Field(
        default_factory=list, description="Fields to empty."
    )

    _check_properties = field_validator("properties")(bounded_properties)


# --- outputs --------------------------------------------------------------------------------


class EntitySummary(Clipped):
    clip_field: ClassVar[str] = "description"
    id: str
    name: str
    type: str
    description: str = ""
    area: str | None = None
    topic: str | None = None
    subtopic: str | None = None
    certainty: int | None = None


class Relation(Clipped):
    model_config = ConfigDict(populate_by_name=True)
    clip_field: ClassVar[str] = "notes"

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
    source: str | None = Field(None, description="Where the relation came from, as its writer said.")
    valid_from: str | None = Field(None, description="When it became true; absent: no lower bound.")
    valid_until: str | None = Field(None, description="When it stopped (or stops) being true; absent: no end.")


class ObservationRecord(Clipped):
    """One observation with its record: where it came from, who wrote it when, and when it holds."""

    clip_field: ClassVar[str] = "text"
    text: str
    source: str | None = Field(None, description="Where it came from, as its writer said (absent for old facts).")
    created_by: str
    created_at: datetime
    valid_from: datetime | None = Field(None, description="When it became true; absent: no lower bound.")
    valid_until: datetime | None = Field(None, description="When it stopped (or stops) being true; absent: no end.")
    pinned_at: datetime | None = Field(None, description="When it was pinned (pin_facts); absent: not pinned.")


class HistoryEntry(Clipped):
    id: int
    at: datetime
    actor: str
    action: str
    entity_id: str
    other_id: str | None = None
    relation_id: str | None = None
    changes: dict[str, Any]


class Entity(EntitySummary):
    aliases: list[str] = Field(default_factory=list, description="Other names the entity answers to.")
    properties: dict[str, Any] = Field(default_factory=dict)
    observations: list[str]
    observations_total: int = Field(description="All observations; more than listed when capped.")
    observation_records: list[ObservationRecord] = Field(
        default_factory=list, description="The same observations, in the same order, each with its record."
    )
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
        description="Texts saved without a vector (provider down): found by words now, by meaning once embedded.",
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


class InvalidatedRelations(BaseModel):
    invalidated: list[Relation] = Field(description="The relations this call ended, as they are now.")
    unchanged: int = Field(description="How many of the given relations do not exist or had ended by then.")


class HistoryPage(BaseModel):
    entity: EntitySummary
    entries: list[HistoryEntry]
    next_cursor: str | None = None


class FoundEntity(EntitySummary):
    matched_alias: str | None = Field(
        None, description="The alias `name_contains` matched, when the name itself did not."
    )


class EntityPage(BaseModel):
    entities: list[FoundEntity]
    total: int
    next_cursor: str | None = None


class Neighbor(Clipped):
    clip_field: ClassVar[str] = "entity"
    entity: EntitySummary
    depth: int = Field(description="Relations between the start and this entity.")
    via: Relation = Field(description="The relation that first reached this entity.")


class NeighborsResult(BaseModel):
    start: EntitySummary
    neighbors: list[Neighbor]
    truncated: bool = Field(
        description="`limit` or a server bound (a hub) cut the walk: narrow it with `relation_types` or `direction`."
    )
    omitted: int = Field(0, description="Neighbours found but left out: they did not fit `max_tokens`.")


class PathResult(BaseModel):
    found: bool
    length: int | None = Field(None, description="Relations on the path.")
    nodes: list[EntitySummary] = Field(default_factory=list, description="From start to end.")
    relations: list[Relation] = Field(default_factory=list, description="relations[i] joins nodes[i] and nodes[i+1].")
    truncated: bool = Field(
        False,
        description="A server bound (a hub) cut the search; a path may lie beyond: narrow it by type or direction.",
    )


class SubgraphResult(BaseModel):
    entities: list[EntitySummary]
    relations: list[Relation]
    truncated: bool
    omitted: int = Field(0, description="Entities and relations found but left out: they did not fit `max_tokens`.")


class HierarchyNode(BaseModel):
    name: str | None = Field(description="None groups the entities without a value at this level.")
    count: int
    children: list[HierarchyNode] = Field(default_factory=list)


class HierarchyResult(BaseModel):
    areas: list[HierarchyNode]
    total: int
    truncated: bool = Field(
        False,
        description="The tree was cut to its bounds; counts stay exact.",
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


class ApiKey(BaseModel):
    id: str
    name: str
    scopes: list[str]
    created_at: datetime
    expires_at: datetime | None = None
    revoked_at: datetime | None = None


ApiKeyId = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]{12}$")]
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


# --- merges, aliases, duplicates ----------------------------------------------------------------

PropertiesRule = Literal["survivor", "merged"]


class MergeResult(BaseModel):
    entity: Changed = Field(description="The surviving entity and its new version.")
    merged: list[EntitySummary] = Field(description="The entities folded into it; they no longer exist apart.")
    aliases_added: list[str] = Field(description="Aliases the survivor gained: the merged names and their aliases.")
    aliases_not_kept: list[str] = Field(
        default_factory=list, description="Merged names not kept as aliases: another entity holds them as an alias."
    )
    observations_added: int = Field(description="Observations moved to the survivor (duplicates skipped).")
    relations_moved: int = Field(description="Relations re-pointed to the survivor.")
    relations_folded: int = Field(description="Relations that became copies of another and were folded into it.")
    self_loops_dropped: int = Field(description="Relations among the merged entities that became self-loops.")
    property_conflicts: list[str] = Field(description="Property keys whose values differed; the rule chose.")
    embeddings_pending: int = 0


class AliasesResult(BaseModel):
    entity: Changed
    aliases: list[str] = Field(description="All the entity's aliases after the call.")
    changed: list[str] = Field(description="The aliases added, or removed.")
    unchanged: list[str] = Field(
        default_factory=list, description="Given aliases that needed no change (held already, or not held)."
    )


class DuplicateReason(BaseModel):
    kind: Literal["name", "semantic", "shared_neighbors"]
    similarity: float | None = Field(None, description="name: trigram similarity; semantic: cosine similarity.")
    count: int | None = Field(None, description="shared_neighbors: how many live neighbours both have.")
    examples: list[str] = Field(default_factory=list, description="shared_neighbors: a few of their names.")


class DuplicatePair(BaseModel):
    a: EntitySummary
    b: EntitySummary
    score: float = Field(description="0-1: how likely the two are one thing.")
    reasons: list[DuplicateReason]


class DuplicatesPage(BaseModel):
    pairs: list[DuplicatePair] = Field(description="Candidates found in this slice, best first.")
    scanned: int = Field(description="Entities this call looked at.")
    next_cursor: str | None = Field(None, description="Pass back as `cursor` to look at the next slice.")
