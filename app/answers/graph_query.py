"""The answer of `query_graph` (app/mcp/tools/graph_query.py): a table, a row a line."""

from __future__ import annotations

from typing import Any

import orjson

from app.answers.text import block, lines
from app.services.graph_query import QueryResult

SEPARATOR = " | "


def query_rows(r: QueryResult) -> str:
    """A table: the columns' names, then a line per row; strings bare where that is unambiguous,
    other values as compact JSON, an entity or relation as its properties, null as nothing."""
    cut = "… more rows than the bounds: narrow the query or add LIMIT." if r.truncated else None
    if not r.rows:
        return lines([], "No rows.", cut)
    head = SEPARATOR.join(block(c) for c in r.columns)
    rows = [SEPARATOR.join(_cell(v) for v in row) + "\n" for row in r.rows]
    return lines([f"{head}\n", *rows], cut)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str) and _bare(value):
        return value
    return orjson.dumps(_plain(value)).decode()


def _bare(text: str) -> bool:
    """Whether a string reads as itself in a cell: not empty, on one line, without the separator,
    and not to be taken for a number, a literal or JSON."""
    if not text or text != text.strip() or "\n" in text or "\r" in text or SEPARATOR.strip() in text:
        return False
    if text[0] in '"[{' or text in ("true", "false", "null"):
        return False
    try:
        float(text)
    except ValueError:
        return True
    return False


_GRAPH_KEYS = {"id", "label", "properties"}
_RECORD_KEYS = {"id", "created_at", "created_by"}  # get_entity and detail="full" have them


def _plain(value: Any) -> Any:
    """A value without what only the graph store uses: an entity or relation (a map of `id`, `label`,
    `properties` and its ends' internal ids) becomes its properties, without its id and who wrote it
    when; nulls go."""
    if isinstance(value, dict):
        if value.keys() >= _GRAPH_KEYS and isinstance(value["properties"], dict):
            props = value["properties"].items()
            return {k: _plain(v) for k, v in props if k not in _RECORD_KEYS and v is not None}
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
