"""Running a read-only Cypher query (already parsed and written for AGE, app/store/cypher/) on the tenant's graph."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg
import orjson

from app.store.cypher import ReadQuery
from app.store.database import Tx, timed

# The dollar quote around the query text. The parser's text has no quotes, and `$` only before its
# own parameter names (`$p0`), so it cannot end this quote; checked again below all the same.
_QUOTE = "$engram_cypher$"


class TimeBound(Exception):
    """The query ran past its statement timeout; the transaction is rolled back."""


class Refused(Exception):
    """AGE refused what the parser let through (a type mismatch, a variable of the wrong kind, a
    feature it lacks): `message` is its first line, `near` the written query around the position
    AGE named (if it named one)."""

    def __init__(self, message: str, near: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.near = near


class TooLarge(Exception):
    """A value the query built grew past the value bound (SQLSTATE class 54, program limits)."""


@dataclass(frozen=True, slots=True)
class Rows:
    rows: list[list[Any]]  # at most `limit`
    truncated: bool  # more rows, or more bytes, than the bounds


# SQLSTATE classes that say the database (or the way to it) failed, not the query: left to the
# transaction's outage handling (`unavailable`). Every other class is the query's doing.
_OUTAGES = ("08", "40", "53", "57", "58", "XX001", "XX002", "F0", "HV", "P0003")


def _outage(state: str) -> bool:
    return state != "57014" and state.startswith(_OUTAGES)


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


# Rows read from the cursor at a time. Past the byte bound a row's columns come as NULL (the
# database measures each row before sending it), so one batch never carries more than the bound.
_BATCH = 32


@timed
async def run(
    tx: Tx,
    query: ReadQuery,
    *,
    limit: int,
    max_bytes: int,
    value_bytes: int,
    sort_rows: int,
    sort_key_bytes: int,
    timeout_ms: int,
) -> Rows:
    """The query's rows (each a list of JSON values, in column order), at most `limit` of them and
    `max_bytes` of agtype text, in the transaction the caller opened READ ONLY; past `timeout_ms`
    the statement is cancelled (`TimeBound`); a value built past `value_bytes`, a sort of more than
    `sort_rows` rows or by a key past `sort_key_bytes` is refused (`TooLarge`).

    Rows are read through a cursor, a batch at a time, and reading stops at the byte bound: the
    database sums the rows' sizes as it sends them and sends only NULLs past the bound, so no row
    past it ever reaches this process."""
    sql, at = _statement(tx.tenant.schema, query)
    # enable_sort off: DISTINCT and grouping by hashing, not by a sort, whose agtype comparisons keep
    # what they allocate until the sort ends (WITH DISTINCT of 10,000 values of 100 KB grew a backend
    # by 1.2 GB). A sort still runs where nothing else can (ORDER BY, bounded by its own guards).
    await tx.set_local(
        {
            "statement_timeout": int(timeout_ms),
            "engram.query_value_bytes": int(value_bytes),
            "engram.query_sort_rows": int(sort_rows),
            "engram.query_sort_key_bytes": int(sort_key_bytes),
            "engram.query_sorted": 0,
            "engram.query_collected": 0,
            "enable_sort": "off",
        }
    )
    rows: list[list[Any]] = []
    held = 0  # what the decoded rows cost this process, about
    try:
        cursor = tx.conn.cursor(sql, orjson.dumps(query.parameters).decode(), limit + 1, max_bytes, prefetch=_BATCH)
        async for record in cursor:
            if record[0] > max_bytes or len(rows) == limit:
                return Rows(rows, True)
            texts = [v for v in list(record)[1:]]
            held += sum(_cost(v) for v in texts if v is not None)
            if held > max_bytes:
                return Rows(rows, True)
            rows.append([decode_agtype(v) for v in texts])
    except asyncpg.PostgresError as e:
        state = e.sqlstate or ""
        if state == "57014":
            raise TimeBound from None
        if _outage(state):
            raise
        if state.startswith("54"):
            raise TooLarge(_first_line(e)) from None
        raise Refused(_first_line(e), _near(e, at, query.text)) from None
    return Rows(rows, False)


def _statement(schema: str, query: ReadQuery) -> tuple[str, int]:
    """The SQL that runs `query` on the graph `schema` (the transaction's own tenant schema, checked
    against its pattern by Tenant), and where the query text starts in it (1-based, less one)."""
    if _QUOTE in query.text or not query.columns:
        raise ValueError("refusing query text")
    n = len(query.columns)
    columns = ", ".join(f"c{i} ag_catalog.agtype" for i in range(n))
    # agtype as asyncpg reads it (its output function: strings quoted); a cast to text would not quote.
    sizes = " + ".join(f"coalesce(octet_length(ag_catalog.agtype_out(c{i})::text), 0)" for i in range(n))
    shown = ", ".join(f"CASE WHEN total <= $3 THEN c{i} END" for i in range(n))
    opening = f"FROM ag_catalog.cypher('{schema}', {_QUOTE} "
    sql = (
        f"SELECT total, {shown} FROM (SELECT *, sum({sizes}) OVER (ROWS UNBOUNDED PRECEDING) AS total"
        f" {opening}{query.text} {_QUOTE}, $1) AS ({columns}) LIMIT $2) measured"
    )
    return sql, sql.index(opening) + len(opening) + 1


# What one value of a list or map costs as a Python object and in the answer beyond its text
# (a float: 24 bytes, its slot in the list, its JSON in both forms of the answer): measured by
# bench/query_memory.py, so that many small values weigh what they hold.
_PER_ITEM = 48


def _cost(text: str) -> int:
    """About what a value's agtype text becomes in this process: its length, and each item's due."""
    return len(text) + _PER_ITEM * (text.count(",") + text.count(":"))


def _first_line(e: asyncpg.PostgresError) -> str:
    """The error's first line only: never the SQL around the query."""
    text = str(e)
    return text.splitlines()[0][:200] if text else type(e).__name__


def _near(e: asyncpg.PostgresError, offset: int, text: str) -> str:
    """The written query around the position AGE named (1-based in the whole statement), if any."""
    try:
        at = int(getattr(e, "position", None) or 0) - 1 - offset
    except ValueError:
        return ""
    if not 0 <= at < len(text):
        return ""
    return text[max(0, at - 20) : at + 40]
