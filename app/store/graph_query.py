"""Running a read-only Cypher query (already parsed, app/store/cypher_read.py) on the tenant's graph."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg
import orjson

from app.store.cypher_read import ReadQuery
from app.store.database import Tx, timed

# The dollar quote around the query text. The parser's text has no quotes, and `$` only before its
# own parameter names (`$p0`), so it cannot end this quote; checked again below all the same.
_QUOTE = "$engram_cypher$"


class TimeBound(Exception):
    """The query ran past its statement timeout; the transaction is rolled back."""


class Refused(Exception):
    """AGE refused what the parser let through (a type mismatch, a variable of the wrong kind)."""


@dataclass(frozen=True, slots=True)
class Rows:
    rows: list[list[Any]]  # at most `limit`
    truncated: bool  # more rows, or more bytes, than the bounds


def decode_agtype(text: str | None) -> Any:
    """agtype's text form as JSON: vertices, edges and paths carry a `::vertex`/`::edge`/`::path`
    suffix, numerics `::numeric`, and floats may be NaN or Infinity; outside strings those suffixes are
    dropped and the special floats become null."""
    if text is None:
        return None
    out: list[str] = []
    i, n = 0, len(text)
    start = 0
    while i < n:
        c = text[i]
        if c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
        elif c == ":" and text.startswith("::", i):
            out.append(text[start:i])
            i += 2
            while i < n and text[i].isalpha():
                i += 1
            start = i
        elif c in "NI-" and (word := _special(text, i)):
            out.append(text[start:i])
            out.append("null")
            i += len(word)
            start = i
        else:
            i += 1
    out.append(text[start:])
    return orjson.loads("".join(out))


def _special(text: str, i: int) -> str:
    for word in ("NaN", "Infinity", "-Infinity"):
        if text.startswith(word, i):
            return word
    return ""


@timed
async def run(tx: Tx, query: ReadQuery, *, limit: int, max_bytes: int, timeout_ms: int) -> Rows:
    """The query's rows (each a list of JSON values, in column order), at most `limit` of them and
    about `max_bytes` of JSON, in the transaction the caller opened READ ONLY; past `timeout_ms` the
    statement is cancelled (`TimeBound`)."""
    if _QUOTE in query.text or not query.columns:
        raise ValueError("refusing query text")
    columns = ", ".join(f"c{i} ag_catalog.agtype" for i in range(len(query.columns)))
    # agtype as asyncpg reads it (its output function: strings quoted); a cast to text would not quote.
    texts = ", ".join(f"c{i}" for i in range(len(query.columns)))
    # The graph is the transaction's own tenant schema (checked against its pattern by Tenant).
    sql = (
        f"SELECT {texts} FROM ag_catalog.cypher('{tx.tenant.schema}', {_QUOTE} {query.text} {_QUOTE}, $1)"
        f" AS ({columns}) LIMIT $2"
    )
    await tx.set_local({"statement_timeout": int(timeout_ms)})
    try:
        records = await tx.conn.fetch(sql, orjson.dumps(query.parameters).decode(), limit + 1)
    except asyncpg.QueryCanceledError:
        raise TimeBound from None
    except (asyncpg.DataError, asyncpg.SyntaxOrAccessError, asyncpg.InternalServerError) as e:
        # Its first line only: never the SQL around the query.
        raise Refused(str(e).splitlines()[0][:200] if str(e) else type(e).__name__) from None
    rows: list[list[Any]] = []
    size = 0
    for record in records[:limit]:
        row = [decode_agtype(v) for v in record]
        size += sum(len(v) for v in record if v is not None)
        if size > max_bytes:
            return Rows(rows, True)
        rows.append(row)
    return Rows(rows, len(records) > limit)
