"""The one-line forms of an entity and a relation that every listing, walk and answer uses.

    Ada Lovelace (person; science/mathematics; certainty 90): Wrote the first program …[+812 chars]
    Ada Lovelace works at Analytical Engines Ltd: since the founding (strength 0.8; 2023-05-08, hr)

An entity's name is its handle: every tool takes a name where it takes an id.
"""

from __future__ import annotations

from datetime import datetime

from app.answers.text import block, note
from app.services import models
from app.services.budget import clip

DESCRIPTION_BYTES = 240  # of a description in a listing; get_entity shows it whole


def entity_line(e: models.EntitySummary) -> str:
    tags = [block(e.type)]
    if path := "/".join(x for x in (e.area, e.topic, e.subtopic) if x):
        tags.append(block(path))
    if e.certainty is not None:
        tags.append(f"certainty {e.certainty}")
    head = f"{block(e.name)} ({'; '.join(tags)})"
    return f"{head}: {block(clip(e.description, DESCRIPTION_BYTES))}" if e.description else head


def relation_line(r: models.Relation) -> str:
    text = f"{block(r.from_)} {block(r.type)} {block(r.to)}"
    if r.notes:
        text += f": {block(r.notes)}"
    extra = f"strength {r.strength:g}; " if r.strength is not None else ""
    meta = note(_at(r.valid_from or r.created_at), r.source, until=_at(r.valid_until))
    if extra:
        meta = f" ({extra}{meta[2:-1]})" if meta else f" ({extra[:-2]})"
    return text + meta


def _at(value: str | datetime | None) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else value
