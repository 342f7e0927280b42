"""Aliases: other names an entity answers to, one row each in the tenant's ``aliases``.

An alias is unique in the tenant case-insensitively (its key is `entities.name_key` of it, the
table's primary key), whoever holds it, deleted entities included: a spelling never means two
aliases. Which entity a reference means, names and aliases together, is the services' rule
(app/services/refs.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.store.database import Tx, timed
from app.store.entities import name_key


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds a spelling already: an alias of an entity, or a live entity's name."""

    key: str
    alias: str | None  # None: it is a live entity's name
    entity_id: str
    entity_name: str
    deleted: bool


@timed
async def of_entities(tx: Tx, entity_ids: Sequence[str]) -> dict[str, list[str]]:
    """Each entity's aliases, in key order."""
    rows = await tx.fetch(
        "SELECT entity_id::text, alias FROM {s}.aliases WHERE entity_id = ANY($1::uuid[])"
        " ORDER BY entity_id, alias_key",
        list(entity_ids),
    )
    out: dict[str, list[str]] = {eid: [] for eid in entity_ids}
    for eid, alias in rows:
        out[eid].append(alias)
    return out


@timed
async def holders(tx: Tx, spellings: Sequence[str]) -> list[Holder]:
    """Who holds these spellings case-insensitively: aliases (of any entity) and live entities' names."""
    keys = [name_key(s) for s in spellings]
    rows = await tx.fetch(
        """
        SELECT a.alias_key, a.alias, e.id::text, e.name, e.deleted_at IS NOT NULL
        FROM {s}.aliases a JOIN {s}.entities e ON e.id = a.entity_id WHERE a.alias_key = ANY($1::text[])
        UNION ALL
        SELECT e.name_key, NULL, e.id::text, e.name, false
        FROM {s}.entities e WHERE e.name_key = ANY($1::text[]) AND e.deleted_at IS NULL
        """,
        keys,
    )
    return [Holder(*r) for r in rows]


@timed
async def count(tx: Tx, entity_id: str) -> int:
    return await tx.fetchval("SELECT count(*) FROM {s}.aliases WHERE entity_id = $1", entity_id)


@timed
async def add(tx: Tx, entity_id: str, aliases: Sequence[str], actor: str) -> list[str]:
    """Give the entity these aliases, in order; a spelling whose key is held already is skipped.
    Returns the aliases added."""
    return (await add_many(tx, [(entity_id, a) for a in aliases], actor)).get(entity_id, [])


@timed
async def add_many(tx: Tx, pairs: Sequence[tuple[str, str]], actor: str) -> dict[str, list[str]]:
    """Give each (entity id, alias) in one statement, in order: a spelling whose key is held already,
    or was given by an earlier pair, is skipped. Returns each entity's aliases added, in order."""
    if not pairs:
        return {}
    rows = await tx.fetch(
        """
        INSERT INTO {s}.aliases (alias_key, alias, entity_id, created_by)
        SELECT k, a, e, $4 FROM unnest($1::text[], $2::text[], $3::uuid[]) WITH ORDINALITY AS u(k, a, e, n) ORDER BY n
        ON CONFLICT (alias_key) DO NOTHING
        RETURNING entity_id::text, alias
        """,
        [name_key(a) for _, a in pairs],
        [a for _, a in pairs],
        [e for e, _ in pairs],
        actor,
    )
    added: dict[str, list[str]] = {}
    for entity_id, alias in rows:
        added.setdefault(entity_id, []).append(alias)
    return added


@timed
async def remove(tx: Tx, entity_id: str, aliases: Sequence[str]) -> list[str]:
    """Take these aliases (matched case-insensitively) from the entity; returns those removed."""
    rows = await tx.fetch(
        "DELETE FROM {s}.aliases WHERE entity_id = $1 AND alias_key = ANY($2::text[]) RETURNING alias",
        entity_id,
        [name_key(a) for a in aliases],
    )
    return [r[0] for r in rows]


@timed
async def move(tx: Tx, from_ids: Sequence[str], to_id: str) -> list[str]:
    """Hand the aliases of `from_ids` to `to_id` (a merge); returns them."""
    rows = await tx.fetch(
        "UPDATE {s}.aliases SET entity_id = $2 WHERE entity_id = ANY($1::uuid[]) RETURNING alias",
        list(from_ids),
        to_id,
    )
    return [r[0] for r in rows]
