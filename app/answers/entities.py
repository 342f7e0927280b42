"""The answers of the entity tools (app/mcp/tools/entities.py): an entity read whole, its history,
listings, and what the entity writes changed.

    Ada Lovelace (person; science/mathematics; certainty 90)
    Also called: Countess of Lovelace
    Wrote the first program for the Analytical Engine.
    v3, updated 2023-05-08 by hr
    Facts (2 of 40):
    - was a mathematician (2023-05-08, hr)
    Relations:
    Ada Lovelace works at Analytical Engines Ltd (strength 0.8)

An entity's name is its handle: every tool takes a name where it takes an id.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from app.answers.form import Form
from app.answers.summaries import entity_line, relation_line
from app.answers.text import PINNED, block, day, lines, more, note
from app.services import models
from app.services.budget import clip
from app.services.parts import EntityPart, entity_parts


def properties(values: dict[str, Any]) -> str:
    return block(orjson.dumps(values).decode())


# --- get_entity ---------------------------------------------------------------------------------------

# The facts' heading counts the facts shown, known only once cut: the frame keeps room for it at its widest.
FACTS_HEADING = len("Facts (1000 of 1000):\n")


def _part(part: EntityPart) -> str:
    """A part's lines: the entity's own fields, a fact, a relation or a change (their headings are
    the frame's)."""
    if isinstance(part, models.Entity):
        return _head(part)
    if isinstance(part, models.ObservationRecord):
        pin = PINNED if part.pinned_at else ""
        when = part.valid_from or part.created_at
        return f"- {pin}{block(part.text)}{note(when, part.source, until=part.valid_until)}\n"
    if isinstance(part, models.Relation):
        return f"{relation_line(part)}\n"
    return f"- {change_line(part)}\n"


def _parts(parts: Sequence[EntityPart]) -> list[str]:
    return [_part(p) for p in parts]


def _head(e: models.Entity) -> str:
    head = [entity_line(e.model_copy(update={"description": ""}))]
    if e.aliases:
        head.append(f"Also called: {', '.join(block(a) for a in e.aliases)}")
    if e.description:
        head.append(block(e.description))
    if e.properties:
        head.append(f"Properties: {properties(e.properties)}")
    head.append(f"v{e.version}, updated {day(e.updated_at)} by {block(e.updated_by)}")
    return "".join(f"{line}\n" for line in head)


def _entity(e: models.Entity, chunks: list[str]) -> str:
    """The entity's lines, then its facts, relations and changes, each kind under its heading."""
    shown, related = len(e.observation_records), len(e.relations or [])
    facts, rels, changes = chunks[1 : 1 + shown], chunks[1 + shown : 1 + shown + related], chunks[1 + shown + related :]
    out = [chunks[0]]
    if e.observations_total:
        out.append(f"Facts ({shown} of {e.observations_total}):\n" if shown < e.observations_total else "Facts:\n")
        out += facts
    if e.relations:
        cut = " (more exist: neighbors lists them)" if e.relations_truncated else ""
        out += [f"Relations{cut}:\n", *rels]
    if e.history:
        out += ["Latest changes:\n", *changes]
    return lines(out)


ENTITY = Form[models.Entity, EntityPart](entity_parts, _parts, _entity, reserve=FACTS_HEADING)


# --- history ------------------------------------------------------------------------------------------


def change_line(h: models.HistoryEntry) -> str:
    c = h.changes
    if {"from", "to", "type"} <= c.keys():  # a relation made, ended or removed
        what = f"{block(str(c['from']))} {block(str(c['type']))} {block(str(c['to']))}"
    else:
        what = ", ".join(_change(k, v, pair=h.action == "updated") for k, v in c.items())
    return f"{day(h.at)} {block(h.actor)} {h.action}{': ' + what if what else ''}"


def _change(field: str, value: Any, *, pair: bool) -> str:
    """A field's change: `old → new` for an update, else its value (a list as its items)."""
    if pair and isinstance(value, list) and len(value) == 2:
        old, new = (clip(str(v), 80) if v is not None else "∅" for v in value)
        return f"{field} {block(old)} → {block(new)}"
    if isinstance(value, list):
        return f"{field} " + "; ".join(block(clip(str(v), 80)) for v in value[:5]) + (" …" if len(value) > 5 else "")
    return f"{field} {block(clip(str(value), 120))}"


def history(page: models.HistoryPage) -> str:
    if not page.entries:
        return f"{block(page.entity.name)}: no changes recorded."
    chunks = [f"{block(page.entity.name)}:\n", *(f"- {change_line(h)}\n" for h in page.entries)]
    return lines(chunks, more(page.next_cursor))


# --- find_entities ------------------------------------------------------------------------------------


def found(page: models.EntityPage) -> str:
    if not page.entities:
        return "No entities match."
    chunks = [
        f"{entity_line(e)}{f' [alias {block(e.matched_alias)}]' if e.matched_alias else ''}\n" for e in page.entities
    ]
    return lines(chunks, f"{len(page.entities)} of {page.total}" if page.total > len(page.entities) else None,
                 more(page.next_cursor))  # fmt: skip


# --- writes -------------------------------------------------------------------------------------------


def upserted(r: models.UpsertResult) -> str:
    by: dict[str, list[str]] = {}
    for item in r.results:
        added = f" +{item.observations_added} facts" if item.observations_added else ""
        by.setdefault(item.status, []).append(f"{block(item.name)} v{item.version}{added}")
    out = [f"{status.capitalize()}: {', '.join(names)}." for status, names in by.items()]
    if r.embeddings_pending:
        out.append(f"{r.embeddings_pending} texts are found by meaning once embedded.")
    return "\n".join(out) or "Nothing to do."


def changed(r: models.ChangeResult, verb: str) -> str:
    done = ", ".join(f"{block(c.name)} v{c.version}" for c in r.changed)
    out = f"{verb}: {done}." if done else f"{verb}: none."
    return out + (f" Unchanged: {', '.join(block(u) for u in r.unchanged)}." if r.unchanged else "")


def observations_changed(r: models.ObservationsResult, verb: str) -> str:
    return (
        "\n".join(f"{block(c.name)} v{c.version}: {verb} {len(c.observations)} facts." for c in r.results)
        or f"{verb} no facts."
    )


def removed(r: models.ChangeResult) -> str:
    """Deleted entities with their ids: restore_entities takes ids."""
    done = ", ".join(f"{block(c.name)} (id {c.id})" for c in r.changed)
    return f"Deleted: {done}." if done else "Deleted: none."
