"""The Cypher read subset piece by piece, without a database: tokens, the tree a query parses to,
each rewrite on a tree, and the text the emitter writes (the whole path runs against AGE in
tests/test_query_graph.py)."""

from __future__ import annotations

import pytest

from app.store.cypher import MAX_OPERATIONS, CypherLimit, parse
from app.store.cypher.age import BOUNDED, SORT_KEY, SORT_KEY_SIZE, to_age
from app.store.cypher.parse import parse_tree
from app.store.cypher.rewrite import hide_deleted, keep_first_rows, split_sorted_projection
from app.store.cypher.tokens import CypherError, tokenize
from app.store.cypher.tree import (
    Binary,
    Call,
    Group,
    Int,
    IsNull,
    Item,
    Match,
    Name,
    Node,
    Not,
    Paren,
    Path,
    Projection,
    Prop,
    Query,
    Rel,
    SortGuard,
    SortKey,
    Str,
    column_sorted,
)


def test_tokens_have_kinds_values_and_offsets():
    tokens = tokenize("MATCH (n) // gone\nWHERE n.x >= 1.5e2 AND n.s = 'it\\'s' RETURN n")
    assert [(t.kind, t.text) for t in tokens] == [
        ("word", "MATCH"), ("punct", "("), ("word", "n"), ("punct", ")"), ("word", "WHERE"), ("word", "n"),
        ("punct", "."), ("word", "x"), ("punct", ">="), ("float", "1.5e2"), ("word", "AND"), ("word", "n"),
        ("punct", "."), ("word", "s"), ("punct", "="), ("string", "it's"), ("word", "RETURN"), ("word", "n"),
        ("end", ""),
    ]  # fmt: skip
    assert (tokens[4].at, tokens[4].end) == (18, 23)


@pytest.mark.parametrize(
    ("query", "reason", "where"),
    [
        ("RETURN\n  `n`", "quoted identifiers are not accepted; use plain names", (2, 3)),
        ("RETURN $x", "parameters are not accepted; write values in the query", (1, 8)),
        ("RETURN 12ab", "malformed number", (1, 8)),
        ("RETURN 'a\\q'", "unknown escape in string", (1, 10)),
        ("RETURN 1 /* open", "unterminated comment", (1, 10)),
    ],
)
def test_tokens_refuse_with_the_place(query, reason, where):
    with pytest.raises(CypherError) as refused:
        tokenize(query)
    assert refused.value.reason == reason and (refused.value.line, refused.value.column) == where


def test_a_query_parses_to_its_tree():
    tree = parse_tree("MATCH (a:Entity {name: 'Ada'})-[r]->() WHERE a.x > 1 RETURN a.name AS n, count(*)")
    match, ret = tree.clauses
    assert match == Match(
        False,
        (
            Path(
                Node("a", True, (("name", Str("Ada", 0)),)),
                ((Rel("r", False, bracketed=True, right=True), Node(None, False)),),
            ),
        ),
        Binary(">", Prop(Name("a"), "x"), Int(1)),
    )
    assert ret == Projection(
        "RETURN",
        False,
        (Item(Prop(Name("a"), "name"), "n", "n"), Item(Call("count", (), star=True), None, "count(*)")),
    )
    assert tree.columns == ["n", "count(*)"]


def test_parentheses_and_precedence_are_in_the_tree():
    (ret,) = parse_tree("RETURN (1 + 2) * 3, NOT 1 = 2 OR 3 IS NOT NULL").clauses
    assert isinstance(ret, Projection)
    first, second = (item.value for item in ret.items)
    assert first == Binary("*", Paren(Binary("+", Int(1), Int(2))), Int(3))
    assert second == Binary("OR", Not(Binary("=", Int(1), Int(2))), IsNull(Int(3), True))


def test_sort_keys_name_columns_by_name_or_by_being_the_same_expression():
    (ret,) = parse_tree("RETURN 1 AS a, (2 + 3), 4 ORDER BY a, 2 + 3, 5").clauses
    assert isinstance(ret, Projection)
    assert [column_sorted(k.value, ret.items) for k in ret.order] == [0, 1, None]
    with pytest.raises(CypherError) as refused:
        parse_tree("MATCH (n)\nRETURN DISTINCT n.name ORDER BY n.type")
    assert refused.value.reason == "after DISTINCT or an aggregate, ORDER BY names a column"
    assert (refused.value.line, refused.value.column) == (2, 33)


def test_depth_is_counted_once_per_level_and_given_back():
    parse_tree("RETURN " + "(" * 25 + "1" + ")" * 25 + " AS a, " + "(" * 25 + "1" + ")" * 25 + " AS b")
    with pytest.raises(CypherError, match="nests deeper than 32"):
        parse_tree("RETURN " + "[" * 20 + "1" + "]" * 20)


def test_hide_deleted_names_every_node_and_keeps_the_callers_condition_first():
    tree = hide_deleted(parse_tree("MATCH (a)-->(), (b) WHERE a.x = 1 OPTIONAL MATCH () RETURN a"))
    first, second, _ = tree.clauses
    assert isinstance(first, Match) and isinstance(second, Match)
    assert [n.var for p in first.paths for n in p.nodes] == ["a", "_h0", "b"]
    alive = [IsNull(Prop(Name(v), "deleted"), False) for v in ("a", "_h0", "b")]
    condition = Group(Binary("=", Prop(Name("a"), "x"), Int(1)))
    for check in alive:
        condition = Binary("AND", condition, check)
    assert first.where == condition
    assert second.paths[0].start.var == "_h1" and second.where == IsNull(Prop(Name("_h1"), "deleted"), False)


def test_split_sorted_projection_makes_three_projections():
    tree = split_sorted_projection(parse_tree("UNWIND [1] AS x RETURN x AS v, x + 1 ORDER BY v DESC, x * 2 SKIP 1"))
    _, first, second, last = tree.clauses
    plus = Binary("+", Name("x"), Int(1))
    assert first == Projection(
        "WITH",
        False,
        (Item(Name("x"), "v", "v"), Item(plus, "_c1", "x + 1"), Item(Binary("*", Name("x"), Int(2)), "_o1", "_o1")),
    )
    assert second == Projection(
        "WITH",
        False,
        (
            Item(SortGuard(Name("v"), True), "v", "v"),
            Item(Name("_c1"), None, "_c1"),
            Item(SortGuard(Name("_o1"), False), "_o1", "_o1"),
        ),
    )
    assert last == Projection(
        "RETURN",
        False,
        (Item(Name("v"), None, "v"), Item(Name("_c1"), None, "x + 1")),
        (SortKey(Name("v"), True, (1, 47)), SortKey(Name("_o1"), False, (1, 55))),
        skip=1,
    )
    assert tree.columns == ["v", "x + 1"]  # the answer's names are the caller's
    unsorted = parse_tree("RETURN 1 AS a")
    assert split_sorted_projection(unsorted) == unsorted


def test_keep_first_rows_bounds_only_a_final_sort():
    sorted_ = parse_tree("RETURN 1 AS a ORDER BY a LIMIT 50")
    last = keep_first_rows(sorted_, 11).clauses[-1]
    assert isinstance(last, Projection) and last.limit == 11
    last = keep_first_rows(parse_tree("RETURN 1 AS a ORDER BY a LIMIT 5"), 11).clauses[-1]
    assert isinstance(last, Projection) and last.limit == 5
    plain = parse_tree("WITH 1 AS a ORDER BY a RETURN a")
    assert keep_first_rows(plain, 11) == plain


def test_the_emitter_writes_strings_as_parameters_and_bounds_what_grows():
    q = to_age(Query((Projection("RETURN", False, (Item(Binary("+", Str("a'$$", 0), Str("b", 1)), "s", "s"),)),)))
    assert q.text == f"RETURN {BOUNDED}($p0 + $p1) AS s" and q.parameters == {"p0": "a'$$", "p1": "b"}
    assert q.columns == ["s"]
    guard = to_age(Query((Projection("WITH", False, (Item(SortGuard(Name("v"), True), "v", "v"),)),)))
    assert guard.text == f"WITH {SORT_KEY}(v) AS v"
    text = parse("UNWIND ['x'] AS s RETURN collect(DISTINCT s), toUpper(s), (s), ({k: s})").text
    assert (
        f"coalesce(engram.cypher_collect_guard(DISTINCT {SORT_KEY_SIZE}(s)), collect(DISTINCT {SORT_KEY}(s)))" in text
    )
    assert text.endswith(
        f"{BOUNDED}(toUpper(s)), s, {BOUNDED}({{k: s}})"
    )  # no `(s)` nor `({` for AGE to read as a pattern


def test_the_whole_path_writes_what_it_wrote_before():
    q = parse("MATCH (a {name: 'Ada'})-[:REL]->(b) RETURN b.name AS n ORDER BY n", rows_read=11)
    assert q.text == (
        "MATCH (a {name: $p0})-[:REL]->(b) WHERE a.deleted IS NULL AND b.deleted IS NULL"
        f" WITH {BOUNDED}(b.name) AS n WITH {SORT_KEY}(n) AS n RETURN n ORDER BY n LIMIT 11"
    )
    assert q.parameters == {"p0": "Ada"} and q.columns == ["n"]
    # Parentheses the caller wrote around a difference of a sum stay (they change its value).
    assert parse("RETURN (1 + 2 - 3) * 4").text == f"RETURN ({BOUNDED}(1 + 2) - 3) * 4"


def test_a_computed_with_item_is_fenced_and_operations_are_bounded():
    # A WITH item that is not a name or a literal goes through a volatile check once, so the planner
    # computes it once per row rather than copying its expression into every use of its name.
    text = parse("MATCH (n) WITH n, 1 AS one, n.name AS name, left(n.name, 2) AS s, count(*) AS c RETURN s").text
    assert (
        f"WITH n, 1 AS one, {BOUNDED}(n.name) AS name, {BOUNDED}(left(n.name, 2)) AS s,"
        f" {BOUNDED}(count(*)) AS c RETURN s"
    ) in text
    assert f"WITH {BOUNDED}(a + 1) AS b" in parse("WITH 1 AS a WITH a + 1 AS b RETURN b").text  # not twice
    parse("WITH 'x' AS s RETURN " + " AND ".join(["s = s"] * 128))  # 255 operations
    with pytest.raises(CypherLimit) as refused:
        parse("WITH 'x' AS s RETURN " + " AND ".join(["s = s"] * 129))
    assert f"at most {MAX_OPERATIONS}" in refused.value.reason
