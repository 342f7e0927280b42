"""The parsed query as a tree of frozen dataclasses: clauses, patterns, projections and
expressions. Parsing builds it, the rewrites (rewrite.py) return new trees, and only age.py
writes it out as text; equal trees are the same query (string literals keep their slot)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Literal, cast

# The graph's two labels: entities are vertices of NODE_LABEL, relations edges of EDGE_LABEL.
NODE_LABEL = "Entity"
EDGE_LABEL = "REL"
AGGREGATES = frozenset({"count", "sum", "avg", "min", "max", "collect"})

# --- expressions --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Str:
    """A string literal: the `slot`-th of the query, sent as a parameter, never as text."""

    value: str
    slot: int


@dataclass(frozen=True, slots=True)
class Int:
    value: int


@dataclass(frozen=True, slots=True)
class Float:
    value: float


@dataclass(frozen=True, slots=True)
class Const:
    word: Literal["true", "false", "null"]


@dataclass(frozen=True, slots=True)
class Name:
    name: str


@dataclass(frozen=True, slots=True)
class Prop:
    subject: Expr
    key: str


@dataclass(frozen=True, slots=True)
class Index:
    subject: Expr
    index: Expr


@dataclass(frozen=True, slots=True)
class Slice:
    subject: Expr
    low: Expr | None
    high: Expr | None


@dataclass(frozen=True, slots=True)
class Paren:
    """Parentheses as the caller wrote them."""

    inner: Expr


@dataclass(frozen=True, slots=True)
class Group:
    """Parentheses a rewrite needs, always written."""

    inner: Expr


@dataclass(frozen=True, slots=True)
class Unary:
    op: Literal["-", "+"]
    operand: Expr


@dataclass(frozen=True, slots=True)
class Not:
    operand: Expr


@dataclass(frozen=True, slots=True)
class Binary:
    """`op` as AGE spells it: OR XOR AND = <> < > <= >= =~ IN, STARTS WITH, ENDS WITH, CONTAINS, + - * / %."""

    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class IsNull:
    subject: Expr
    negated: bool


@dataclass(frozen=True, slots=True)
class ListOf:
    items: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class MapOf:
    entries: tuple[tuple[str, Expr], ...]


@dataclass(frozen=True, slots=True)
class Call:
    """A listed function, `name` as AGE spells it; `star` for count(*)."""

    name: str
    args: tuple[Expr, ...]
    distinct: bool = False
    star: bool = False


@dataclass(frozen=True, slots=True)
class Case:
    subject: Expr | None
    whens: tuple[tuple[Expr, Expr], ...]
    default: Expr | None


@dataclass(frozen=True, slots=True)
class SortGuard:
    """A value entering a sort, checked on its way: its size, and (`counts_row`) the rows sorted."""

    value: Expr
    counts_row: bool


Expr = (
    Str | Int | Float | Const | Name | Prop | Index | Slice | Paren | Group | Unary | Not | Binary | IsNull
    | ListOf | MapOf | Call | Case | SortGuard
)  # fmt: skip

# --- patterns and clauses -----------------------------------------------------------------------

Properties = tuple[tuple[str, Expr], ...]


@dataclass(frozen=True, slots=True)
class Node:
    var: str | None
    labelled: bool  # written with :Entity
    props: Properties = ()


@dataclass(frozen=True, slots=True)
class Rel:
    var: str | None
    labelled: bool  # written with :REL
    props: Properties = ()
    bracketed: bool = False  # -[...]- rather than --
    left: bool = False  # <-
    right: bool = False  # ->


@dataclass(frozen=True, slots=True)
class Path:
    start: Node
    steps: tuple[tuple[Rel, Node], ...] = ()

    @property
    def nodes(self) -> tuple[Node, ...]:
        return (self.start, *(node for _, node in self.steps))


@dataclass(frozen=True, slots=True)
class Match:
    optional: bool
    paths: tuple[Path, ...]
    where: Expr | None = None


@dataclass(frozen=True, slots=True)
class Unwind:
    value: Expr
    name: str


@dataclass(frozen=True, slots=True)
class Item:
    """One value of a WITH or RETURN: `alias` if given; `column` names it in the answer."""

    value: Expr
    alias: str | None
    column: str


@dataclass(frozen=True, slots=True)
class SortKey:
    value: Expr
    descending: bool
    at: tuple[int, int]  # line and column, for a refusal


@dataclass(frozen=True, slots=True)
class Projection:
    head: Literal["WITH", "RETURN"]
    distinct: bool
    items: tuple[Item, ...]
    order: tuple[SortKey, ...] = ()
    skip: int | None = None
    limit: int | None = None
    where: Expr | None = None  # WITH ... WHERE


Clause = Match | Unwind | Projection


@dataclass(frozen=True, slots=True)
class Query:
    clauses: tuple[Clause, ...]

    @property
    def columns(self) -> list[str]:
        last = self.clauses[-1]
        return [item.column for item in last.items] if isinstance(last, Projection) else []


# --- reading trees ------------------------------------------------------------------------------


def walk(node: object) -> Iterator[object]:
    """`node` and every node under it, depth first, in field order."""
    if isinstance(node, tuple):
        for part in node:
            yield from walk(part)
    elif is_dataclass(node):
        yield node
        for f in fields(node):
            yield from walk(getattr(node, f.name))


def _unwrapped(node: object) -> object:
    if isinstance(node, Paren):
        return _unwrapped(node.inner)
    if isinstance(node, tuple):
        return tuple(_unwrapped(part) for part in node)
    if is_dataclass(node) and not isinstance(node, type):
        return replace(node, **{f.name: _unwrapped(getattr(node, f.name)) for f in fields(node)})
    return node


def without_parens(value: Expr) -> Expr:
    """`value` with the caller's parentheses taken out (the tree holds the grouping already)."""
    return cast(Expr, _unwrapped(value))


def same(a: Expr, b: Expr) -> bool:
    """The same expression, parentheses aside."""
    return without_parens(a) == without_parens(b)


def name_of(value: Expr) -> str | None:
    """The name a bare word gives itself as a column (`n`, `true`), or None."""
    if isinstance(value, Paren):
        return name_of(value.inner)
    if isinstance(value, Name):
        return value.name
    if isinstance(value, Const):
        return value.word
    return None


def aggregates(value: Expr) -> bool:
    return any(isinstance(n, Call) and n.name.lower() in AGGREGATES for n in walk(value))


def column_sorted(key: Expr, items: tuple[Item, ...]) -> int | None:
    """Which item a sort key names: by its name (alias or bare word), else the last item that is
    the same expression; None for a key that is none of them."""
    name = name_of(key)
    if name is not None:
        for i, item in enumerate(items):
            if (item.alias or name_of(item.value)) == name:
                return i
    for i in reversed(range(len(items))):
        if same(items[i].value, key):
            return i
    return None
