"""The answer of `search` (app/mcp/tools/search.py): one line per entity found, with the text that matched it.

Ada Lovelace (person): Ada wrote the first program for the Analytical Engine (1843-07-10, notes)
"""

from __future__ import annotations

from collections.abc import Sequence

from app.answers.form import Form
from app.answers.summaries import entity_line
from app.answers.text import block, lines, more, note, notices
from app.services.search_models import SearchHit, SearchResult


def hit_chunks(hits: Sequence[SearchHit]) -> list[str]:
    return [f"{_hit_line(h)}\n" for h in hits]


def _hit_line(h: SearchHit) -> str:
    m = h.match
    if m.kind != "observation":
        return entity_line(h.entity)
    head = entity_line(h.entity.model_copy(update={"description": ""}))
    return f"{head}: {block(m.text)}{note(m.valid_from or m.created_at, m.source, until=m.valid_until)}"


def _search(r: SearchResult, chunks: list[str]) -> str:
    if not r.hits:
        return lines([], "Nothing found.", *notices(r.notices))
    return lines(chunks, *notices(r.notices), more(r.next_cursor, r.omitted, "hits"))


HITS = Form[SearchResult, SearchHit](lambda r: r.hits, hit_chunks, _search)
