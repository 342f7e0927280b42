"""find_entities' reads: a page of live entities by every given filter, keyset-paged by a sort key,
and the total matching. Beside entities.py (the rows, their reads and writes) because the listing's
filters and name branches are a query plan of their own (docs/benchmarks.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from app.store.database import Tx, timed
from app.store.entities import COLUMNS, EntityRow, entity_row, like_pattern
from app.store.scopes import ANY_FACT, FactFilter, FactSql
from app.store.validity import NOW, When, holds

_SORTS = {
    # sort name: (key expression, direction)
    "name": ("e.name", "ASC"),
    "recent": ("e.updated_at", "DESC"),
    "certainty": ("coalesce(e.certainty, -1)", "DESC"),
}


@dataclass(frozen=True, slots=True)
class Found:
    """One entity of a listing page: its row, its sort key as text (the cursor's), and the alias that
    matched the name filter when the name itself did not."""

    row: EntityRow
    sort_key: str
    matched_alias: str | None


# `find` with a name filter lists two disjoint branches, each planned as its own query: the entities
# whose name matches (the plans the filter had on names alone: the names' trigram index when it is
# selective, the sort order's index when it is not), and those whose name does not but an alias
# does (ids from the aliases' trigram index). An OR of the two can use no index, and one listing
# over both sets of ids loses the row estimates and the sort order's index (measured in
# docs/benchmarks.md). Each branch: its condition on `e`, and the alias it reports as matched.
_BY_NAME = ("e.name ILIKE $1", "NULL")
_BY_ALIAS = (
    "e.name NOT ILIKE $1 AND e.id IN (SELECT a.entity_id FROM {s}.aliases a WHERE a.alias ILIKE $1)",
    "(SELECT a.alias FROM {s}.aliases a WHERE a.entity_id = e.id AND a.alias ILIKE $1 ORDER BY a.alias_key LIMIT 1)",
)
_UNNAMED = ("$1::text IS NULL", "NULL")  # no name filter: its parameter is still named (NULL)


def _matching(facts: FactSql) -> str:
    """SQL: the entity `e` passes find's filters, parameters $2-$15 (NAMED: the name filter's branch)."""
    return f"""
        e.deleted_at IS NULL AND NAMED
        AND ($2::text IS NULL OR e.name ILIKE $2 OR e.type ILIKE $2 OR e.description ILIKE $2
             OR e.properties::text ILIKE $2
             OR EXISTS (SELECT 1 FROM {{s}}.observations o WHERE o.entity_id = e.id AND o.content ILIKE $2
                        AND HOLDS))
        AND ($3::text[] IS NULL OR e.type = ANY($3))
        AND ($4::text IS NULL OR e.area = $4) AND ($5::text IS NULL OR e.topic = $5)
        AND ($6::text IS NULL OR e.subtopic = $6)
        AND ($7::int IS NULL OR e.certainty >= $7) AND ($8::int IS NULL OR e.certainty <= $8)
        AND ($9::timestamptz IS NULL OR e.created_at >= $9) AND ($10::timestamptz IS NULL OR e.created_at < $10)
        AND ({facts.unset} OR EXISTS (SELECT 1 FROM {{s}}.observations o WHERE o.entity_id = e.id AND HOLDS
                                      AND {facts.passes("o.source", "o.created_at")}))
    """.replace("HOLDS", holds("o", "$14", "$15"))


@timed
async def find(
    tx: Tx,
    *,
    sort: str,
    limit: int,
    after: tuple[str, str] | None,
    name_contains: str | None = None,
    text_contains: str | None = None,
    types: Sequence[str] | None = None,
    area: str | None = None,
    topic: str | None = None,
    subtopic: str | None = None,
    certainty_min: int | None = None,
    certainty_max: int | None = None,
    created_after: datetime | None = None,
    created_before: datetime | None = None,
    facts: FactFilter = ANY_FACT,
    when: When = NOW,
) -> tuple[list[Found], int]:
    """A page of live entities matching every given filter, keyset-paged; and the total matching.

    `name_contains` matches names and aliases (each entity once). `after` is the (sort key as text,
    id) of the last row of the previous page. Observations count only as `when` sees them; with a
    fact filter, an entity needs an observation passing it.
    """
    key, direction = _SORTS[sort]
    op = ">" if direction == "ASC" else "<"
    fact_sql, fact_params = facts.sql(11)
    where = _matching(fact_sql)
    branches = [_BY_NAME, _BY_ALIAS] if name_contains else [_UNNAMED]
    likes = [like_pattern(text) if text else None for text in (name_contains, text_contains)]
    kinds = [list(types) if types else None, area, topic, subtopic, certainty_min, certainty_max]
    args = [*likes, *kinds, created_after, created_before, *fact_params, *when.params()]
    pages = [
        f"""
        SELECT {COLUMNS}, ({key})::text AS sort_key, {alias} AS matched_alias, {key} AS sort_value, e.id AS sort_id
        FROM {{s}}.entities e WHERE {where.replace("NAMED", named)}
            AND ($16::text IS NULL OR ({key}, e.id) {op} ($16::text::{_key_type(sort)}, $17::uuid))
        ORDER BY {key} {direction}, e.id {direction} LIMIT $18
        """
        for named, alias in branches
    ]
    if len(pages) > 1:  # each branch's first page, then the first of those
        page = " UNION ALL ".join(f"({p})" for p in pages)
        page += f" ORDER BY sort_value {direction}, sort_id {direction} LIMIT $18"
    else:
        page = pages[0]
    rows = await tx.fetch(page, *args, after[0] if after else None, after[1] if after else None, limit)
    counts = [f"(SELECT count(*) FROM {{s}}.entities e WHERE {where.replace('NAMED', named)})" for named, _ in branches]
    total = await tx.fetchval("SELECT " + " + ".join(counts), *args)
    return [Found(entity_row(r), r["sort_key"], r["matched_alias"]) for r in rows], total


def _key_type(sort: str) -> str:
    return {"name": "text", "recent": "timestamptz", "certainty": "int"}[sort]
