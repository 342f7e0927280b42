"""Recall's reads: facts (observations, relations, episodes, entity descriptions) ranked one by one.

Every search document is a fact here, not a way to reach an entity: the rankings return documents,
never collapsed to their entity. A fact passes the filters by its own kind (`scopes.fact`): an
observation or a description while its entity is live, a relation while both ends are, an episode
by itself; the moment (`as_of`, `include_invalid`), `sources` and the time range apply to each kind's
own record (scopes.py). The nearest facts are `rankings.by_vector`'s (among facts); the word
ranking here weighs words by their rarity.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import orjson

from app.store.database import Tx, timed
from app.store.index import Model, Vector, vector_value
from app.store.rankings import Ranked, tsquery
from app.store.scopes import Scope, fact, relation_property
from app.store.validity import NOW, When, edge_holds

# Facts examined for the entities a question names and their neighbours (newest first beyond it).
WITHIN_DOCS = 5000
WORD_TEXTS = 2000  # texts a word is counted in, at most; a word in fewer is rare enough to gather all of
RARE_WORDS = 8  # the rarest words of a query whose texts are all ranked


# --- the entities a question names ---------------------------------------------------------------


@timed
async def named(tx: Tx, keys: Sequence[str], limit: int) -> list[tuple[str, str]]:
    """(key, entity id) for the live entities whose name or an alias is one of `keys` (case-folded)."""
    rows = await tx.fetch(
        """
        SELECT e.name_key, e.id::text FROM {s}.entities e WHERE e.name_key = ANY($1::text[]) AND e.deleted_at IS NULL
        UNION
        SELECT a.alias_key, e.id::text FROM {s}.aliases a JOIN {s}.entities e ON e.id = a.entity_id
        WHERE a.alias_key = ANY($1::text[]) AND e.deleted_at IS NULL
        LIMIT $2
        """,
        list(keys),
        limit,
    )
    return [(r[0], r[1]) for r in rows]


@dataclass(frozen=True, slots=True)
class Named:
    """An entity a question names (`role` named), or one next to those: `bridge` (next to two or more
    of them: it joins them) or `neighbour` (next to one)."""

    id: str
    name: str
    type: str
    role: str


@timed
async def named_and_around(tx: Tx, keys: Sequence[str], most: int, around: int, when: When = NOW) -> list[Named]:
    """In one statement: the live entities whose name or an alias is one of `keys` (case-folded), the
    longest name first, at most `most`; then up to `around` live entities one relation (that holds
    at the moment) away from them, bridges first."""
    at, everything = when.params()
    rows = await tx.fetch(
        f"""
        WITH k AS (
            SELECT m.id, max(m.n) AS n FROM (
                SELECT e.id, length(e.name_key) AS n FROM {{s}}.entities e
                WHERE e.name_key = ANY($1::text[]) AND e.deleted_at IS NULL
                UNION ALL
                SELECT e.id, length(a.alias_key) FROM {{s}}.aliases a JOIN {{s}}.entities e ON e.id = a.entity_id
                WHERE a.alias_key = ANY($1::text[]) AND e.deleted_at IS NULL
            ) m GROUP BY m.id ORDER BY max(m.n) DESC, m.id LIMIT $2
        ), s AS (SELECT e.id, e.gid FROM k JOIN {{s}}.entities e ON e.id = k.id),
        n AS (
            (SELECT s.gid AS named, r.end_id AS gid, r.id AS edge FROM s JOIN {{s}}."REL" r ON r.start_id = s.gid
             LIMIT $3 * 4)
            UNION ALL
            (SELECT s.gid, r.start_id, r.id FROM s JOIN {{s}}."REL" r ON r.end_id = s.gid LIMIT $3 * 4)
        ), nb AS (
            SELECT e.id, e.name, e.type, count(DISTINCT n.named) AS touches
            FROM n JOIN {{s}}.entities e ON e.gid = n.gid AND e.deleted_at IS NULL
            WHERE e.id NOT IN (SELECT id FROM k) AND {edge_holds("n.edge", "$4", "$5")}
            GROUP BY e.id ORDER BY touches DESC, e.id LIMIT $3
        )
        SELECT * FROM (SELECT e.id::text, e.name, e.type, 'named' AS role FROM k JOIN {{s}}.entities e ON e.id = k.id
                       ORDER BY k.n DESC, k.id) x
        UNION ALL
        SELECT * FROM (SELECT nb.id::text, nb.name, nb.type, CASE WHEN nb.touches > 1 THEN 'bridge' ELSE 'neighbour' END
                       FROM nb ORDER BY nb.touches DESC, nb.id) y
        """,
        list(keys),
        most,
        around,
        at,
        everything,
    )
    return [Named(*r) for r in rows]


# --- rankings ------------------------------------------------------------------------------------


@timed
async def within(
    tx: Tx,
    model: Model,
    query: Vector,
    named: Sequence[str],
    bridges: Sequence[str],
    around: Sequence[str],
    limit: int,
    scope: Scope,
) -> list[Ranked]:
    """The facts of the named entities and of their neighbours (theirs, and relations touching them),
    nearest first by an exact scan of at most WITHIN_DOCS of them. Episodes are not among them: an
    episode's speakers are in its indexed text, and a speaker's episodes are too many to lift."""
    passes, params = fact(scope, 6)
    cast = f"::vector({int(model.dimensions)})"
    rows = await tx.fetch(
        f"""
        WITH w AS (SELECT DISTINCT ON (id) id, near FROM (
            (SELECT d.id, d.entity_id AS near FROM {{s}}.search_docs d
             WHERE d.entity_id = ANY($4::uuid[]) ORDER BY d.id DESC LIMIT {WITHIN_DOCS})
            UNION ALL
            (SELECT d.id, d.other_id FROM {{s}}.search_docs d
             WHERE d.other_id = ANY($4::uuid[]) ORDER BY d.id DESC LIMIT {WITHIN_DOCS})
        ) u ORDER BY id, near = ANY($3::uuid[]) DESC, near = ANY($5::uuid[]) DESC)
        SELECT d.id, d.embedding{cast} <=> $1{cast} AS distance,
               CASE WHEN w.near = ANY($3::uuid[]) THEN 'named' WHEN w.near = ANY($5::uuid[]) THEN 'bridge'
                    ELSE 'neighbour' END
        FROM w JOIN {{s}}.search_docs d ON d.id = w.id
        WHERE d.model_id = {int(model.id)} {passes}
        ORDER BY distance LIMIT $2
        """,
        vector_value(query),
        limit,
        list(named),
        [*named, *bridges, *around],
        list(bridges),
        *params,
    )
    return [Ranked(r[0], 1.0 - r[1], near=r[2]) for r in rows]


@timed
async def by_word_weight(
    tx: Tx, query: str, strict: bool, common: Sequence[str], limit: int, candidates: int, scope: Scope
) -> list[Ranked]:
    """Facts holding the query's words; score = the share of the query's word weight a fact holds,
    each word weighing its inverse document frequency (a name every fact repeats weighs little, a
    rare word much), then closer together (cover density).

    Document frequencies are counted up to WORD_TEXTS per word through the full-text index; the
    number of texts is the planner's, or the live count the statistics keep before the first
    ANALYZE (a tenant just written has no planner figures, and every word would weigh the same).
    The facts ranked are every fact holding one of the query's RARE_WORDS rarest words that occur
    in fewer than WORD_TEXTS texts — so a rare word is never crowded out by a common one — or, when
    every word is that common (or the query has web-search syntax, `strict`), at most `candidates`
    texts matching the query. (Search's `rankings.by_words` scores the plain share of the query's
    words instead: an entity's best text, where a common word matters as much as a rare one.)"""
    passes, params = fact(scope, 7)
    rows = await tx.fetch(
        f"""
        WITH n AS (SELECT greatest(reltuples, pg_stat_get_live_tuples(oid), 1)::float8 AS docs
                   FROM pg_class WHERE oid = to_regclass($6)),
        w AS (
            SELECT x.q, c.df, ln((n.docs + 1) / (1 + c.df)) AS idf
            FROM n, (SELECT DISTINCT quote_literal(x)::tsquery AS q
                     FROM unnest(tsvector_to_array(to_tsvector('english', $1::text))) AS x) x,
                 LATERAL (SELECT count(*) AS df FROM (
                     SELECT 1 FROM {{s}}.search_docs d WHERE d.tsv @@ x.q LIMIT {WORD_TEXTS}) c) c
        ),
        t AS (SELECT greatest(sum(greatest(idf, 0.01)), 1e-9) AS total,
                     coalesce(bool_or(df < {WORD_TEXTS}), false) AND NOT $3::boolean AS rare FROM w),
        q AS (SELECT {tsquery("$1", "$3", "$4")} AS q),
        cand AS (
            SELECT d.id FROM t, (SELECT w.q FROM w WHERE w.df < {WORD_TEXTS} ORDER BY w.df LIMIT {RARE_WORDS}) r,
                 LATERAL (SELECT d.id FROM {{s}}.search_docs d WHERE d.tsv @@ r.q LIMIT {WORD_TEXTS}) d
            WHERE t.rare
            UNION
            SELECT d.id FROM t, q, LATERAL (SELECT d.id FROM {{s}}.search_docs d WHERE d.tsv @@ q.q LIMIT $5) d
            WHERE NOT t.rare
        )
        SELECT id, weight / t.total AS share, episode FROM (
            SELECT d.id, (SELECT sum(greatest(w.idf, 0.01)) FROM w WHERE d.tsv @@ w.q) AS weight,
                   d.episode_id IS NOT NULL AS episode,
                   ts_rank_cd(d.tsv, q.q) AS density
            FROM cand JOIN {{s}}.search_docs d ON d.id = cand.id, q
            WHERE true {passes}
        ) m, t
        WHERE weight > 0
        ORDER BY share DESC, density DESC, id LIMIT $2
        """,
        *(query, limit, strict, list(common), candidates, f"{tx.tenant.schema}.search_docs", *params),
    )
    return [Ranked(r[0], r[1], episode=r[2]) for r in rows]


@timed
async def bodies(tx: Tx, doc_ids: Sequence[int]) -> dict[int, str]:
    """The indexed text of these documents (a fact with its subject's name), by document id."""
    rows = await tx.fetch("SELECT id, body FROM {s}.search_docs WHERE id = ANY($1::bigint[])", list(doc_ids))
    return {r[0]: r[1] for r in rows}


@timed
async def times(tx: Tx, doc_ids: Sequence[int]) -> dict[int, datetime]:
    """When each fact happened, as far as memory says: an episode's `at`; an observation's or a
    relation's `valid_from`, else when it was written. Descriptions have no time."""
    rows = await tx.fetch(
        f"""
        SELECT d.id, coalesce(p.at, o.valid_from, o.created_at, ri.valid_from,
                              ({relation_property("created_at")})::timestamptz)
        FROM {{s}}.search_docs d
        LEFT JOIN {{s}}.episodes p ON p.id = d.episode_id
        LEFT JOIN {{s}}.observations o ON o.id = d.observation_id
        LEFT JOIN {{s}}."REL" r ON r.id = d.edge
        LEFT JOIN {{s}}.rel_intervals ri ON ri.edge = d.edge
        WHERE d.id = ANY($1::bigint[])
        """,
        list(doc_ids),
    )
    return {r[0]: r[1] for r in rows if r[1] is not None}


@timed
async def context(tx: Tx, doc_ids: Sequence[int], per_side: int, gap: timedelta, scope: Scope) -> list[tuple[int, int]]:
    """(document, a neighbour's document) for the episodes among these documents: the `per_side`
    episodes just before and just after each (by `at`, then id) that happened within `gap` of it —
    the turns around a turn of a conversation — and pass the scope."""
    passes, params = fact(scope, 4)
    rows = await tx.fetch(
        f"""
        WITH c AS (SELECT d.id AS doc, p.id AS ep, p.at FROM {{s}}.search_docs d
                   JOIN {{s}}.episodes p ON p.id = d.episode_id WHERE d.id = ANY($1::bigint[])),
        n AS (
            SELECT c.doc, x.id FROM c, LATERAL (
                SELECT q.id FROM {{s}}.episodes q WHERE (q.at, q.id) < (c.at, c.ep) AND q.at >= c.at - $3::interval
                ORDER BY q.at DESC, q.id DESC LIMIT $2) x
            UNION ALL
            SELECT c.doc, x.id FROM c, LATERAL (
                SELECT q.id FROM {{s}}.episodes q WHERE (q.at, q.id) > (c.at, c.ep) AND q.at <= c.at + $3::interval
                ORDER BY q.at, q.id LIMIT $2) x
        )
        SELECT n.doc, d.id FROM n JOIN {{s}}.search_docs d ON d.episode_id = n.id
        WHERE true {passes}
        """,
        list(doc_ids),
        per_side,
        gap,
        *params,
    )
    return [(r[0], r[1]) for r in rows]


# --- what a recalled fact shows ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class End:
    """An entity as a fact names it."""

    id: str
    name: str
    type: str


@dataclass(frozen=True, slots=True)
class Fact:
    """One recalled fact with its record. `kind` says which fields are set: an observation or a
    description (`entity`), a relation (`entity` its source, `other` its target, `relation`
    its properties), an episode (`episode_id`, `at`, `involved`)."""

    doc_id: int
    kind: str  # observation | entity | relation | episode
    text: str
    entity: End | None = None
    other: End | None = None
    relation: dict[str, Any] | None = None
    episode_id: int | None = None
    at: datetime | None = None
    involved: list[tuple[End, str]] = field(default_factory=list)  # an episode's entities and their roles
    private: bool = False  # an episode of a principal's private memory
    source: str | None = None
    created_by: str | None = None
    created_at: datetime | None = None
    valid_from: datetime | None = None
    valid_until: datetime | None = None


@timed
async def facts(tx: Tx, doc_ids: Sequence[int]) -> dict[int, Fact]:
    """The facts of these documents, by document id."""
    rows = await tx.fetch(
        """
        SELECT d.id,
               CASE WHEN d.episode_id IS NOT NULL THEN 'episode' WHEN d.relation_id IS NOT NULL THEN 'relation'
                    WHEN d.observation_id IS NOT NULL THEN 'observation' ELSE 'entity' END AS kind,
               e.id::text AS e_id, e.name AS e_name, e.type AS e_type, e.description,
               t.id::text AS t_id, t.name AS t_name, t.type AS t_type,
               ag_catalog.agtype_out(r.properties)::text AS props,
               o.content, o.source AS o_source, o.created_by AS o_by, o.created_at AS o_at,
               o.valid_from AS o_from, o.valid_until AS o_until,
               p.id AS p_id, p.content AS p_content, p.at AS p_at, p.source AS p_source, p.created_by AS p_by,
               p.created_at AS p_created, p.valid_from AS p_from, p.valid_until AS p_until,
               p.owner IS NOT NULL AS p_private,
               CASE WHEN p.id IS NOT NULL THEN (
                   SELECT json_agg(json_build_array(x.id::text, x.name, x.type, pe.role) ORDER BY pe.role DESC, x.name)
                   FROM {s}.episode_entities pe JOIN {s}.entities x ON x.id = pe.entity_id AND x.deleted_at IS NULL
                   WHERE pe.episode_id = p.id)::text END AS involved
        FROM {s}.search_docs d
        LEFT JOIN {s}.entities e ON e.id = d.entity_id
        LEFT JOIN {s}.entities t ON t.id = d.other_id
        LEFT JOIN {s}."REL" r ON r.id = d.edge
        LEFT JOIN {s}.observations o ON o.id = d.observation_id
        LEFT JOIN {s}.episodes p ON p.id = d.episode_id
        WHERE d.id = ANY($1::bigint[])
        """,
        list(doc_ids),
    )
    out = {}
    for r in rows:
        kind, doc = r["kind"], r["id"]
        entity = End(r["e_id"], r["e_name"], r["e_type"]) if r["e_id"] else None
        if kind == "episode":
            out[doc] = Fact(
                doc, kind, r["p_content"], episode_id=r["p_id"], at=r["p_at"],
                involved=[(End(i, n, t), role) for i, n, t, role in orjson.loads(r["involved"] or "[]")],
                private=r["p_private"], source=r["p_source"], created_by=r["p_by"], created_at=r["p_created"],
                valid_from=r["p_from"], valid_until=r["p_until"],
            )  # fmt: skip
        elif kind == "relation":
            props = orjson.loads(r["props"]) if r["props"] else {}
            out[doc] = Fact(
                doc, kind, f"{r['e_name']} {props.get('type', '')} {r['t_name']}", entity=entity,
                other=End(r["t_id"], r["t_name"], r["t_type"]), relation=props, source=props.get("source"),
                created_by=props.get("created_by"), created_at=_time(props.get("created_at")),
                valid_from=_time(props.get("valid_from")), valid_until=_time(props.get("valid_until")),
            )  # fmt: skip
        elif kind == "observation":
            out[doc] = Fact(
                doc, kind, r["content"], entity=entity, source=r["o_source"], created_by=r["o_by"],
                created_at=r["o_at"], valid_from=r["o_from"], valid_until=r["o_until"],
            )  # fmt: skip
        else:
            out[doc] = Fact(doc, kind, r["description"], entity=entity)
    return out


def _time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


@timed
async def similar(tx: Tx, model: Model, doc_ids: Sequence[int], floor: float) -> list[tuple[int, int, float, bool]]:
    """Pairs (a, b, cosine similarity, of one owner) of these documents, a before b in the given
    order, at least `floor` alike. Of one owner: two facts of one entity, or two episodes (a
    relation belongs to none)."""
    cast = f"::vector({int(model.dimensions)})"
    rows = await tx.fetch(
        f"""
        WITH v AS MATERIALIZED (
            SELECT x.n, d.id, d.embedding{cast} AS e, d.entity_id, d.relation_id IS NULL AS owned
            FROM unnest($1::bigint[]) WITH ORDINALITY AS x(id, n) JOIN {{s}}.search_docs d ON d.id = x.id
            WHERE d.model_id = {int(model.id)}
        )
        SELECT a.id, b.id, 1 - (a.e <=> b.e), a.owned AND b.owned AND a.entity_id IS NOT DISTINCT FROM b.entity_id
        FROM v a JOIN v b ON b.n > a.n WHERE a.e <=> b.e < $2
        """,
        list(doc_ids),
        1.0 - floor,
    )
    return [(r[0], r[1], r[2], r[3]) for r in rows]
