"""Rewrites of a parsed query (tree.py) into the query AGE is given, each a function from tree to
tree with a name that says what it does, in the way sqlglot names its dialects' transforms."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from functools import reduce
from itertools import count

from app.store.cypher.tree import (
    Binary,
    Clause,
    Expr,
    Group,
    IsNull,
    Item,
    Match,
    Name,
    Path,
    Projection,
    Prop,
    Query,
    SortGuard,
    SortKey,
    column_sorted,
    name_of,
)


def hide_deleted(query: Query) -> Query:
    """Each node of a MATCH gets `v.deleted IS NULL` (a soft-deleted entity's vertex carries
    `deleted`, migration 0018), after the caller's WHERE; a node without a variable gets one the
    caller cannot write (`_h0`, `_h1`, …: names may not start with '_')."""
    hidden = count()
    return Query(tuple(_alive(c, hidden) if isinstance(c, Match) else c for c in query.clauses))


def _alive(match: Match, hidden: Iterator[int]) -> Match:
    paths, alive = [], []
    for path in match.paths:
        names = [n.var if n.var is not None else f"_h{next(hidden)}" for n in path.nodes]
        nodes = [replace(n, var=name) for n, name in zip(path.nodes, names, strict=True)]
        paths.append(Path(nodes[0], tuple((rel, n) for (rel, _), n in zip(path.steps, nodes[1:], strict=True))))
        alive += names
    conditions: list[Expr] = [Group(match.where)] if match.where is not None else []
    conditions += [IsNull(Prop(Name(name), "deleted"), False) for name in alive]
    return Match(match.optional, tuple(paths), reduce(lambda a, b: Binary("AND", a, b), conditions))


def keep_first_rows(query: Query, rows: int) -> Query:
    """Only the first `rows` rows of the answer are read: a final sort needs keep no more (a top-N
    sort), so a sorted RETURN gets LIMIT `rows` (or its own LIMIT, if lower)."""
    last = query.clauses[-1]
    if not (isinstance(last, Projection) and last.head == "RETURN" and last.order):
        return query
    limit = rows if last.limit is None else min(last.limit, rows)
    return Query((*query.clauses[:-1], replace(last, limit=limit)))


def split_sorted_projection(query: Query) -> Query:
    """AGE 1.5 cannot sort by a name the same projection gives ("could not find rte"), so a sorted
    WITH or RETURN becomes three: the items under their names (and, for a key that is no item,
    the key under a hidden name `_oK`); the names again, each sort key through its guard (the rows
    sorted and the keys' sizes are bounded: AGE's agtype comparison keeps what it allocates); then
    the names, sorted by them, with SKIP, LIMIT and WHERE."""
    clauses: list[Clause] = []
    for clause in query.clauses:
        if isinstance(clause, Projection) and clause.order:
            clauses.extend(_split(clause))
        else:
            clauses.append(clause)
    return Query(tuple(clauses))


def _split(p: Projection) -> tuple[Projection, Projection, Projection]:
    names = [item.alias or name_of(item.value) or f"_c{i}" for i, item in enumerate(p.items)]
    first = [Item(item.value, name, item.column) for item, name in zip(p.items, names, strict=True)]
    order: list[SortKey] = []
    sorted_by: list[str] = []  # the names the rows are sorted by, in order, each once
    for k, key in enumerate(p.order):
        found = column_sorted(key.value, p.items)
        name = names[found] if found is not None else f"_o{k}"
        if found is None:
            first.append(Item(key.value, name, name))
        order.append(SortKey(Name(name), key.descending, key.at))
        if name not in sorted_by:
            sorted_by.append(name)
    guards = {n: Item(SortGuard(Name(n), counts_row=i == 0), n, n) for i, n in enumerate(sorted_by)}
    carried = [guards.get(n, Item(Name(n), None, n)) for n in names] + [guards[n] for n in sorted_by if n not in names]
    last = [Item(Name(n), None, item.column) for item, n in zip(p.items, names, strict=True)]
    return (
        Projection("WITH", p.distinct, tuple(first)),
        Projection("WITH", False, tuple(carried)),
        Projection(p.head, False, tuple(last), tuple(order), p.skip, p.limit, p.where),
    )
