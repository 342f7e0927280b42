"""A recursive-descent parser of the read subset `query_graph` accepts (MATCH, OPTIONAL MATCH,
WHERE, WITH, UNWIND, RETURN, ORDER BY, SKIP, LIMIT; the functions of FUNCTIONS): tokens in, a
tree (tree.py) out. It decides what is accepted and bounds the query's size; what AGE needs
besides (the deleted filter, the split of a sorted projection) is a rewrite of the tree."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from app.store.cypher.tokens import WRITES, Cursor, CypherError, CypherLimit, Token, position
from app.store.cypher.tree import (
    AGGREGATES,
    EDGE_LABEL,
    NODE_LABEL,
    Binary,
    Call,
    Case,
    Clause,
    Const,
    Expr,
    Float,
    Int,
    IsNull,
    Item,
    ListOf,
    MapOf,
    Match,
    Name,
    Node,
    Not,
    Paren,
    Path,
    Projection,
    Prop,
    Properties,
    Query,
    Rel,
    Slice,
    SortKey,
    Str,
    Unary,
    Unwind,
    aggregates,
    column_sorted,
    name_of,
    walk,
)
from app.store.cypher.tree import Index as At

MAX_DEPTH = 32
MAX_CLAUSES = 16
MAX_NODES = 16
MAX_COLUMNS = 64  # items of one WITH or RETURN: each is a value held in the row at once
MAX_INT = 2**63 - 1
MAX_SKIP = 10**9
# What AGE builds in one function call (PostgreSQL passes at most 100 arguments: a map's key and
# value are two).
MAX_MAP_ENTRIES = 50
# Items of one list or map literal that are computed (not a literal): the literal's size is at most
# this many times the value bound (docs/security.md, "query_graph").
MAX_COMPUTED_ITEMS = 16

# Operations in one query (each operator, function call, property or index read, CASE, list or map
# literal): what one row can cost a backend is about this many values of the value bound, held
# until the row is done (docs/benchmarks.md, "query_graph memory"). Useful queries use a few dozen.
MAX_OPERATIONS = 256
_OPERATIONS = (Prop, At, Slice, Unary, Not, Binary, IsNull, ListOf, MapOf, Call, Case)

# name (lower case) -> the spelling AGE is given, and how many arguments it takes (min, max).
FUNCTIONS: dict[str, tuple[str, int, int]] = {
    f.lower(): (f, lo, hi)
    for f, lo, hi in (
        ("id", 1, 1), ("properties", 1, 1), ("label", 1, 1), ("labels", 1, 1), ("type", 1, 1),
        ("startNode", 1, 1), ("endNode", 1, 1), ("keys", 1, 1), ("size", 1, 1),
        ("head", 1, 1), ("last", 1, 1), ("tail", 1, 1), ("coalesce", 1, 8), ("exists", 1, 1),
        ("toLower", 1, 1), ("toUpper", 1, 1), ("trim", 1, 1), ("lTrim", 1, 1), ("rTrim", 1, 1),
        ("substring", 2, 3), ("left", 2, 2), ("right", 2, 2), ("replace", 3, 3), ("split", 2, 2),
        ("reverse", 1, 1), ("toString", 1, 1), ("toInteger", 1, 1), ("toFloat", 1, 1),
        ("toBoolean", 1, 1), ("abs", 1, 1), ("ceil", 1, 1), ("floor", 1, 1), ("round", 1, 1),
        ("sign", 1, 1), ("count", 1, 1), ("sum", 1, 1), ("avg", 1, 1), ("min", 1, 1), ("max", 1, 1),
        ("collect", 1, 1),
    )
}  # fmt: skip
_COMPARISONS = ("=", "<>", "!=", "<", ">", "<=", ">=", "=~")
_LEVELS: tuple[str, ...] = ("OR", "XOR", "AND")  # lowest binding first


def _literal(value: Expr) -> bool:
    """A value written as a literal (a string, a number, true/false/null): no work to build."""
    if isinstance(value, Str | Int | Float | Const):
        return True
    if isinstance(value, Unary | Paren):
        inner = value.operand if isinstance(value, Unary) else value.inner
        return isinstance(inner, Int | Float) and (isinstance(value, Paren) or value.op == "-")
    return False


class _Parser(Cursor):
    def __init__(self, query: str) -> None:
        super().__init__(query)
        self.depth = 0
        self.strings = 0
        self.nodes = 0

    @contextmanager
    def nested(self) -> Iterator[None]:
        """One level deeper into the query, refused past MAX_DEPTH."""
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise self.fail(f"the query nests deeper than {MAX_DEPTH}")
            yield
        finally:
            self.depth -= 1

    # --- clauses -------------------------------------------------------------------------------

    def query_(self) -> Query:
        clauses: list[Clause] = []
        while True:
            if len(clauses) >= MAX_CLAUSES:
                raise self.fail(f"at most {MAX_CLAUSES} clauses")
            clause = self.clause()
            clauses.append(clause)
            if isinstance(clause, Projection) and clause.head == "RETURN":
                if self.is_p(";"):
                    self.take()
                if self.tok.kind != "end":
                    raise self.fail("RETURN must be the last clause")
                return Query(tuple(clauses))

    def clause(self) -> Clause:
        tok = self.tok
        if self.is_kw("MATCH", "OPTIONAL"):
            optional = self.take().text.upper() == "OPTIONAL"
            if optional:
                self.kw("MATCH")
            return self.match(optional)
        if self.is_kw("WITH", "RETURN"):
            return self.projection("WITH" if self.take().text.upper() == "WITH" else "RETURN")
        if self.is_kw("UNWIND"):
            self.take()
            value = self.expr()
            self.kw("AS")
            return Unwind(value, self.name("a name after AS"))
        if tok.kind == "word" and tok.text.upper() in WRITES:
            raise self.fail(f"{tok.text.upper()} is not accepted: query_graph only reads")
        if tok.kind == "end":
            raise self.fail("a query ends with RETURN")
        raise self.fail("expected MATCH, OPTIONAL MATCH, WITH, UNWIND or RETURN")

    def match(self, optional: bool) -> Match:
        paths = [self.path()]
        while self.is_p(","):
            self.take()
            paths.append(self.path())
        where = None
        if self.is_kw("WHERE"):
            self.take()
            where = self.expr()
        return Match(optional, tuple(paths), where)

    def path(self) -> Path:
        start = self.node()
        steps = []
        while self.is_p("-", "<"):
            steps.append((self.relationship(), self.node()))
        return Path(start, tuple(steps))

    def node(self) -> Node:
        start = self.tok
        self.p("(")
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise self.fail(f"at most {MAX_NODES} node patterns in a query", start)
        var = self.name("a variable") if self.tok.kind == "word" else None
        labelled = self.label(NODE_LABEL, "entities")
        props = self.properties() if self.is_p("{") else ()
        self.p(")")
        return Node(var, labelled, props)

    def relationship(self) -> Rel:
        left = self.is_p("<")
        if left:
            self.take()
        self.p("-")
        rel = Rel(None, False)
        if self.is_p("["):
            self.take()
            var = self.name("a variable") if self.tok.kind == "word" else None
            labelled = self.label(EDGE_LABEL, "relations")
            if self.is_p("*", ".."):
                raise self.fail(
                    "variable-length patterns are not accepted (on this database they load the whole graph"
                    " into memory): write each hop, e.g. (a)-->()-->(b), or use neighbors / shortest_path"
                )
            props = self.properties() if self.is_p("{") else ()
            self.p("]")
            rel = Rel(var, labelled, props, bracketed=True)
        self.p("-")
        right = self.is_p(">")
        if right:
            self.take()
        if left and right:
            raise self.fail("a relation points one way, or none")
        return Rel(rel.var, rel.labelled, rel.props, rel.bracketed, left, right)

    def label(self, only: str, what: str) -> bool:
        if not self.is_p(":"):
            return False
        self.take()
        tok = self.tok
        if tok.kind != "word" or tok.text != only:
            raise self.fail(f"the only label of {what} is {only} (a relation's own type is the property r.type)")
        self.take()
        return True

    def properties(self) -> Properties:
        self.p("{")
        entries = []
        while True:
            key = self.key()
            self.p(":")
            entries.append((key, self.expr()))
            if len(entries) > MAX_MAP_ENTRIES:
                raise self.fail(f"a map holds at most {MAX_MAP_ENTRIES} entries")
            if not self.is_p(","):
                break
            self.take()
        self.p("}")
        return tuple(entries)

    def projection(self, head: str) -> Projection:
        """WITH or RETURN with its ORDER BY, SKIP and LIMIT (and WITH's WHERE)."""
        distinct = self.is_kw("DISTINCT")
        if distinct:
            self.take()
        if self.is_p("*"):
            raise self.fail("name the columns (no *)")
        items: list[Item] = []
        while True:
            start = self.tok
            items.append(self.item(head))
            if len(items) > MAX_COLUMNS:
                raise self.fail(f"a {head} has at most {MAX_COLUMNS} items", start)
            if not self.is_p(","):
                break
            self.take()
        columns = [item.column for item in items]
        if len(set(columns)) != len(columns):
            raise self.fail("two columns have the same name")
        order = self.order() if self.is_kw("ORDER") else ()
        skip, limit = self.bound("SKIP"), self.bound("LIMIT")
        if distinct or any(aggregates(item.value) for item in items):
            for key in order:
                if column_sorted(key.value, tuple(items)) is None:
                    raise CypherError("after DISTINCT or an aggregate, ORDER BY names a column", *key.at)
        where = None
        if head == "WITH" and self.is_kw("WHERE"):
            self.take()
            where = self.expr()
        return Projection("WITH" if head == "WITH" else "RETURN", distinct, tuple(items), order, skip, limit, where)

    def item(self, head: str) -> Item:
        start = self.tok
        value = self.expr()
        written = self.written(start)
        alias = None
        if self.is_kw("AS"):
            self.take()
            alias = self.name("a name after AS")
        elif head == "WITH" and name_of(value) is None:
            raise self.fail("WITH needs AS for an expression", start)
        return Item(value, alias, alias or written[:200])

    def order(self) -> tuple[SortKey, ...]:
        self.take()
        self.kw("BY")
        keys = []
        while True:
            at = position(self.query, self.tok.at)
            value = self.expr()
            descending = self.is_kw("DESC", "DESCENDING")
            if descending or self.is_kw("ASC", "ASCENDING"):
                self.take()
            keys.append(SortKey(value, descending, at))
            if not self.is_p(","):
                return tuple(keys)
            self.take()

    def bound(self, word: str) -> int | None:
        if not self.is_kw(word):
            return None
        self.take()
        tok = self.tok
        if tok.kind != "int" or int(tok.text) > MAX_SKIP:
            raise self.fail(f"{word} takes a whole number up to {MAX_SKIP}")
        self.take()
        return int(tok.text)

    # --- expressions ---------------------------------------------------------------------------

    def expr(self) -> Expr:
        with self.nested():
            return self.binary(0)

    def binary(self, level: int) -> Expr:
        if level == len(_LEVELS):
            return self.negation()
        left = self.binary(level + 1)
        while self.is_kw(_LEVELS[level]):
            self.take()
            left = Binary(_LEVELS[level], left, self.binary(level + 1))
        return left

    def negation(self) -> Expr:
        if not self.is_kw("NOT"):
            return self.comparison()
        self.take()
        with self.nested():
            return Not(self.negation())

    def comparison(self) -> Expr:
        left = self.additive()
        while True:
            if self.is_p(*_COMPARISONS):
                op = self.take().text
                left = Binary("<>" if op == "!=" else op, left, self.additive())
            elif self.is_kw("IS"):
                self.take()
                negated = self.is_kw("NOT")
                if negated:
                    self.take()
                self.kw("NULL")
                left = IsNull(left, negated)
            elif self.is_kw("IN", "CONTAINS"):
                left = Binary(self.take().text.upper(), left, self.additive())
            elif self.is_kw("STARTS", "ENDS"):
                op = self.take().text.upper()
                self.kw("WITH")
                left = Binary(f"{op} WITH", left, self.additive())
            else:
                return left

    def additive(self) -> Expr:
        left = self.multiplicative()
        while self.is_p("+", "-"):
            left = Binary(self.take().text, left, self.multiplicative())
        return left

    def multiplicative(self) -> Expr:
        left = self.unary()
        while self.is_p("*", "/", "%"):
            left = Binary(self.take().text, left, self.unary())
        return left

    def unary(self) -> Expr:
        if not self.is_p("-", "+"):
            return self.postfix()
        op: Literal["-", "+"] = "-" if self.take().text == "-" else "+"
        with self.nested():
            return Unary(op, self.unary())

    def postfix(self) -> Expr:
        value = self.atom()
        while True:
            if self.is_p("."):
                self.take()
                value = Prop(value, self.key())
            elif self.is_p("["):
                self.take()
                low = None if self.is_p("..") else self.expr()
                if low is not None and not self.is_p(".."):
                    value = At(value, low)
                else:
                    self.take()
                    value = Slice(value, low, None if self.is_p("]") else self.expr())
                self.p("]")
            else:
                return value

    def atom(self) -> Expr:
        tok = self.tok
        if tok.kind in ("string", "int", "float"):
            return self.literal()
        if self.is_p("("):
            self.take()
            inner = self.expr()
            self.p(")")
            return Paren(inner)
        if self.is_p("["):
            self.take()
            with self.nested():
                items = () if self.is_p("]") else self.list_items()
            self.p("]")
            self.few_computed(items, "list", tok)
            return ListOf(items)
        if self.is_p("{"):
            with self.nested():
                entries = self.properties()
            self.few_computed(tuple(v for _, v in entries), "map", tok)
            return MapOf(entries)
        if tok.kind != "word":
            raise self.fail("expected a value")
        word = tok.text.upper()
        if word in ("TRUE", "FALSE", "NULL"):
            self.take()
            return Const("true" if word == "TRUE" else "false" if word == "FALSE" else "null")
        if word == "CASE":
            return self.case()
        if self.punct_at(self.i + 1, "(") or self.qualified_call():
            return self.call()
        return Name(self.name("a value"))

    def literal(self) -> Expr:
        tok = self.tok
        if tok.kind == "string":
            self.take()
            self.strings += 1
            return Str(tok.text, self.strings - 1)
        if tok.kind == "int":
            if int(tok.text) > MAX_INT:
                raise self.fail("integer out of range")
            self.take()
            return Int(int(tok.text))
        value = float(tok.text)
        if not math.isfinite(value):
            raise self.fail("number out of range")
        self.take()
        return Float(value)

    def few_computed(self, items: tuple[Expr, ...], what: str, tok: Token) -> None:
        if sum(not _literal(v) for v in items) > MAX_COMPUTED_ITEMS:
            raise self.fail(f"a {what} literal holds at most {MAX_COMPUTED_ITEMS} computed items (literals aside)", tok)

    def qualified_call(self) -> bool:
        """`a.b(`: a function with a schema, e.g. pg_catalog.set_config(…)."""
        j = self.i
        while self.tokens[j].kind == "word" and self.punct_at(j + 1, "."):
            j += 2
        return j > self.i and self.tokens[j].kind == "word" and self.punct_at(j + 1, "(")

    def list_items(self) -> tuple[Expr, ...]:
        items = [self.expr()]
        while self.is_p(","):
            self.take()
            items.append(self.expr())
        return tuple(items)

    def call(self) -> Call:
        tok = self.tok
        if self.punct_at(self.i + 1, "."):
            raise self.fail("only the listed functions are accepted (no schema-qualified functions)")
        found = FUNCTIONS.get(tok.text.lower())
        if found is None:
            raise self.fail(f"function {tok.text} is not accepted; see the list in the tool's description")
        spelled, low, high = found
        lower = tok.text.lower()
        self.take()
        self.p("(")
        with self.nested():
            distinct = lower in AGGREGATES and self.is_kw("DISTINCT")
            if distinct:
                self.take()
            if lower == "count" and self.is_p("*"):
                self.take()
                called = Call(spelled, (), distinct, star=True)
            elif lower == "exists":
                called = Call(spelled, (self.property_reference(),))
            else:
                args = () if self.is_p(")") else self.list_items()
                if not low <= len(args) <= high:
                    raise self.fail(f"{spelled} takes {low}{'' if low == high else f' to {high}'} argument(s)", tok)
                called = Call(spelled, args, distinct)
            self.p(")")
        return called

    def property_reference(self) -> Expr:
        """exists()'s one argument: a property of a bound variable (`n.email`). Patterns are not
        accepted there: AGE would match them with no deleted filter and no node bound."""
        if not (self.tok.kind == "word" and self.punct_at(self.i + 1, ".")):
            raise self.fail("exists takes a property, e.g. exists(n.email); for a pattern use OPTIONAL MATCH")
        value: Expr = Name(self.name("a variable"))
        while self.is_p("."):
            self.take()
            value = Prop(value, self.key())
        return value

    def case(self) -> Case:
        self.take()
        with self.nested():
            subject = None if self.is_kw("WHEN") else self.expr()
            if not self.is_kw("WHEN"):
                raise self.fail("expected WHEN")
            whens = []
            while self.is_kw("WHEN"):
                self.take()
                when = self.expr()
                self.kw("THEN")
                whens.append((when, self.expr()))
            default = None
            if self.is_kw("ELSE"):
                self.take()
                default = self.expr()
            self.kw("END")
        return Case(subject, tuple(whens), default)


def parse_tree(query: str) -> Query:
    """The query's tree, or `CypherError` (the reason and where parsing stopped); `CypherLimit` past
    MAX_OPERATIONS."""
    tree = _Parser(query).query_()
    operations = sum(isinstance(node, _OPERATIONS) for node in walk(tree.clauses))
    if operations > MAX_OPERATIONS:
        raise CypherLimit(
            f"the query makes {operations} operations, at most {MAX_OPERATIONS} (operators, function calls,"
            " property and index reads, CASE, list and map literals)",
            1,
            1,
        )
    return tree
