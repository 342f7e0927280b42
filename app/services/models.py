"""The shapes tools accept and return. Every string, list and number is bounded here, at the edge."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
TypeName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=100)]
Ref = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
Label = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=100)]
Observation = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=4000)]
Description = Annotated[str, StringConstraints(max_length=4000)]
Notes = Annotated[str, StringConstraints(max_length=2000)]
Certainty = Annotated[int, Field(ge=0, le=100)]
Direction = Literal["out", "in", "both"]


def _bounded_properties(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """Free-form JSON, but small: at most 50 keys and 8 KiB once encoded."""
    if value is None:
        return None
    if len(value) > 50:
        raise ValueError("at most 50 properties")
    if len(orjson.dumps(value)) > 8192:
        raise ValueError("properties must encode to at most 8 KiB of JSON")
    return value


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- inputs ---------------------------------------------------------------------------------


class EntityIn(Strict):
    name: Name = Field(description="Unique name within the memory, e.g. 'Ada Lovelace'.")
    type: TypeName = Field(description="Free-text kind, e.g. 'person', 'project', 'works at'.")
    description: Description | None = None
    observations: Annotated[list[Observation], Field(max_length=100)] = Field(
        default_factory=list, description="Atomic facts about the entity, one per string."
    )
    area: Label | None = None
    topic: Label | None = None
    subtopic: Label | None = None
    certainty: Certainty | None = Field(None, description="How sure the facts are, 0-100.")
    properties: dict[str, Any] | None = Field(None, description="Any small JSON object (≤ 50 keys, ≤ 8 KiB).")

    _check_properties = field_validator("properties")(_bounded_properties)


class RelationIn(Strict):
    from_: Ref = Field(alias="from", description="Source entity: id or name.")
    to: Ref = Field(description="Target entity: id or name.")
    type: TypeName = Field(description="Active-voice relation, e.g. 'works at', 'depends on'.")
    strength: float | None = Field(None, ge=0, le=1)
    notes: Notes | None = None
    properties: dict[str, Any] | None = None

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    _check_properties = field_validator("properties")(_bounded_properties)


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
    strength: float | None = None
    notes: str | None = None
    properties: dict[str, Any] | None = None


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


class ConnectItem(BaseModel):
    status: Literal["created", "exists"]
    relation: Relation


class ConnectResult(BaseModel):
    results: list[ConnectItem]


class Neighbor(BaseModel):
    entity: EntitySummary
    depth: int = Field(description="Relations between the start and this entity.")
    via: Relation = Field(description="The relation by which the walk first reached this entity.")


class NeighborsResult(BaseModel):
    start: EntitySummary
    neighbors: list[Neighbor]
    truncated: bool = Field(description="True when `limit` cut the walk short.")
