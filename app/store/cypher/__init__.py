"""The read-only Cypher that `query_graph` accepts, parsed and written out again for AGE
(docs/tools.md, "query_graph"; docs/architecture.md, "The Cypher read subset").

tokens (tokens.py) → tree (parse.py, tree.py) → named rewrites (rewrite.py) → AGE text (age.py).
The caller's text is never passed on: AGE only sees text the emitter wrote from the tree. Anything
outside the subset is `CypherError` with the line and column where parsing stopped.

The store's own Cypher (`edges_of`) is built here as a tree too, and written by the same emitter:
no other module of the store spells Cypher.
"""

from __future__ import annotations

from app.store.cypher import tree as t
from app.store.cypher.age import ReadQuery, to_age
from app.store.cypher.parse import FUNCTIONS, MAX_COMPUTED_ITEMS, MAX_MAP_ENTRIES, MAX_OPERATIONS, parse_tree
from app.store.cypher.rewrite import hide_deleted, keep_first_rows, split_sorted_projection
from app.store.cypher.tokens import CypherError, CypherLimit

__all__ = [
    "FUNCTIONS",
    "MAX_COMPUTED_ITEMS",
    "MAX_MAP_ENTRIES",
    "MAX_OPERATIONS",
    "CypherError",
    "CypherLimit",
    "ReadQuery",
    "edges_of",
    "parse",
]


def parse(query: str, rows_read: int | None = None) -> ReadQuery:
    """The query written out anew for AGE (of its answer, only the first `rows_read` rows are
    read, if given), or `CypherError` (the reason and where)."""
    tree = hide_deleted(parse_tree(query))
    if rows_read is not None:
        tree = keep_first_rows(tree, rows_read)
    return to_age(split_sorted_projection(tree))


def edges_of(entity_id: str, *, outgoing: bool) -> ReadQuery:
    """The graph ids of the edges leaving (or, not `outgoing`, entering) one entity, in one column:
    a directed match, never an undirected one (AGE plans an undirected pattern as both directions
    joined, far slower). Its one parameter is the entity's id."""
    start, end = t.Node("a", labelled=True), t.Node("b", labelled=True)
    edge = t.Rel("r", labelled=True, bracketed=True, left=not outgoing, right=outgoing)
    where = t.Binary("=", t.Prop(t.Name("a"), "id"), t.Str(entity_id, slot=0))
    match = t.Match(optional=False, paths=(t.Path(start, ((edge, end),)),), where=where)
    edge_id = t.Item(t.Call("id", (t.Name("r"),)), alias=None, column="edge")
    return to_age(t.Query((match, t.Projection("RETURN", distinct=False, items=(edge_id,)))))
