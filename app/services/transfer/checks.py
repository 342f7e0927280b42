"""A record's fields checked with the tools' own types (app/services/models.py), so that every
bound lives once; a failed check is a `Refusal` that names the field."""

from __future__ import annotations

import math
from datetime import datetime
from functools import cache
from typing import Annotated, Any

from pydantic import StringConstraints, TypeAdapter, ValidationError

from app.services import models
from app.services.transfer.records import MAX_ACTOR, Refusal
from app.services.writer import FactIn
from app.store.entities import is_uuid

INT32 = 2**31 - 1
Actor = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_ACTOR), models.Clean]


@cache
def _adapter(kind: Any) -> TypeAdapter[Any]:
    return TypeAdapter(kind)


def check(kind: Any, value: Any, what: str) -> Any:
    """`value` checked as the tools check `kind` (strictly: no coercion from other JSON types)."""
    try:
        return _adapter(kind).validate_python(value, strict=True)
    except ValidationError as exc:
        error = exc.errors()[0]
        bound = (error.get("ctx") or {}).get("max_length")
        if error["type"] == "string_too_short":
            reason = "must not be empty"
        elif error["type"] == "string_type":
            reason = "must be a string"
        elif bound is not None:
            reason = f"at most {bound} characters"
        else:
            reason = str(error["msg"]).removeprefix("Value error, ")
        raise Refusal(f"{what}: {reason}") from None


def optional(kind: Any, value: Any, what: str) -> Any:
    return None if value is None else check(kind, value, what)


# Names, types and facts exactly as a file writes them (models.ExactName: nothing trimmed).
def name(value: Any, what: str = "name") -> str:
    return check(models.ExactName, value, what)


def type_(value: Any, what: str) -> str:
    return check(models.ExactType, value, what)


def observation(value: Any, what: str) -> str:
    return check(models.ExactObservation, value, what)


def actor(value: Any, what: str) -> str | None:
    """An author (no tool writes one: a file keeps its own), if given."""
    return optional(Actor, value, what)


def id_(value: Any, what: str) -> str:
    if not isinstance(value, str) or not is_uuid(value):
        raise Refusal(f"{what}: must be an id (lowercase 8-4-4-4-12)")
    return value


def optional_id(value: Any, what: str) -> str | None:
    return None if value is None else id_(value, what)


def time(value: Any, what: str) -> datetime:
    """An ISO 8601 time with its offset: a file says which moment it means."""
    if not isinstance(value, str) or len(value) > 64:
        raise Refusal(f"{what}: must be an ISO 8601 time")
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise Refusal(f"{what}: must be an ISO 8601 time") from None
    if at.tzinfo is None:
        raise Refusal(f"{what}: must carry a UTC offset")
    return at


def optional_time(value: Any, what: str) -> datetime | None:
    return None if value is None else time(value, what)


def integer(value: Any, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise Refusal(f"{what}: must be an integer from {low} to {high}")
    return value


def properties(value: Any, what: str = "properties") -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise Refusal(f"{what}: must be a JSON object")
    try:
        return models.bounded_properties(value)
    except ValueError as exc:
        raise Refusal(f"{what}: {exc}") from None


def listed(value: Any, what: str, high: int) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise Refusal(f"{what}: must be a list")
    if len(value) > high:
        raise Refusal(f"{what}: at most {high} items")
    return value


def strength(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or not 0 <= value <= 1:
        raise Refusal("strength: must be a number from 0 to 1")
    return value


def interval(valid_from: datetime | None, valid_until: datetime | None, what: str) -> None:
    if valid_from is not None and valid_until is not None and valid_from >= valid_until:
        raise Refusal(f"{what}: valid_from must be before valid_until")


def unknown(v: dict[str, Any], known: set[str]) -> None:
    extra = sorted(k for k in v if k not in known)
    if extra:
        raise Refusal(f"unknown field {extra[0][:60]!r}")


def plain_observations(value: Any, high: int) -> list[FactIn]:
    """A list of texts, as the memory and neo4j formats write observations."""
    return [FactIn(observation(o, f"observations.{i}")) for i, o in enumerate(listed(value, "observations", high))]
