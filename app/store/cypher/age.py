"""The tree (after the rewrites) written out as the text AGE runs: made only of the parser's own
tokens, every string literal a parameter (`$p0`, sent in `cypher()`'s bound third argument), so no
quote or `$$` of the caller reaches the SQL text. Operations that can make a value larger than
their arguments go through the database's bound checks (migration 0028, docs/security.md)."""

from __future__ import annotations

from dataclasses import dataclass

from app.store.cypher import tree as t

BOUNDED = "engram.cypher_bounded"
REPLACE = "engram.cypher_replace"
SPLIT = "engram.cypher_split"
COLLECT_GUARD = "engram.cypher_collect_guard"
SORT_KEY = "engram.cypher_sort_key"
SORT_KEY_SIZE = "engram.cypher_sort_key_size"
# Functions whose result can be larger than their arguments: each result is checked against the
# transaction's value bound where it is built.
_GROWING = {"toupper", "tolower", "reverse", "tostring"}


@dataclass(frozen=True, slots=True)
class ReadQuery:
    """What AGE runs: `text` (the parser's own), its string `parameters`, and the result's `columns`."""

    text: str
    parameters: dict[str, str]
    columns: list[str]


def to_age(query: t.Query) -> ReadQuery:
    writer = _Writer()
    text = " ".join(writer.clause(c) for c in query.clauses)
    parameters = {f"p{slot}": writer.strings[slot] for slot in sorted(writer.strings)}
    return ReadQuery(text, parameters, query.columns)


def _one_call(value: t.Expr) -> bool:
    """Written as one bound-checked call (or a key or index of one): `engram.cypher_bounded(…)`."""
    if isinstance(value, t.ListOf | t.MapOf):
        return True
    if isinstance(value, t.Binary):
        return value.op == "+"
    if isinstance(value, t.Call):
        return value.name.lower() in _GROWING
    if isinstance(value, t.Paren | t.Prop | t.Index | t.Slice):
        return _one_call(value.inner if isinstance(value, t.Paren) else value.subject)
    return False


def _computed_once(value: t.Expr) -> bool:
    """A WITH item the database computes once per row as written: a name (a column of the row), a
    literal, or a value already through a volatile bound check. Any other is written through one
    too (`engram.cypher_bounded`, VOLATILE, migration 0034), so the planner cannot copy its
    expression into every place the name is used after the WITH (it pulls a subquery up only if
    its columns hold no volatile function): `WITH substring(s, 0, size(s)) AS s` ten times, then
    `s` used a hundred times, would otherwise build s 2^10 times per use."""
    if isinstance(value, t.Paren):
        return _computed_once(value.inner)
    return isinstance(value, t.Name | t.Str | t.Int | t.Float | t.Const | t.SortGuard) or _one_call(value)


class _Writer:
    def __init__(self) -> None:
        self.strings: dict[int, str] = {}

    def clause(self, clause: t.Clause) -> str:
        if isinstance(clause, t.Match):
            where = "" if clause.where is None else f" WHERE {self.expr(clause.where)}"
            paths = ", ".join(self.path(p) for p in clause.paths)
            return f"{'OPTIONAL MATCH' if clause.optional else 'MATCH'} {paths}{where}"
        if isinstance(clause, t.Unwind):
            return f"UNWIND {self.expr(clause.value)} AS {clause.name}"
        return self.projection(clause)

    def path(self, path: t.Path) -> str:
        return self.node(path.start) + "".join(self.rel(rel) + self.node(node) for rel, node in path.steps)

    def node(self, node: t.Node) -> str:
        return f"({node.var or ''}{':' + t.NODE_LABEL if node.labelled else ''}{self.properties(node.props)})"

    def rel(self, rel: t.Rel) -> str:
        inner = ""
        if rel.bracketed:
            inner = f"[{rel.var or ''}{':' + t.EDGE_LABEL if rel.labelled else ''}{self.properties(rel.props)}]"
        return f"{'<' if rel.left else ''}-{inner}-{'>' if rel.right else ''}"

    def properties(self, props: t.Properties) -> str:
        return f" {{{self.entries(props)}}}" if props else ""

    def entries(self, props: t.Properties) -> str:
        return ", ".join(f"{key}: {self.expr(value)}" for key, value in props)

    def projection(self, p: t.Projection) -> str:
        items = (self.item(i, fenced=p.head == "WITH") for i in p.items)
        parts = [p.head + (" DISTINCT" if p.distinct else ""), ", ".join(items)]
        if p.order:
            keys = (self.expr(k.value) + (" DESC" if k.descending else "") for k in p.order)
            parts.append("ORDER BY " + ", ".join(keys))
        if p.skip is not None:
            parts.append(f"SKIP {p.skip}")
        if p.limit is not None:
            parts.append(f"LIMIT {p.limit}")
        if p.where is not None:
            parts.append(f"WHERE {self.expr(p.where)}")
        return " ".join(parts)

    def item(self, item: t.Item, fenced: bool = False) -> str:
        value = self.expr(item.value)
        if fenced and not _computed_once(item.value):
            value = f"{BOUNDED}({value})"
        return value if item.alias is None or item.alias == t.name_of(item.value) else f"{value} AS {item.alias}"

    def expr(self, e: t.Expr) -> str:
        if isinstance(e, t.Str):
            self.strings[e.slot] = e.value
            return f"$p{e.slot}"
        if isinstance(e, t.Int | t.Const | t.Name):
            return str(e.value if isinstance(e, t.Int) else e.word if isinstance(e, t.Const) else e.name)
        if isinstance(e, t.Float):
            return repr(e.value)
        if isinstance(e, t.Prop | t.Index | t.Slice):
            return self.postfix(e)
        if isinstance(e, t.Paren | t.Group):
            inner = self.expr(e.inner)
            # A name or a bound-checked call stays bare: `(a)` or `({k: v})` next to dashes and
            # brackets would read to AGE as a pattern (with no deleted filter and no node bound).
            bare = isinstance(e, t.Paren) and (t.name_of(e.inner) is not None or _one_call(e.inner))
            return inner if bare else f"({inner})"
        if isinstance(e, t.Unary):
            # Parenthesized, so that no two dashes ever meet in the text AGE reads (`--` is a pattern).
            return f"({e.op}{self.expr(e.operand)})"
        if isinstance(e, t.Not):
            return f"NOT {self.expr(e.operand)}"
        if isinstance(e, t.Binary):
            left, right = self.expr(e.left), self.expr(e.right)
            # `+` joins strings and lists: its result is checked against the value bound.
            return f"{BOUNDED}({left} + {right})" if e.op == "+" else f"{left} {e.op} {right}"
        if isinstance(e, t.IsNull):
            return f"{self.expr(e.subject)} IS {'NOT ' if e.negated else ''}NULL"
        if isinstance(e, t.ListOf):
            return f"{BOUNDED}([{', '.join(self.expr(v) for v in e.items)}])"
        if isinstance(e, t.MapOf):
            return f"{BOUNDED}({{{self.entries(e.entries)}}})"
        if isinstance(e, t.SortGuard):
            return f"{SORT_KEY if e.counts_row else SORT_KEY_SIZE}({self.expr(e.value)})"
        if isinstance(e, t.Call):
            return self.call(e)
        return self.case(e)

    def postfix(self, e: t.Prop | t.Index | t.Slice) -> str:
        subject = self.expr(e.subject)
        if isinstance(e, t.Prop):
            return f"{subject}.{e.key}"
        if isinstance(e, t.Index):
            return f"{subject}[{self.expr(e.index)}]"
        low = "" if e.low is None else self.expr(e.low)
        return f"{subject}[{low}..{'' if e.high is None else self.expr(e.high)}]"

    def call(self, call: t.Call) -> str:
        lower = call.name.lower()
        args = ["*"] if call.star else [self.expr(a) for a in call.args]
        distinct = "DISTINCT " if call.distinct else ""
        if (call.distinct or lower in ("min", "max")) and not call.star:
            # A DISTINCT aggregate sorts its input, and min and max compare every row: what AGE's
            # agtype comparison leaves allocated is bounded as for ORDER BY.
            called = f"{call.name}({distinct}{SORT_KEY}({args[0]}))"
        else:
            called = f"{call.name}({distinct}{', '.join(args)})"
        if lower == "collect":  # beside a guard that refuses a collected list past the value bound
            guarded = f"{SORT_KEY_SIZE}({args[0]})" if call.distinct else args[0]
            return f"coalesce({COLLECT_GUARD}({distinct}{guarded}), {called})"
        if lower == "replace":  # its result's size is checked before it is built
            return f"{REPLACE}({', '.join(args)})"
        if lower == "split":  # and so is its number of pieces
            return f"{SPLIT}({', '.join(args)})"
        return f"{BOUNDED}({called})" if lower in _GROWING else called

    def case(self, case: t.Case) -> str:
        parts = ["CASE"]
        if case.subject is not None:
            parts.append(self.expr(case.subject))
        for when, then in case.whens:
            parts += [f"WHEN {self.expr(when)}", f"THEN {self.expr(then)}"]
        if case.default is not None:
            parts.append(f"ELSE {self.expr(case.default)}")
        parts.append("END")
        return " ".join(parts)
