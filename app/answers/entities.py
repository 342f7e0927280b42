"""Concise answers about entities: the one-line summary every listing uses, an entity read whole,
its history, and what the entity writes changed.

    Ada Lovelace (person; science/mathematics; certainty 90): Wrote the first program …[+812 chars]
    Ada Lovelace works at Analytical Engines Ltd: since the founding (strength 0.8; 2023-05-08, hr)

An entity's name is its handle: every tool takes a name where it takes an id.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import orjson

from app.mcp.answers.text import block, day, lines, more, note, sizes
from app.services import models
from app.services.budget import clip
from app.services.purges import PurgeResult

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


def properties(values: dict[str, Any]) -> str:
    return block(orjson.dumps(values).decode())


# --- get_entity ---------------------------------------------------------------------------------------


def observation_chunks(records: Sequence[models.ObservationRecord]) -> list[str]:
    return [f"- {block(o.text)}{note(o.valid_from or o.created_at, o.source, until=o.valid_until)}\n" for o in records]


def relation_chunks(relations: Sequence[models.Relation]) -> list[str]:
    return [f"{relation_line(r)}\n" for r in relations]


def entity_sizes(parts: Sequence[Any]) -> list[int]:
    """Bytes of an entity's parts as get_entity prints them: the entity's own lines, then each
    fact, relation and change (with the heading each kind starts with)."""
    out = []
    for part in parts:
        if isinstance(part, models.Entity):
            size = len(_head(part).encode()) + len("Facts (1000 of 1000):\n")
        elif isinstance(part, models.ObservationRecord):
            size = sizes(observation_chunks([part]))[0]
        elif isinstance(part, models.Relation):
            size = len(relation_line(part).encode()) + 1
        else:
            size = len(change_line(part).encode()) + 3
        out.append(size)
    return out  # the headings of relations and changes fit in the budget's frame


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


def entity(e: models.Entity) -> str:
    chunks = [_head(e)]
    shown = len(e.observation_records)
    if e.observations_total:
        chunks.append(f"Facts ({shown} of {e.observations_total}):\n" if shown < e.observations_total else "Facts:\n")
        chunks += observation_chunks(e.observation_records)
    if e.relations:
        cut = " (more exist: neighbors lists them)" if e.relations_truncated else ""
        chunks.append(f"Relations{cut}:\n")
        chunks += relation_chunks(e.relations)
    if e.history:
        chunks.append("Latest changes:\n")
        chunks += [f"- {change_line(h)}\n" for h in e.history]
    return lines(chunks)


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


# --- relation writes ----------------------------------------------------------------------------------


def connected(r: models.ConnectResult) -> str:
    by: dict[str, list[str]] = {}
    for item in r.results:
        by.setdefault(item.status, []).append(relation_line(item.relation))
    return "\n".join(f"{'Created' if s == 'created' else 'Existed'}: {'; '.join(x)}." for s, x in by.items())


def disconnected(r: models.DisconnectResult) -> str:
    done = "; ".join(relation_line(x) for x in r.removed)
    out = f"Deleted: {done}." if done else "Deleted: none."
    return out + (f" {r.not_found} not found." if r.not_found else "")


def relations_ended(r: models.InvalidatedRelations) -> str:
    done = "; ".join(relation_line(x) for x in r.invalidated)
    out = f"Ended: {done}." if done else "Ended: none."
    return out + (f" {r.unchanged} unknown or already ended." if r.unchanged else "")


def purged(r: PurgeResult) -> str:
    """What a purge erased, or (a preview) would erase and how to confirm it."""
    if r.erased or not r.names:
        return r.summary
    more = r.counts.entities - len(r.names)
    names = ", ".join(block(n) for n in r.names) + (f" and {more} more" if more > 0 else "")
    return f"{r.summary}\nEntities: {names}."
