"""The read-only Cypher that `query_graph` accepts, parsed and written out again for AGE.

A recursive-descent parser of a small read subset (MATCH, OPTIONAL MATCH, WHERE, WITH, UNWIND,
RETURN, ORDER BY, SKIP, LIMIT; a stated list of functions). It does not pass the caller's text on:
it writes the query out anew from what it parsed, so AGE only ever sees text made of the
parser's own tokens. Every string literal becomes a parameter (`$p0`, sent in `cypher()`'s bound
third argument), so no quote or `$$` of the caller reaches the SQL text; comments are dropped;
identifiers are plain words; labels are the graph's own two. Each node of a MATCH gets a condition
that hides soft-deleted entities (their vertex carries `deleted`, migration 0018). Anything else is
`CypherError` with the position (1-based line and column) where parsing stopped. docs/tools.md.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

MAX_TOKENS = 2000
MAX_DEPTH = 32
MAX_CLAUSES = 16
MAX_NODES = 16
MAX_COLUMNS = 64  # items of one WITH or RETURN: each is a value held in the row at once
MAX_INT = 2**63 - 1
# What AGE builds in one function call (PostgreSQL passes at most 100 arguments: a map's key and
# value are two).
MAX_MAP_ENTRIES = 50
# Items of one list or map literal that are computed (not a literal): the literal's size is at most
# this many times the value bound (docs/security.md, "query_graph").
MAX_COMPUTED_ITEMS = 16
_LITERAL = re.compile(r"^(\$p\d+|\(?-?\d+(\.\d+)?(e[+-]?\d+)?\)?|true|false|null)$")

_KEYWORDS = {
    "MATCH", "OPTIONAL", "WHERE", "WITH", "UNWIND", "RETURN", "ORDER", "BY", "SKIP", "LIMIT", "AS",
    "DISTINCT", "AND", "OR", "XOR", "NOT", "IN", "IS", "NULL", "TRUE", "FALSE", "STARTS", "ENDS",
    "CONTAINS", "ASC", "ASCENDING", "DESC", "DESCENDING", "CASE", "WHEN", "THEN", "ELSE", "END",
}  # fmt: skip
# Clauses that write or run procedures: named in the refusal, never accepted.
_WRITES = {"CREATE", "MERGE", "SET", "DELETE", "DETACH", "REMOVE", "CALL", "LOAD", "FOREACH", "UNION", "YIELD", "DROP"}
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
_AGGREGATES = {"count", "sum", "avg", "min", "max", "collect"}
# Functions whose result can be larger than their arguments: each result is checked against the
# transaction's value bound where it is built (migration 0028, docs/security.md "query_graph").
_GROWING = {"toupper", "tolower", "reverse", "tostring"}
BOUNDED = "engram.cypher_bounded"
REPLACE = "engram.cypher_replace"
SPLIT = "engram.cypher_split"
COLLECT_GUARD = "engram.cypher_collect_guard"
SORT_KEY = "engram.cypher_sort_key"
SORT_KEY_SIZE = "engram.cypher_sort_key_size"
NODE_LABEL = "Entity"
EDGE_LABEL = "REL"
_PUNCT2 = ("<=", ">=", "<>", "!=", "=~", "..")
_PUNCT1 = "()[]{},.:;-<>=+*/%|"
_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}


class CypherError(ValueError):
    """A query refused: `message` says why, `line`/`column` where (1-based)."""

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(f"{message} (line {line}, column {column})")
        self.reason = message
        self.line = line
        self.column = column


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # word, string, int, float, punct, end
    text: str  # the token as written (strings: their value)
    at: int  # offset in the query text
    end: int


@dataclass(frozen=True, slots=True)
class ReadQuery:
    """What AGE runs: `text` (the parser's own), its string `parameters`, and the result's `columns`."""

    text: str
    parameters: dict[str, str]
    columns: list[str]


def _position(query: str, at: int) -> tuple[int, int]:
    line = query.count("\n", 0, at) + 1
    return line, at - (query.rfind("\n", 0, at) + 1) + 1


def tokenize(query: str) -> list[Token]:
    tokens: list[Token] = []
    i, n = 0, len(query)

    def fail(message: str, at: int) -> CypherError:
        return CypherError(message, *_position(query, at))

    while i < n:
        c = query[i]
        if c in " \t\r\n":
            i += 1
        elif query.startswith("//", i):
            j = query.find("\n", i)
            i = n if j < 0 else j + 1
        elif query.startswith("/*", i):
            j = query.find("*/", i + 2)
            if j < 0:
                raise fail("unterminated comment", i)
            i = j + 2
        elif c in "'\"":
            j, value = i + 1, []
            while True:
                if j >= n:
                    raise fail("unterminated string", i)
                ch = query[j]
                if ch == c:
                    break
                if ch == "\\":
                    esc = query[j + 1 : j + 2]
                    if esc in _ESCAPES:
                        value.append(_ESCAPES[esc])
                        j += 2
                    elif esc == "u" and all(h in "0123456789abcdefABCDEF" for h in query[j + 2 : j + 6]) and j + 6 <= n:
                        value.append(chr(int(query[j + 2 : j + 6], 16)))
                        j += 6
                    else:
                        raise fail("unknown escape in string", j)
                else:
                    value.append(ch)
                    j += 1
            text = "".join(value)
            if "\x00" in text or any(0xD800 <= ord(ch) <= 0xDFFF for ch in text):
                raise fail("a string may not contain NUL or a lone surrogate", i)
            tokens.append(Token("string", text, i, j + 1))
            i = j + 1
        elif c.isascii() and c.isdigit():
            j = i
            while j < n and query[j].isascii() and query[j].isdigit():
                j += 1
            kind = "int"
            if j + 1 < n and query[j] == "." and query[j + 1].isascii() and query[j + 1].isdigit():
                j += 1
                while j < n and query[j].isascii() and query[j].isdigit():
                    j += 1
                kind = "float"
            if j < n and query[j] in "eE":
                k = j + 1 + (j + 1 < n and query[j + 1] in "+-")
                if k < n and query[k].isascii() and query[k].isdigit():
                    j = k
                    while j < n and query[j].isascii() and query[j].isdigit():
                        j += 1
                    kind = "float"
            if j < n and (query[j].isalnum() or query[j] == "_"):
                raise fail("malformed number", i)
            tokens.append(Token(kind, query[i:j], i, j))
            i = j
        elif c.isascii() and (c.isalpha() or c == "_"):
            j = i
            while j < n and query[j].isascii() and (query[j].isalnum() or query[j] == "_"):
                j += 1
            tokens.append(Token("word", query[i:j], i, j))
            i = j
        elif query[i : i + 2] in _PUNCT2:
            tokens.append(Token("punct", query[i : i + 2], i, i + 2))
            i += 2
        elif c in _PUNCT1:
            tokens.append(Token("punct", c, i, i + 1))
            i += 1
        elif c == "`":
            raise fail("quoted identifiers are not accepted; use plain names", i)
        elif c == "$":
            raise fail("parameters are not accepted; write values in the query", i)
        else:
            raise fail(f"unexpected character {c!r}", i)
        if len(tokens) > MAX_TOKENS:
            raise fail(f"the query is longer than {MAX_TOKENS} tokens", i)
    tokens.append(Token("end", "", n, n))
    return tokens


@dataclass
class _Scope:
    """Variables bound so far, and the nodes a MATCH must keep live."""

    names: set[str] = field(default_factory=set)


class _Parser:
    def __init__(self, query: str, rows_read: int | None = None) -> None:
        self.query = query
        self.rows_read = rows_read
        self.tokens = tokenize(query)
        self.i = 0
        self.depth = 0
        self.params: dict[str, str] = {}
        self.nodes = 0
        self.hidden = 0
        self.aggregates = 0  # aggregate calls parsed so far

    # --- tokens --------------------------------------------------------------------------------

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def fail(self, message: str, tok: Token | None = None) -> CypherError:
        return CypherError(message, *_position(self.query, (tok or self.tok).at))

    def is_kw(self, *words: str) -> bool:
        return self.tok.kind == "word" and self.tok.text.upper() in words

    def is_p(self, *puncts: str) -> bool:
        return self.tok.kind == "punct" and self.tok.text in puncts

    def take(self) -> Token:
        tok = self.tok
        self.i += 1
        return tok

    def kw(self, word: str) -> None:
        if not self.is_kw(word):
            raise self.fail(f"expected {word}")
        self.i += 1

    def p(self, punct: str) -> None:
        if not self.is_p(punct):
            raise self.fail(f"expected '{punct}'")
        self.i += 1

    def name(self, what: str = "a name") -> str:
        tok = self.tok
        if tok.kind != "word" or tok.text.upper() in _KEYWORDS or tok.text.upper() in _WRITES:
            raise self.fail(f"expected {what}")
        if tok.text.startswith("_"):
            raise self.fail("names may not start with '_'")
        if len(tok.text) > 64:
            raise self.fail("names are at most 64 characters")
        self.i += 1
        return tok.text

    def deeper(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"the query nests deeper than {MAX_DEPTH}")

    # --- clauses -------------------------------------------------------------------------------

    def parse(self) -> ReadQuery:
        clauses: list[str] = []
        columns: list[str] = []
        while True:
            if len(clauses) >= MAX_CLAUSES:
                raise self.fail(f"at most {MAX_CLAUSES} clauses")
            tok = self.tok
            if self.is_kw("MATCH"):
                self.take()
                clauses.append(self.match("MATCH"))
            elif self.is_kw("OPTIONAL"):
                self.take()
                self.kw("MATCH")
                clauses.append(self.match("OPTIONAL MATCH"))
            elif self.is_kw("WITH"):
                self.take()
                text, _ = self.projection("WITH")
                if self.is_kw("WHERE"):
                    self.take()
                    text += f" WHERE {self.expr()}"
                clauses.append(text)
            elif self.is_kw("UNWIND"):
                self.take()
                value = self.expr()
                self.kw("AS")
                clauses.append(f"UNWIND {value} AS {self.name('a name after AS')}")
            elif self.is_kw("RETURN"):
                self.take()
                text, columns = self.projection("RETURN")
                clauses.append(text)
                if self.is_p(";"):
                    self.take()
                if self.tok.kind != "end":
                    raise self.fail("RETURN must be the last clause")
                break
            elif tok.kind == "word" and tok.text.upper() in _WRITES:
                raise self.fail(f"{tok.text.upper()} is not accepted: query_graph only reads")
            elif tok.kind == "end":
                raise self.fail("a query ends with RETURN")
            else:
                raise self.fail("expected MATCH, OPTIONAL MATCH, WITH, UNWIND or RETURN")
        return ReadQuery(" ".join(clauses), self.params, columns)

    def match(self, head: str) -> str:
        live: list[str] = []
        paths = [self.path(live)]
        while self.is_p(","):
            self.take()
            paths.append(self.path(live))
        conditions = [f"{v}.deleted IS NULL" for v in live]
        if self.is_kw("WHERE"):
            self.take()
            conditions.insert(0, f"({self.expr()})")
        return f"{head} {', '.join(paths)} WHERE {' AND '.join(conditions)}"

    def path(self, live: list[str]) -> str:
        parts = [self.node(live)]
        while self.is_p("-", "<"):
            parts.append(self.relationship())
            parts.append(self.node(live))
        return "".join(parts)

    def node(self, live: list[str]) -> str:
        start = self.tok
        self.p("(")
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise self.fail(f"at most {MAX_NODES} node patterns in a query", start)
        var = self.name("a variable") if self.tok.kind == "word" else None
        if var is None:
            var = f"_h{self.hidden}"  # a name the caller cannot write (names may not start with '_')
            self.hidden += 1
        label = self.label(NODE_LABEL, "entities")
        props = self.properties() if self.is_p("{") else ""
        self.p(")")
        live.append(var)
        return f"({var}{label}{props})"

    def relationship(self) -> str:
        left = self.is_p("<")
        if left:
            self.take()
        self.p("-")
        inner = ""
        if self.is_p("["):
            self.take()
            var = self.name("a variable") if self.tok.kind == "word" else ""
            label = self.label(EDGE_LABEL, "relations")
            if self.is_p("*", ".."):
                raise self.fail(
                    "variable-length patterns are not accepted (on this database they load the whole graph"
                    " into memory): write each hop, e.g. (a)-->()-->(b), or use neighbors / shortest_path"
                )
            props = self.properties() if self.is_p("{") else ""
            self.p("]")
            inner = f"[{var}{label}{props}]"
        self.p("-")
        right = self.is_p(">")
        if right:
            self.take()
        if left and right:
            raise self.fail("a relation points one way, or none")
        return f"{'<' if left else ''}-{inner}-{'>' if right else ''}"

    def label(self, only: str, what: str) -> str:
        if not self.is_p(":"):
            return ""
        self.take()
        tok = self.tok
        if tok.kind != "word" or tok.text != only:
            raise self.fail(f"the only label of {what} is {only} (a relation's own type is the property r.type)")
        self.take()
        return f":{only}"

    def properties(self, values: list[str] | None = None) -> str:
        self.p("{")
        items = []
        while True:
            key = self.key()
            self.p(":")
            value = self.expr()
            if values is not None:
                values.append(value)
            items.append(f"{key}: {value}")
            if len(items) > MAX_MAP_ENTRIES:
                raise self.fail(f"a map holds at most {MAX_MAP_ENTRIES} entries")
            if not self.is_p(","):
                break
            self.take()
        self.p("}")
        return " {" + ", ".join(items) + "}"

    def key(self) -> str:
        tok = self.tok
        if tok.kind != "word" or len(tok.text) > 64:
            raise self.fail("expected a property name")
        self.take()
        return tok.text

    def projection(self, head: str) -> tuple[str, list[str]]:
        """WITH or RETURN with its ORDER BY, SKIP and LIMIT. AGE 1.5 cannot sort by a name the same
        projection gives ("could not find rte"), so a sorted projection is written as two: the items
        under their names (and, without DISTINCT or aggregates, sort keys under hidden names), then
        the names again, sorted by them."""
        distinct = self.is_kw("DISTINCT")
        if distinct:
            self.take()
        if self.is_p("*"):
            raise self.fail("name the columns (no *)")
        aggregates = self.aggregates
        items: list[tuple[str, str | None]] = []  # (expression, name given)
        columns: list[str] = []
        while True:
            start = self.tok
            value = self.expr()
            written = self.query[start.at : self.tokens[self.i - 1].end]
            alias = None
            if self.is_kw("AS"):
                self.take()
                alias = self.name("a name after AS")
            elif head == "WITH" and not _is_name(value):
                raise self.fail("WITH needs AS for an expression", start)
            items.append((value, alias))
            if len(items) > MAX_COLUMNS:
                raise self.fail(f"a {head} has at most {MAX_COLUMNS} items", start)
            columns.append(alias or " ".join(written.split())[:200])
            if not self.is_p(","):
                break
            self.take()
        if len(set(columns)) != len(columns):
            raise self.fail("two columns have the same name")
        grouped = distinct or self.aggregates > aggregates
        keys: list[tuple[str, str, Token]] = []  # (expression, direction, where)
        if self.is_kw("ORDER"):
            self.take()
            self.kw("BY")
            while True:
                at = self.tok
                key = self.expr()
                direction = ""
                if self.is_kw("ASC", "ASCENDING"):
                    self.take()
                elif self.is_kw("DESC", "DESCENDING"):
                    self.take()
                    direction = " DESC"
                keys.append((key, direction, at))
                if not self.is_p(","):
                    break
                self.take()
        tail = ""
        bounds: dict[str, int] = {}
        for word in ("SKIP", "LIMIT"):
            if self.is_kw(word):
                self.take()
                tok = self.tok
                if tok.kind != "int" or int(tok.text) > 10**9:
                    raise self.fail(f"{word} takes a whole number up to 1000000000")
                self.take()
                bounds[word] = int(tok.text)
        if keys and head == "RETURN" and self.rows_read is not None:
            # Only the first rows are read: a sort that keeps that many (a top-N heap) is enough.
            bounds["LIMIT"] = min(bounds.get("LIMIT", self.rows_read), self.rows_read)
        tail = "".join(f" {word} {n}" for word, n in bounds.items())
        opening = f"{head}{' DISTINCT' if distinct else ''}"
        if not keys:
            listed = ", ".join(v if a is None or a == v else f"{v} AS {a}" for v, a in items)
            return f"{opening} {listed}{tail}", columns
        names = [a or (v if _is_name(v) else f"_c{i}") for i, (v, a) in enumerate(items)]
        by_value = {v: n for (v, _), n in zip(items, names, strict=True)}
        first = [v if n == v else f"{v} AS {n}" for (v, _), n in zip(items, names, strict=True)]
        order = []
        sorted_by: list[str] = []  # the names the rows are sorted by, each counted and checked below
        for k, (key, direction, at) in enumerate(keys):
            if key in names:
                name = key
            elif key in by_value:
                name = by_value[key]
            elif grouped:
                raise self.fail("after DISTINCT or an aggregate, ORDER BY names a column", at)
            else:
                name = f"_o{k}"
                first.append(f"{key} AS {name}")
            order.append(name + direction)
            if name not in sorted_by:
                sorted_by.append(name)
        first_part = f"WITH{' DISTINCT' if distinct else ''} {', '.join(first)}"
        # Every row that enters the sort passes SORT_KEY once (after any grouping): AGE's agtype
        # comparison does not free what it allocates, so the rows sorted and their keys' sizes are
        # bounded (docs/security.md, "query_graph").
        checks = {n: f"{SORT_KEY if i == 0 else SORT_KEY_SIZE}({n}) AS {n}" for i, n in enumerate(sorted_by)}
        carried = [checks.get(n, n) for n in names] + [checks[n] for n in sorted_by if n not in names]
        first_part += f" WITH {', '.join(carried)}"
        return f"{first_part} {head} {', '.join(names)} ORDER BY {', '.join(order)}{tail}", columns

    # --- expressions ---------------------------------------------------------------------------

    def expr(self) -> str:
        self.deeper()
        try:
            return self.binary(0)
        finally:
            self.depth -= 1

    _LEVELS: tuple[tuple[str, ...], ...] = (("OR",), ("XOR",), ("AND",))

    def binary(self, level: int) -> str:
        if level == len(self._LEVELS):
            return self.negation()
        left = self.binary(level + 1)
        while self.is_kw(*self._LEVELS[level]):
            op = self.take().text.upper()
            left = f"{left} {op} {self.binary(level + 1)}"
        return left

    def negation(self) -> str:
        if self.is_kw("NOT"):
            self.take()
            self.deeper()
            try:
                return f"NOT {self.negation()}"
            finally:
                self.depth -= 1
        return self.comparison()

    def comparison(self) -> str:
        left = self.additive()
        while True:
            if self.is_p("=", "<>", "!=", "<", ">", "<=", ">=", "=~"):
                op = self.take().text
                left = f"{left} {'<>' if op == '!=' else op} {self.additive()}"
            elif self.is_kw("IS"):
                self.take()
                negated = self.is_kw("NOT")
                if negated:
                    self.take()
                self.kw("NULL")
                left = f"{left} IS {'NOT ' if negated else ''}NULL"
            elif self.is_kw("IN"):
                self.take()
                left = f"{left} IN {self.additive()}"
            elif self.is_kw("STARTS", "ENDS"):
                op = self.take().text.upper()
                self.kw("WITH")
                left = f"{left} {op} WITH {self.additive()}"
            elif self.is_kw("CONTAINS"):
                self.take()
                left = f"{left} CONTAINS {self.additive()}"
            else:
                return left

    def additive(self) -> str:
        left = self.multiplicative()
        while self.is_p("+", "-"):
            op = self.take().text
            right = self.multiplicative()
            # `+` joins strings and lists: its result is checked against the value bound.
            left = f"{BOUNDED}({left} + {right})" if op == "+" else f"{left} - {right}"
        return left

    def multiplicative(self) -> str:
        left = self.unary()
        while self.is_p("*", "/", "%"):
            op = self.take().text
            left = f"{left} {op} {self.unary()}"
        return left

    def unary(self) -> str:
        if self.is_p("-", "+"):
            op = self.take().text
            self.deeper()
            try:
                # Parenthesized, so that no two dashes ever meet in the text AGE reads (`--` is a pattern).
                return f"({op}{self.unary()})"
            finally:
                self.depth -= 1
        return self.postfix()

    def postfix(self) -> str:
        value = self.atom()
        while True:
            if self.is_p("."):
                self.take()
                value = f"{value}.{self.key()}"
            elif self.is_p("["):
                self.take()
                low = "" if self.is_p("..") else self.expr()
                if self.is_p(".."):
                    self.take()
                    high = "" if self.is_p("]") else self.expr()
                    value = f"{value}[{low}..{high}]"
                else:
                    value = f"{value}[{low}]"
                self.p("]")
            else:
                return value

    def atom(self) -> str:
        tok = self.tok
        if tok.kind == "string":
            self.take()
            name = f"p{len(self.params)}"
            self.params[name] = tok.text
            return f"${name}"
        if tok.kind == "int":
            if int(tok.text) > MAX_INT:
                raise self.fail("integer out of range")
            self.take()
            return str(int(tok.text))
        if tok.kind == "float":
            value = float(tok.text)
            if not math.isfinite(value):
                raise self.fail("number out of range")
            self.take()
            return repr(value)
        if self.is_p("("):
            self.take()
            inner = self.expr()
            self.p(")")
            # A name or a map in parentheses is written bare: `(a)` or `({k: v})` next to dashes and
            # brackets would read to AGE as a pattern (with no deleted filter and no node bound).
            return inner if _is_name(inner) or inner.startswith(f"{BOUNDED}(") else f"({inner})"
        if self.is_p("["):
            self.take()
            self.deeper()
            try:
                items = [] if self.is_p("]") else self.list_items()
            finally:
                self.depth -= 1
            self.p("]")
            self._few_computed(items, "list", tok)
            return f"{BOUNDED}([{', '.join(items)}])"
        if self.is_p("{"):
            values: list[str] = []
            self.deeper()
            try:
                entries = self.properties(values)
            finally:
                self.depth -= 1
            self._few_computed(values, "map", tok)
            return f"{BOUNDED}({entries.strip()})"
        if tok.kind != "word":
            raise self.fail("expected a value")
        word = tok.text.upper()
        if word in ("TRUE", "FALSE", "NULL"):
            self.take()
            return word.lower()
        if word == "CASE":
            return self.case()
        if self._punct_at(self.i + 1, "(") or self._qualified_call():
            return self.call()
        return self.name("a value")

    def _few_computed(self, items: list[str], what: str, tok: Token) -> None:
        if sum(not _LITERAL.match(v) for v in items) > MAX_COMPUTED_ITEMS:
            raise self.fail(f"a {what} literal holds at most {MAX_COMPUTED_ITEMS} computed items (literals aside)", tok)

    def _punct_at(self, j: int, punct: str) -> bool:
        return j < len(self.tokens) and self.tokens[j].kind == "punct" and self.tokens[j].text == punct

    def _qualified_call(self) -> bool:
        """`a.b(`: a function with a schema, e.g. pg_catalog.set_config(…)."""
        j = self.i
        while self.tokens[j].kind == "word" and self._punct_at(j + 1, "."):
            j += 2
        return j > self.i and self.tokens[j].kind == "word" and self._punct_at(j + 1, "(")

    def list_items(self) -> list[str]:
        items = [self.expr()]
        while self.is_p(","):
            self.take()
            items.append(self.expr())
        return items

    def call(self) -> str:
        tok = self.tok
        if self._punct_at(self.i + 1, "."):
            raise self.fail("only the listed functions are accepted (no schema-qualified functions)")
        found = FUNCTIONS.get(tok.text.lower())
        if found is None:
            raise self.fail(f"function {tok.text} is not accepted; see the list in the tool's description")
        spelled, low, high = found
        if tok.text.lower() in _AGGREGATES:
            self.aggregates += 1
        self.take()
        self.p("(")
        self.deeper()
        try:
            distinct = ""
            if tok.text.lower() in _AGGREGATES and self.is_kw("DISTINCT"):
                self.take()
                distinct = "DISTINCT "
            if tok.text.lower() == "count" and self.is_p("*"):
                self.take()
                args = ["*"]
            elif tok.text.lower() == "exists":
                args = [self.property_reference()]
            else:
                args = [] if self.is_p(")") else self.list_items()
                if not low <= len(args) <= high:
                    raise self.fail(f"{spelled} takes {low}{'' if low == high else f' to {high}'} argument(s)", tok)
            self.p(")")
        finally:
            self.depth -= 1
        lower = tok.text.lower()
        if (distinct or lower in ("min", "max")) and args != ["*"]:
            # A DISTINCT aggregate sorts its input, and min and max compare every row: what AGE's
            # agtype comparison leaves allocated is bounded as for ORDER BY.
            called = f"{spelled}({distinct}{SORT_KEY}({args[0]}))"
        else:
            called = f"{spelled}({distinct}{', '.join(args)})"
        if lower == "collect":  # beside a guard that refuses a collected list past the value bound
            guarded = f"{SORT_KEY_SIZE}({args[0]})" if distinct else args[0]
            return f"coalesce({COLLECT_GUARD}({distinct}{guarded}), {called})"
        if lower == "replace":  # its result's size is checked before it is built
            return f"{REPLACE}({', '.join(args)})"
        if lower == "split":  # and so is its number of pieces
            return f"{SPLIT}({', '.join(args)})"
        return f"{BOUNDED}({called})" if lower in _GROWING else called

    def property_reference(self) -> str:
        """exists()'s one argument: a property of a bound variable (`n.email`). Patterns are not
        accepted there: AGE would match them with no deleted filter and no node bound."""
        if not (self.tok.kind == "word" and self._punct_at(self.i + 1, ".")):
            raise self.fail("exists takes a property, e.g. exists(n.email); for a pattern use OPTIONAL MATCH")
        value = self.name("a variable")
        while self.is_p("."):
            self.take()
            value = f"{value}.{self.key()}"
        return value

    def case(self) -> str:
        self.take()
        self.deeper()
        try:
            parts = ["CASE"]
            if not self.is_kw("WHEN"):
                parts.append(self.expr())
            if not self.is_kw("WHEN"):
                raise self.fail("expected WHEN")
            while self.is_kw("WHEN"):
                self.take()
                parts.append(f"WHEN {self.expr()}")
                self.kw("THEN")
                parts.append(f"THEN {self.expr()}")
            if self.is_kw("ELSE"):
                self.take()
                parts.append(f"ELSE {self.expr()}")
            self.kw("END")
        finally:
            self.depth -= 1
        parts.append("END")
        return " ".join(parts)


def _is_name(text: str) -> bool:
    return text.isidentifier() and not text.startswith("_")


def parse(query: str, rows_read: int | None = None) -> ReadQuery:
    """The query written out anew for AGE, or `CypherError` (the reason and where)."""
    return _Parser(query, rows_read).parse()
