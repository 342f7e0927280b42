"""Episodes: raw memories that are no fact about one entity (a message, a meeting note, a captured
chat, a document chunk), with when they happened, their source, a validity interval, and the
entities they involve (``episode_entities``: speakers, participants, entities mentioned)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import asyncpg
import orjson

from app.store.database import Tx, timed
from app.store.recall import End
from app.store.validity import NOW, When, holds


@dataclass(frozen=True, slots=True)
class NewEpisode:
    content: str
    at: datetime | None  # None: now
    source: str | None
    valid_from: datetime | None
    valid_until: datetime | None
    involved: Sequence[tuple[str, str]] = field(default_factory=tuple)  # (entity id, role), one role per entity
    # As an import gives them (None: the writer, now, not ended):
    created_by: str | None = None
    created_at: datetime | None = None
    ended_why: str | None = None
    owner: str | None = None  # a principal's key: its private memory; None: the tenant's shared memory


@dataclass(frozen=True, slots=True)
class EpisodeRow:
    """A stored episode with the live entities it involves, speakers first."""

    id: int
    content: str
    at: datetime
    source: str | None
    created_by: str
    created_at: datetime
    valid_from: datetime | None
    valid_until: datetime | None
    ended_why: str | None
    involved: list[tuple[End, str]]
    owner: str | None = None  # whose private memory it is (None: shared); only its owner (or the server) sees it


_COLUMNS = """p.id, p.content, p.at, p.source, p.created_by, p.created_at, p.valid_from, p.valid_until, p.ended_why,
    p.owner,
    (SELECT json_agg(json_build_array(x.id::text, x.name, x.type, pe.role) ORDER BY pe.role DESC, x.name)
     FROM {s}.episode_entities pe JOIN {s}.entities x ON x.id = pe.entity_id AND x.deleted_at IS NULL
     WHERE pe.episode_id = p.id)::text AS involved"""


def _row(r: asyncpg.Record) -> EpisodeRow:
    involved = [(End(i, n, t), role) for i, n, t, role in orjson.loads(str(r["involved"] or "[]"))]
    return EpisodeRow(
        r["id"], r["content"], r["at"], r["source"], r["created_by"], r["created_at"],
        r["valid_from"], r["valid_until"], r["ended_why"], involved, r["owner"],
    )  # fmt: skip


@timed
async def insert(tx: Tx, items: Sequence[NewEpisode], actor: str) -> list[int]:
    """Store episodes and their entities; returns their ids in the items' order."""
    rows = await tx.fetch(
        """
        INSERT INTO {s}.episodes (content, at, source, valid_from, valid_until, created_by, created_at, ended_why,
                                  owner)
        SELECT u.content, coalesce(u.at, now()), u.source, u.vf, u.vu, coalesce(u.by, $6), coalesce(u.made, now()),
               u.why, u.owner
        FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::timestamptz[], $5::timestamptz[], $7::text[],
                    $8::timestamptz[], $9::text[], $10::text[])
            WITH ORDINALITY AS u(content, at, source, vf, vu, by, made, why, owner, n)
        ORDER BY u.n
        RETURNING id
        """,
        [i.content for i in items],
        [i.at for i in items],
        [i.source for i in items],
        [i.valid_from for i in items],
        [i.valid_until for i in items],
        actor,
        [i.created_by for i in items],
        [i.created_at for i in items],
        [i.ended_why for i in items],
        [i.owner for i in items],
    )
    ids = sorted(r[0] for r in rows)  # identity values follow the insert's order
    links = [(episode, entity, role) for episode, i in zip(ids, items, strict=True) for entity, role in i.involved]
    if links:
        await tx.execute(
            "INSERT INTO {s}.episode_entities (episode_id, entity_id, role)"
            " SELECT * FROM unnest($1::bigint[], $2::uuid[], $3::text[])",
            [link[0] for link in links],
            [link[1] for link in links],
            [link[2] for link in links],
        )
    tx.growth.observations += len(items)
    tx.growth.text_bytes += sum(len(i.content.encode()) for i in items)
    tx.affected += [f"episode:{i}" for i in ids]
    tx.episodes += ids
    return ids


@timed
async def by_ids(tx: Tx, ids: Sequence[int]) -> list[EpisodeRow]:
    rows = await tx.fetch(f"SELECT {_COLUMNS} FROM {{s}}.episodes p WHERE p.id = ANY($1::bigint[]) ORDER BY p.id", ids)
    return [_row(r) for r in rows]


@timed
async def page(tx: Tx, after: int | None, limit: int) -> list[EpisodeRow]:
    """Every episode in id order (the order they were written), after `after`: an export's pages."""
    rows = await tx.fetch(
        f"SELECT {_COLUMNS} FROM {{s}}.episodes p WHERE $1::bigint IS NULL OR p.id > $1 ORDER BY p.id LIMIT $2",
        after,
        limit,
    )
    return [_row(r) for r in rows]


@timed
async def existing(tx: Tx, keys: Sequence[tuple[datetime, str, str | None]]) -> set[tuple[datetime, str, str | None]]:
    """Those of these (at, text, source) that the tenant holds already: an import writes each once."""
    rows = await tx.fetch(
        """
        SELECT p.at, p.content, p.source FROM {s}.episodes p
        JOIN unnest($1::timestamptz[], $2::text[], $3::text[]) AS k(at, content, source)
          ON p.at = k.at AND p.content = k.content AND p.source IS NOT DISTINCT FROM k.source
        """,
        [k[0] for k in keys],
        [k[1] for k in keys],
        [k[2] for k in keys],
    )
    return {(r[0], r[1], r[2]) for r in rows}


@timed
async def listing(
    tx: Tx,
    *,
    entity_id: str | None,
    sources: Sequence[str] | None,
    since: datetime | None,
    until: datetime | None,
    when: When = NOW,
    limit: int,
    before: tuple[datetime, int] | None = None,
) -> list[EpisodeRow]:
    """Newest first (by `at`, then id) from `before`: the episodes that hold at the moment, involve the
    entity, come from these sources and happened in [since, until)."""
    rows = await tx.fetch(
        f"""
        SELECT {_COLUMNS} FROM {{s}}.episodes p
        WHERE ($1::uuid IS NULL OR EXISTS (SELECT 1 FROM {{s}}.episode_entities pe
                                           WHERE pe.episode_id = p.id AND pe.entity_id = $1::uuid))
          AND ($2::text[] IS NULL OR p.source = ANY($2::text[]))
          AND ($3::timestamptz IS NULL OR p.at >= $3::timestamptz)
          AND ($4::timestamptz IS NULL OR p.at < $4::timestamptz)
          AND {holds("p", "$5", "$6")}
          AND ($7::timestamptz IS NULL OR (p.at, p.id) < ($7::timestamptz, $8::bigint))
        ORDER BY p.at DESC, p.id DESC LIMIT $9
        """,
        entity_id,
        list(sources) if sources else None,
        since,
        until,
        *when.params(),
        before[0] if before else None,
        before[1] if before else None,
        limit,
    )
    return [_row(r) for r in rows]


@dataclass(frozen=True, slots=True)
class Ended:
    """Episodes an invalidation ended, or, when some begin at or after the given end, those (and
    nothing was ended)."""

    ended: list[int]
    too_early: list[int]


@timed
async def end(tx: Tx, ids: Sequence[int], at: datetime | None, why: str | None) -> Ended:
    """End the episodes that hold past `at` (None: now), saying `why`; those ended by then are left alone."""
    moment = "coalesce($2::timestamptz, now())"
    rows = await tx.fetch(
        f"""
        WITH m AS MATERIALIZED (
            SELECT p.id, coalesce(p.valid_from >= {moment}, false) AS early FROM {{s}}.episodes p
            WHERE p.id = ANY($1::bigint[]) AND (p.valid_until IS NULL OR p.valid_until > {moment})
        ), u AS (
            UPDATE {{s}}.episodes p SET valid_until = {moment}, ended_why = $3
            FROM m WHERE p.id = m.id AND NOT EXISTS (SELECT 1 FROM m WHERE m.early)
        )
        SELECT id, early FROM m ORDER BY id
        """,
        list(ids),
        at,
        why,
    )
    early = [r[0] for r in rows if r[1]]
    ended = [] if early else [r[0] for r in rows]
    tx.affected += [f"episode:{i}" for i in ended]
    return Ended(ended, early)


@timed
async def private_count(tx: Tx, owner: str) -> int:
    """How many episodes `owner`'s private memory holds (in a transaction that sees them all)."""
    return await tx.fetchval("SELECT count(*) FROM {s}.episodes WHERE owner = $1", owner)


@timed
async def erase_private(tx: Tx, owner: str) -> int:
    """Delete every episode of `owner`'s private memory (their documents and links go with them),
    reading none of them: how many went."""
    rows = await tx.fetch("DELETE FROM {s}.episodes WHERE owner = $1 RETURNING octet_length(content)", owner)
    tx.growth.observations -= len(rows)
    tx.growth.text_bytes -= sum(r[0] for r in rows)
    return len(rows)


@timed
async def delete(tx: Tx, ids: Sequence[int]) -> list[int]:
    """Delete episodes (their search documents and links go with them); returns the ids deleted."""
    rows = await tx.fetch(
        "DELETE FROM {s}.episodes WHERE id = ANY($1::bigint[]) RETURNING id, octet_length(content)", list(ids)
    )
    tx.growth.observations -= len(rows)
    tx.growth.text_bytes -= sum(r[1] for r in rows)
    tx.affected += [f"episode:{r[0]}" for r in rows]
    return sorted(r[0] for r in rows)
