"""`recall` reads time in a question relative to when it is asked about: "last week", "two months
ago", "before she moved" lift the facts that happened then (docs/search.md, "Moments")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from app.services.timespans import around, spans
from tests.support.client import embedded, ok

NOW = datetime(2026, 11, 28, 12, tzinfo=UTC)


def _days(q: str) -> list[tuple[str, str]]:
    return [(a.date().isoformat(), b.date().isoformat()) for a, b in spans(q, NOW)]


def test_relative_phrases_are_ranges_counted_back_from_the_moment_asked_about():
    assert _days("What did I do last week?") == [("2026-11-15", "2026-11-24")]  # Mon 16 - Sun 22, a day's slack
    assert _days("two months ago") == [("2026-09-14", "2026-10-15")]
    assert _days("3 days ago") == [("2026-11-24", "2026-11-27")]
    assert _days("a couple of weeks ago") == [("2026-11-10", "2026-11-18")]
    assert _days("last May") == [("2026-05-01", "2026-06-01")]
    assert _days("last December") == [("2025-12-01", "2026-01-01")]
    assert _days("last Tuesday") == [("2026-11-23", "2026-11-26")]
    assert _days("yesterday") == [("2026-11-26", "2026-11-29")]
    assert _days("last year") == [("2025-01-01", "2026-01-01")]
    assert _days("anything recently?") == [("2026-10-29", "2026-11-29")]
    assert _days("on 8 May, 2023") == [("2023-05-07", "2023-05-10")]  # absolute dates as before
    assert _days("What is Ada's favourite colour?") == []


def test_an_event_places_a_question_before_or_after_it():
    assert around("Where did Ada work before she moved to Lisbon?") == ("before", "she moved to lisbon")
    assert around("what happened after the charity race") == ("after", "the charity race")
    assert around("Did she paint before?") is None and around("before that") is None


async def test_recall_lifts_what_happened_when_the_question_says(client_for, tenant):
    now = datetime.now(UTC)

    def at(days: int) -> str:
        return (now - timedelta(days=days)).isoformat()

    facts = [
        ("Ada went hiking in the hills with her sister", at(8)),
        ("Ada went swimming in the lake with her sister", at(60)),
        ("Ada went skiing in the mountains with her sister", at(400)),
    ]
    async with client_for(tenant) as c:
        ok(await c.call_tool("upsert_entities", {"entities": [{"name": "Ada", "type": "person"}]}))
        items = [{"entity": "Ada", "observations": [text], "valid_from": when} for text, when in facts]
        ok(await c.call_tool("append_observations", {"items": items}))
        await embedded(c)
        firsts = {}
        for q in ("What did Ada do with her sister last week?", "What did Ada do with her sister two months ago?",
                  "What did Ada do with her sister last year?"):  # fmt: skip
            firsts[q] = ok(await c.call_tool("recall", {"query": q, "detail": "full"}))["facts"][0]["text"]
    assert list(firsts.values()) == [t for t, _ in facts]


async def test_recall_lifts_what_happened_before_an_event(client_for, tenant):
    facts = [
        ("Ada worked at a bakery in Porto", "2024-01-10T00:00:00Z"),
        ("Ada moved to Lisbon with her partner", "2024-06-01T00:00:00Z"),
        ("Ada works at a bank in Lisbon", "2025-02-01T00:00:00Z"),
    ]
    async with client_for(tenant) as c:
        ok(await c.call_tool("upsert_entities", {"entities": [{"name": "Ada", "type": "person"}]}))
        items = [{"entity": "Ada", "observations": [text], "valid_from": when} for text, when in facts]
        ok(await c.call_tool("append_observations", {"items": items}))
        await embedded(c)
        before = ok(await c.call_tool("recall", {"query": "Where did Ada work before she moved to Lisbon?"}))
        after = ok(await c.call_tool("recall", {"query": "Where did Ada work after she moved to Lisbon?"}))
    work = [f["text"] for f in before["facts"] if "work" in f["text"]]
    assert work[0] == "Ada worked at a bakery in Porto", before["facts"]
    work = [f["text"] for f in after["facts"] if "work" in f["text"]]
    assert work[0] == "Ada works at a bank in Lisbon", after["facts"]
