"""The query's text as tokens: words, strings (their value), numbers and punctuation, comments
dropped. Quoted identifiers and `$` parameters are refused here, so no caller quote survives."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

MAX_TOKENS = 2000

Kind = Literal["word", "string", "int", "float", "punct", "end"]

# Blanks, comments, words, numbers and punctuation, each its longest; strings and refusals aside.
_PLAIN = re.compile(
    r"(?P<blank>[ \t\r\n]+|//[^\n]*\n?|/\*.*?\*/)"
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<number>[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)"
    r"|(?P<punct><=|>=|<>|!=|=~|\.\.|[()\[\]{},.:;\-<>=+*%|]|/(?!\*))",
    re.DOTALL,
)
_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}
_HEX = frozenset("0123456789abcdefABCDEF")
KEYWORDS = {
    "MATCH", "OPTIONAL", "WHERE", "WITH", "UNWIND", "RETURN", "ORDER", "BY", "SKIP", "LIMIT", "AS",
    "DISTINCT", "AND", "OR", "XOR", "NOT", "IN", "IS", "NULL", "TRUE", "FALSE", "STARTS", "ENDS",
    "CONTAINS", "ASC", "ASCENDING", "DESC", "DESCENDING", "CASE", "WHEN", "THEN", "ELSE", "END",
}  # fmt: skip
# Clauses that write or run procedures: named in the refusal, never accepted.
WRITES = {"CREATE", "MERGE", "SET", "DELETE", "DETACH", "REMOVE", "CALL", "LOAD", "FOREACH", "UNION", "YIELD", "DROP"}


class CypherError(ValueError):
    """A query refused: `reason` says why, `line`/`column` where (1-based)."""

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(f"{message} (line {line}, column {column})")
        self.reason = message
        self.line = line
        self.column = column


class CypherLimit(CypherError):
    """A query within the subset, refused for its size: answered `limit`, not `invalid`."""


@dataclass(frozen=True, slots=True)
class Token:
    kind: Kind
    text: str  # the token as written (strings: their value)
    at: int  # offset in the query text
    end: int


def position(query: str, at: int) -> tuple[int, int]:
    """The 1-based line and column of offset `at`."""
    line = query.count("\n", 0, at) + 1
    return line, at - (query.rfind("\n", 0, at) + 1) + 1


class _Lexer:
    def __init__(self, query: str) -> None:
        self.query = query
        self.tokens: list[Token] = []

    def fail(self, message: str, at: int) -> CypherError:
        return CypherError(message, *position(self.query, at))

    def run(self) -> list[Token]:
        query, i, n = self.query, 0, len(self.query)
        while i < n:
            plain = _PLAIN.match(query, i)
            if plain is None:
                i = self.other(i)
            elif plain.lastgroup == "number":
                i = self.number(plain)
            elif plain.lastgroup != "blank":
                i = self.add("word" if plain.lastgroup == "word" else "punct", i, plain.end())
            else:
                i = plain.end()
            if len(self.tokens) > MAX_TOKENS:
                raise self.fail(f"the query is longer than {MAX_TOKENS} tokens", i)
        self.tokens.append(Token("end", "", n, n))
        return self.tokens

    def other(self, i: int) -> int:
        """A string, or what is refused: an open comment, a quoted name, a parameter, anything else."""
        c = self.query[i]
        if c in "'\"":
            return self.string(i)
        if self.query.startswith("/*", i):
            raise self.fail("unterminated comment", i)
        if c == "`":
            raise self.fail("quoted identifiers are not accepted; use plain names", i)
        if c == "$":
            raise self.fail("parameters are not accepted; write values in the query", i)
        raise self.fail(f"unexpected character {c!r}", i)

    def add(self, kind: Kind, i: int, j: int, text: str | None = None) -> int:
        self.tokens.append(Token(kind, self.query[i:j] if text is None else text, i, j))
        return j

    def string(self, i: int) -> int:
        query, n, quote = self.query, len(self.query), self.query[i]
        j, value = i + 1, []
        while True:
            if j >= n:
                raise self.fail("unterminated string", i)
            ch = query[j]
            if ch == quote:
                break
            if ch != "\\":
                value.append(ch)
                j += 1
                continue
            esc = query[j + 1 : j + 2]
            if esc in _ESCAPES:
                value.append(_ESCAPES[esc])
                j += 2
            elif esc == "u" and j + 6 <= n and all(h in _HEX for h in query[j + 2 : j + 6]):
                value.append(chr(int(query[j + 2 : j + 6], 16)))
                j += 6
            else:
                raise self.fail("unknown escape in string", j)
        text = "".join(value)
        if "\x00" in text or any(0xD800 <= ord(ch) <= 0xDFFF for ch in text):
            raise self.fail("a string may not contain NUL or a lone surrogate", i)
        return self.add("string", i, j + 1, text)

    def number(self, plain: re.Match[str]) -> int:
        i, j = plain.span()
        if j < len(self.query) and (self.query[j].isalnum() or self.query[j] == "_"):
            raise self.fail("malformed number", i)
        return self.add("int" if plain.group().isdigit() else "float", i, j)


def tokenize(query: str) -> list[Token]:
    """The tokens of `query`, ending with one of kind "end", or `CypherError` where it stops."""
    return _Lexer(query).run()


class Cursor:
    """The cursor over the tokens, and refusals that say where."""

    def __init__(self, query: str) -> None:
        self.query = query
        self.tokens = tokenize(query)
        self.i = 0

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def fail(self, message: str, tok: Token | None = None) -> CypherError:
        return CypherError(message, *position(self.query, (tok or self.tok).at))

    def is_kw(self, *words: str) -> bool:
        return self.tok.kind == "word" and self.tok.text.upper() in words

    def is_p(self, *puncts: str) -> bool:
        return self.tok.kind == "punct" and self.tok.text in puncts

    def punct_at(self, j: int, punct: str) -> bool:
        return j < len(self.tokens) and self.tokens[j].kind == "punct" and self.tokens[j].text == punct

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
        if tok.kind != "word" or tok.text.upper() in KEYWORDS or tok.text.upper() in WRITES:
            raise self.fail(f"expected {what}")
        if tok.text.startswith("_"):
            raise self.fail("names may not start with '_'")
        if len(tok.text) > 64:
            raise self.fail("names are at most 64 characters")
        self.i += 1
        return tok.text

    def key(self) -> str:
        tok = self.tok
        if tok.kind != "word" or len(tok.text) > 64:
            raise self.fail("expected a property name")
        self.take()
        return tok.text

    def written(self, start: Token) -> str:
        """The caller's text from `start` to the last token taken, blanks folded."""
        return " ".join(self.query[start.at : self.tokens[self.i - 1].end].split())
