"""The rankings over a tenant's search documents (index.py) that search and recall share, search's
own (words, names), and what a search shows of its hits. What a ranked document must pass is
scopes.py's; recall's own rankings are in recall.py.

Vector indexes are partial per model: ``search_docs_vec_<model id>`` over
``embedding::vector(<dims>)``. Those two integers, which come from the control plane's model
table and never from a caller, are therefore written into the vector queries' text (a typmod and
a partial index's predicate cannot be parameters); everything else is a bind parameter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from app.store.database import Tx, timed
from app.store.index import Model, Vector, vector_value
from app.store.scopes import Among, Scope, among, entity_kind, entity_text


@dataclass(frozen=True, slots=True)
class Ranked:
    """One row of a ranking, best first: its document (None for a name: the entity itself) and score.
    `entity_id` is whose text it is (search's rankings); `near` whose fact it is, in a `within`
    ranking: `named` (an entity the question names), `bridge` (a neighbour of two or more of them),
    `neighbour` (of one); `episode` whether it is an episode."""

    doc_id: int | None
    score: float
    entity_id: str | None = None
    near: str | None = None
    episode: bool = False


@timed
async def tune(tx: Tx, ef_search: int) -> None:
    """Settings for one search transaction.

    - Vector scans go on until enough rows pass the filters (pgvector 0.8 iterative scan).
    - Plans are made for each query's own values: after five runs PostgreSQL would otherwise
      switch to a generic plan, which for these queries ignores the vector index and the
      selectivity of the words (measured: 2 ms became 300 ms on 9k texts).
    """
    await tx.set_local(
        {
            "hnsw.ef_search": int(ef_search),
            "hnsw.iterative_scan": "relaxed_order",
            "pg_trgm.word_similarity_threshold": 0.5,
            "plan_cache_mode": "force_custom_plan",
        }
    )


@timed
async def by_vector(tx: Tx, model: Model, query: Vector, limit: int, scope: Scope, what: Among) -> list[Ranked]:
    """Nearest documents passing the scope as `what` (the texts of entities, or facts), by cosine
    distance (the HNSW index, scanned on until enough pass); score = cosine similarity."""
    cast = f"::vector({int(model.dimensions)})"
    join, where, params = among(what, scope, 3)
    rows = await tx.fetch(
        f"""
        SELECT id, distance, entity_id, episode FROM (
            SELECT d.id, d.embedding{cast} <=> $1{cast} AS distance, d.entity_id::text AS entity_id,
                   d.episode_id IS NOT NULL AS episode
            FROM {{s}}.search_docs d {join}
            WHERE d.model_id = {int(model.id)} {where}
            ORDER BY distance LIMIT $2
        ) x ORDER BY distance
        """,
        vector_value(query),
        limit,
        *params,
    )
    return [Ranked(r[0], 1.0 - r[1], entity_id=r[2], episode=r[3]) for r in rows]


def tsquery(text: str, strict: str, common: str) -> str:
    """The query's tsquery from parameters: web-search syntax on `text` if `strict`, else any of its
    words but those in `common` (all of them if no other is left)."""
    return (
        f"CASE WHEN {strict}::boolean THEN websearch_to_tsquery('english', {text}::text) ELSE ("
        f" SELECT coalesce(string_agg(quote_literal(w), ' | ') FILTER (WHERE w <> ALL ({common}::text[])),"
        f" string_agg(quote_literal(w), ' | '))::tsquery"
        f" FROM unnest(tsvector_to_array(to_tsvector('english', {text}::text))) AS w) END"
    )


@timed
async def common_words(tx: Tx, min_texts: int) -> list[str]:
    """Words that the planner's statistics say occur in more than `min_texts` of the tenant's texts
    (read by a definer function: pg_stats hides a table that row-level security filters)."""
    words = await tx.fetchval("SELECT engram.common_words($1)", min_texts)
    return words or []


@timed
async def by_words(
    tx: Tx,
    query: str,
    strict: bool,
    common: Sequence[str],
    limit: int,
    candidates: int,
    scope: Scope,
) -> list[Ranked]:
    """Full-text matches; score = the share of the query's words the text contains.

    `strict` keeps web-search semantics (all words, "phrases", or, -not). Otherwise a text matches
    if it holds any of the query's words but the `common` ones, and texts holding more of the
    query's words (common ones included), then closer together (cover density), rank higher.
    At most `candidates` matching texts are ranked.
    """
    where, params = entity_text(scope, 6)
    rows = await tx.fetch(
        f"""
        SELECT entity_id, id, share FROM (
            SELECT d.entity_id::text AS entity_id, d.id, ts_rank_cd(d.tsv, q.q) AS density,
                   (SELECT count(*) FROM unnest(q.each) AS w WHERE d.tsv @@ w)::float8
                       / greatest(cardinality(q.each), 1) AS share
            FROM (SELECT {tsquery("$1", "$3", "$4")} AS q,
                         ARRAY(SELECT quote_literal(w)::tsquery
                               FROM unnest(tsvector_to_array(to_tsvector('english', $1::text))) AS w) AS each) q,
                 LATERAL (SELECT * FROM {{s}}.search_docs d WHERE d.tsv @@ q.q LIMIT $5) d
                 JOIN {{s}}.entities e ON e.id = d.entity_id
            WHERE d.relation_id IS NULL {where}
        ) m
        ORDER BY share DESC, density DESC, id LIMIT $2
        """,
        *(query, limit, strict, list(common), candidates, *params),
    )
    return [Ranked(r[1], r[2], entity_id=r[0]) for r in rows]


@timed
async def by_name(
    tx: Tx,
    query: str,
    limit: int,
    scope: Scope,
) -> list[Ranked]:
    """Entities whose name or an alias resembles the query (trigrams): typos and partial names."""
    kind, params = entity_kind(scope, 3)
    rows = await tx.fetch(
        f"""
        SELECT id::text, max(similarity) AS similarity FROM (
            SELECT e.id, e.name, word_similarity($1::text, e.name) AS similarity
            FROM {{s}}.entities e
            WHERE $1::text <% e.name {kind}
            UNION ALL
            SELECT e.id, e.name, word_similarity($1::text, a.alias)
            FROM {{s}}.aliases a JOIN {{s}}.entities e ON e.id = a.entity_id
            WHERE $1::text <% a.alias {kind}
        ) m GROUP BY id, name
        ORDER BY similarity DESC, name LIMIT $2
        """,
        query,
        limit,
        *params,
    )
    return [Ranked(None, r[1], entity_id=r[0]) for r in rows]


@dataclass(frozen=True, slots=True)
class Shown:
    """What a hit shows of the document that placed it."""

    kind: str  # "entity" (its name, type and description) or "observation"
    text: str  # the observation, or the entity's description (its name and type when it has none)
    snippet: str | None  # the text around the query's words, marked, when words matched
    # An observation's record (None for the entity's own text):
    source: str | None = None
    created_by: str | None = None
    created_at: datetime | None = None
    valid_from: datetime | None = None
    valid_until: datetime | None = None


@timed
async def matched_texts(
    tx: Tx, doc_ids: Sequence[int], highlight: Sequence[int], query: str, strict: bool
) -> dict[int, Shown]:
    """What each document shows; a snippet only for documents in `highlight`, which matched by words."""
    rows = await tx.fetch(
        """
        SELECT d.id, d.observation_id IS NULL AS is_entity,
               coalesce(o.content, nullif(e.description, ''), e.name || ' (' || e.type || ')') AS text,
               o.source, o.created_by, o.created_at, o.valid_from, o.valid_until
        FROM {s}.search_docs d
        JOIN {s}.entities e ON e.id = d.entity_id
        LEFT JOIN {s}.observations o ON o.id = d.observation_id
        WHERE d.id = ANY($1::bigint[])
        """,
        list(doc_ids),
    )
    out: dict[int, tuple[str, str, str | None]] = {
        r["id"]: ("entity" if r["is_entity"] else "observation", r["text"], None) for r in rows
    }
    record = {r["id"]: tuple(r)[3:] for r in rows}
    marked = [i for i in highlight if i in out]
    if marked:
        snippets = await tx.fetch(
            f"""
            SELECT u.id, ts_headline('english', u.text, q.q,
                   'StartSel=**, StopSel=**, MaxWords=30, MinWords=12, MaxFragments=2, FragmentDelimiter=" … "')
            FROM (SELECT {tsquery("$1", "$2", "'{}'")} AS q) q, unnest($3::bigint[], $4::text[]) AS u(id, text)
            """,
            query,
            strict,
            marked,
            [out[i][1] for i in marked],
        )
        for r in snippets:
            kind, text, _ = out[r[0]]
            out[r[0]] = (kind, text, r[1])
    return {doc: Shown(*shown, *record[doc]) for doc, shown in out.items()}


@timed
async def pending_count(tx: Tx, up_to: int) -> int:
    """Texts waiting for an embedding, counted up to `up_to` (a long backlog is not worth counting)."""
    return await tx.fetchval(
        "SELECT count(*) FROM (SELECT 1 FROM {s}.search_docs WHERE model_id IS NULL LIMIT $1) p", up_to
    )
