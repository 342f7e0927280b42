"""Erasing entities for good (purge_entities, `engram purge`, the retention sweep): every row of the
tenant's schema that holds them or what was said about them, in one transaction.

What goes, for the entities named and every entity merged into them (their old records): the
entity rows, their graph vertices, every relation touching them (edges and validity intervals),
observations, aliases, history rows (their own, and other entities' rows about a relation with
them or naming them), search documents with their embeddings, episode links, and, when asked,
the episodes that mention them; refused lines of import checkpoints that name them are cleared.
Nothing is returned that was erased but counts (docs/security.md, "Forgetting").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import asyncpg

from app.store.database import Tx, timed
from app.store.edges import REL_ID
from app.store.entities import name_key

Episodes = Literal["keep", "remove"]

# The entities named and, transitively, those merged into them.
_CLOSURE = """
    WITH RECURSIVE m AS (
        SELECT id FROM {s}.entities WHERE id = ANY($1::uuid[])
        UNION
        SELECT e.id FROM {s}.entities e JOIN m ON e.merged_into = m.id
    )
    SELECT e.id::text, e.gid::text, e.name, e.deleted_at IS NULL AS live FROM {s}.entities e JOIN m USING (id)
    ORDER BY e.name, e.id
"""


@dataclass(frozen=True, slots=True)
class Target:
    id: str
    gid: str
    name: str
    live: bool


@dataclass(frozen=True, slots=True)
class Plan:
    """What a purge erases: the entities (named, and merged into them), their relations' edges,
    the names they went by (theirs and their aliases), and the episodes that mention them: linked
    to them, or naming them in their text (`mentioning`, at most MENTIONS_MAX of them read)."""

    targets: list[Target]
    edges: list[str]
    relation_ids: list[str]
    names: list[str]
    episodes: list[int]
    mentioning: list[int]
    more_mentioning: bool  # more than MENTIONS_MAX episodes name them

    @property
    def linked_or_mentioning(self) -> list[int]:
        return sorted({*self.episodes, *self.mentioning})

    @property
    def ids(self) -> list[str]:
        return [t.id for t in self.targets]

    @property
    def gids(self) -> list[str]:
        return [t.gid for t in self.targets]


@timed
async def plan(tx: Tx, ids: list[str]) -> Plan:
    """The purge of `ids` (deleted or not), locked against concurrent writes to them."""
    rows = await tx.fetch(_CLOSURE, ids)
    targets = [Target(r[0], r[1], r[2], r[3]) for r in rows]
    all_ids = [t.id for t in targets]
    await tx.execute("SELECT 1 FROM {s}.entities WHERE id = ANY($1::uuid[]) FOR UPDATE", all_ids)
    gids = [t.gid for t in targets]
    edges = await tx.fetch(
        f'SELECT r.id::text, {REL_ID} FROM {{s}}."REL" r'
        " WHERE r.start_id = ANY($1::text[]::ag_catalog.graphid[]) OR r.end_id = ANY($1::text[]::ag_catalog.graphid[])",
        gids,
    )
    aliases = await tx.fetch("SELECT alias FROM {s}.aliases WHERE entity_id = ANY($1::uuid[])", all_ids)
    episodes = await tx.fetch(
        "SELECT DISTINCT episode_id FROM {s}.episode_entities WHERE entity_id = ANY($1::uuid[]) ORDER BY 1", all_ids
    )
    names = sorted({t.name for t in targets} | {r[0] for r in aliases})
    found = await mentioning(tx, names, MENTIONS_MAX + 1)
    return Plan(
        targets=targets,
        edges=[r[0] for r in edges],
        relation_ids=[r[1].strip('"') for r in edges if r[1]],
        names=names,
        episodes=[r[0] for r in episodes],
        mentioning=found[:MENTIONS_MAX],
        more_mentioning=len(found) > MENTIONS_MAX,
    )


# Episodes "mention" an entity when their text holds one of its names (its own, an alias, a merged
# record's) as words, the way keyword search reads them: each name a phrase of English lexemes
# ("Ann" is not "Anna"; "Acme Corp" is those two words in a row), found through the episodes' search
# documents (indexed) and checked against the episode's own text (a document also names speakers).
MENTIONS_MAX = 1000
_MENTIONING = """
    WITH q AS (
        SELECT ('(' || string_agg(phraseto_tsquery('english', n.v)::text, ') | (') || ')')::tsquery AS q
        FROM unnest($1::text[]) AS n(v) WHERE numnode(phraseto_tsquery('english', n.v)) > 0
    )
    SELECT p.id FROM q, {s}.search_docs d JOIN {s}.episodes p ON p.id = d.episode_id
    WHERE d.tsv @@ q.q AND d.episode_id IS NOT NULL AND to_tsvector('english', p.content) @@ q.q
    LIMIT $2
"""


@timed
async def mentioning(tx: Tx, names: list[str], limit: int) -> list[int]:
    """Ids of episodes whose text names one of `names` (see above), at most `limit`, in id order."""
    return sorted(r[0] for r in await tx.fetch(_MENTIONING, names, limit))


# Other entities' history rows that name an erased entity in their changes (a rename, a merge):
# matched on the names as JSON strings, so that "Ann" does not match "Anna".
_HISTORY = """
    entity_id = ANY($1::uuid[]) OR other_id = ANY($1::uuid[]) OR relation_id = ANY($2::uuid[])
    OR EXISTS (SELECT 1 FROM unnest($3::text[]) AS n(v) WHERE strpos(changes::text, to_jsonb(n.v)::text) > 0)
    OR EXISTS (SELECT 1 FROM unnest($1::uuid[]) AS i(v) WHERE strpos(changes::text, i.v::text) > 0)
"""


@timed
async def counts(tx: Tx, p: Plan, episodes: Episodes) -> dict[str, int]:
    """How many rows of each kind the purge erases."""
    row = await tx.fetchrow(
        f"""
        WITH docs AS (
            SELECT embedding IS NOT NULL AS embedded FROM {{s}}.search_docs
            WHERE entity_id = ANY($1::uuid[]) OR other_id = ANY($1::uuid[]) OR relation_id = ANY($2::uuid[])
                OR ($5 AND episode_id = ANY($4::bigint[]))
        )
        SELECT
            (SELECT count(*) FROM {{s}}.observations WHERE entity_id = ANY($1::uuid[])),
            (SELECT count(*) FROM {{s}}.aliases WHERE entity_id = ANY($1::uuid[])),
            (SELECT count(*) FROM {{s}}.history WHERE {_HISTORY}),
            (SELECT count(*) FROM docs),
            (SELECT count(*) FROM docs WHERE embedded),
            (SELECT count(*) FROM {{s}}.episode_entities WHERE entity_id = ANY($1::uuid[]))
        """,
        p.ids,
        p.relation_ids,
        p.names,
        p.linked_or_mentioning,
        episodes == "remove",
    )
    assert row is not None
    return {
        "entities": len(p.targets),
        "observations": row[0],
        "relations": len(p.edges),
        "aliases": row[1],
        "history": row[2],
        "search_documents": row[3],
        "embeddings": row[4],
        "episode_links": row[5],
        "episodes": len(p.linked_or_mentioning) if episodes == "remove" else 0,
        "episodes_kept_mentioning": len(p.mentioning) if episodes == "keep" else 0,
    }


@timed
async def erase(tx: Tx, p: Plan, episodes: Episodes) -> int:
    """Erase what `p` names; returns the rows deleted (or cleared) in all."""
    total = 0

    async def run(sql: str, *args: object) -> None:
        nonlocal total
        status = await tx.execute(sql, *args)
        total += int(status.split()[-1])

    live = await tx.fetchrow(
        "SELECT count(*), coalesce(sum(octet_length(o.content)), 0) FROM {s}.observations o"
        " JOIN {s}.entities e ON e.id = o.entity_id WHERE e.id = ANY($1::uuid[]) AND e.deleted_at IS NULL",
        p.ids,
    )
    assert live is not None
    # Quotas count live entities and their observations (soft-deleted ones were freed already).
    tx.growth.entities -= sum(t.live for t in p.targets)
    tx.growth.observations -= live[0]
    tx.growth.text_bytes -= live[1]
    await run(f"DELETE FROM {{s}}.history WHERE {_HISTORY}", p.ids, p.relation_ids, p.names)
    if episodes == "remove":  # their links and search documents go with them
        await run("DELETE FROM {s}.episodes WHERE id = ANY($1::bigint[])", p.linked_or_mentioning)
        while p.more_mentioning and (more := await mentioning(tx, p.names, MENTIONS_MAX)):
            await run("DELETE FROM {s}.episodes WHERE id = ANY($1::bigint[])", more)  # past the preview's count
    await run(
        "DELETE FROM {s}.search_docs WHERE entity_id = ANY($1::uuid[]) OR other_id = ANY($1::uuid[])"
        " OR relation_id = ANY($2::uuid[]) OR edge = ANY($3::text[]::ag_catalog.graphid[])",
        p.ids,
        p.relation_ids,
        p.edges,
    )
    await run("DELETE FROM {s}.rel_intervals WHERE edge = ANY($1::text[]::ag_catalog.graphid[])", p.edges)
    await run('DELETE FROM {s}."REL" WHERE id = ANY($1::text[]::ag_catalog.graphid[])', p.edges)
    # Observations, aliases and episode links go with their entity (ON DELETE CASCADE); counted first.
    for table in ("observations", "aliases", "episode_entities"):
        await run(f"DELETE FROM {{s}}.{table} WHERE entity_id = ANY($1::uuid[])", p.ids)
    await run("DELETE FROM {s}.entities WHERE id = ANY($1::uuid[])", p.ids)
    await run('DELETE FROM {s}."Entity" WHERE id = ANY($1::text[]::ag_catalog.graphid[])', p.gids)
    # Import checkpoints keep their first refused lines: those that name an erased entity go.
    await run(
        """
        UPDATE {s}.imports i SET refused = coalesce((
            SELECT jsonb_agg(x) FROM jsonb_array_elements(i.refused) x
            WHERE NOT EXISTS (SELECT 1 FROM unnest($1::text[]) AS n(v) WHERE strpos(x::text, n.v) > 0)
        ), '[]'::jsonb)
        WHERE EXISTS (SELECT 1 FROM unnest($1::text[]) AS n(v) WHERE strpos(i.refused::text, n.v) > 0)
        """,
        p.names,
    )
    return total


@timed
async def matching(tx: Tx, refs: list[str]) -> tuple[list[str], list[str]]:
    """The entities `refs` name, deleted or not: by id, by name (case-insensitively) or by alias;
    and the references that name none."""
    rows = await tx.fetch(
        """
        SELECT r.ref, e.id::text FROM unnest($1::text[], $2::text[]) AS r(ref, key)
        JOIN {s}.entities e ON e.id::text = r.ref OR e.name_key = r.key
            OR e.id IN (SELECT a.entity_id FROM {s}.aliases a WHERE a.alias_key = r.key)
        """,
        refs,
        [name_key(r) for r in refs],
    )
    found = {r[0] for r in rows}
    return list(dict.fromkeys(r[1] for r in rows)), [r for r in refs if r not in found]


@timed
async def deleted_before(tx: Tx, days: float, limit: int) -> list[str]:
    """Ids of entities soft-deleted longer ago than the tenant's retention (its own, or `days`),
    at most `limit`; not merged ones (they go with their survivor)."""
    rows = await tx.fetch(
        "SELECT id::text FROM {s}.entities WHERE merged_into IS NULL AND deleted_at < now()"
        " - make_interval(secs => 86400 * coalesce((SELECT deleted_retention_days FROM {s}.limits), $1))"
        " ORDER BY deleted_at LIMIT $2",
        days,
        limit,
    )
    return [r[0] for r in rows]


@timed
async def past_retention(conn: asyncpg.Connection, days: float) -> list[str]:
    """The keys of the tenants holding entities deleted longer ago than their retention."""
    return [r[0] for r in await conn.fetch("SELECT engram.tenants_past_retention($1)", days)]
