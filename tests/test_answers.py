"""What a model reads (docs/tools.md, "Answers"): concise text by default, the complete record on
request, within the tokens a caller gives, and handles that work in the next call.

Against a server as deployed by default (no output schemas listed: answers are text only) and
through the SDK's client. The graph tools' answers: tests/test_answers_graph.py.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from app.services.excerpts import excerpt
from tests.support.client import embedded, error_code, in_order, ok, text

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


PEOPLE = {
    "Melanie": [
        "Melanie ran a charity race for mental health",
        "Melanie paints sunsets by the lake",
        "Melanie has two children who love dinosaurs",
        "Melanie went camping with her family in the mountains",
        "Melanie plays the clarinet in a community band",
    ],
    "Caroline": [
        "Caroline is researching adoption agencies",
        "Caroline gave a talk at a school about her transition",
        "Caroline wants to become a counsellor",
    ],
    "Grace": ["Grace keeps bees in her garden"],
}


async def _seed(c: Any) -> None:
    done(await c.call_tool("upsert_entities", {"entities": [{"name": p, "type": "person"} for p in PEOPLE]}))
    items = [
        {"entity": p, "observations": [fact], "source": f"D{i}:{j}", "valid_from": f"2023-0{1 + j % 8}-1{i}T00:00:00Z"}
        for i, (p, facts) in enumerate(PEOPLE.items(), start=1)
        for j, fact in enumerate(facts, start=1)
    ]
    done(await c.call_tool("append_observations", {"items": items}))
    done(
        await c.call_tool(
            "connect_entities", {"relations": [{"from": "Caroline", "to": "Melanie", "type": "is friends with"}]}
        )
    )
    turns = [
        {
            "text": "I ran a charity race last Saturday!",
            "speakers": ["Melanie"],
            "at": "2023-05-20T13:56:00Z",
            "source": "T1",
        },
        {
            "text": "That's amazing, what was it for?",
            "speakers": ["Caroline"],
            "at": "2023-05-20T13:57:00Z",
            "source": "T2",
        },
        {
            "text": "Mental health awareness, it felt great.",
            "speakers": ["Melanie"],
            "at": "2023-05-20T13:58:00Z",
            "source": "T3",
        },
    ]
    done(await c.call_tool("add_episodes", {"episodes": turns}))


def done(result: Any) -> str:
    """The text of a call that succeeded."""
    assert not result.is_error, result.content
    return text(result)


def _record(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is None
    return json.loads(text(result))


ROOM = {t: {"max_tokens": 20_000} for t in ("recall", "search", "get_entity", "list_episodes")}
READS = [
    ("recall", {"query": "What does Melanie do for fun?", "limit": 20}, lambda r: [f["text"] for f in r["facts"]]),
    ("search", {"query": "charity race"}, lambda r: [h["entity"]["name"] for h in r["hits"]]),
    ("get_entity", {"name": "Melanie"}, lambda r: [r["name"], *r["observations"], *(x["to"] for x in r["relations"])]),
    ("find_entities", {"sort": "name"}, lambda r: [e["name"] for e in r["entities"]]),
    ("list_episodes", {}, lambda r: [e["text"] for e in r["episodes"]]),
    ("entity_history", {"name": "Melanie"}, lambda r: [e["action"] for e in r["entries"]]),
]


@pytest.mark.parametrize(("tool", "args", "items"), READS, ids=[r[0] for r in READS])
async def test_concise_and_full_name_the_same_items_in_the_same_order(plain, tenant, tool, args, items):
    async with plain.client(tenant) as c:
        await _seed(c)
        await embedded(c)
        full = await c.call_tool(tool, {**args, "detail": "full", **ROOM.get(tool, {})})
        concise = await c.call_tool(tool, {**args, **ROOM.get(tool, {})})
    record = _record(full)
    shown = items(record)
    assert shown, record
    answer = text(concise)
    assert concise.structured_content is None
    in_order(answer, shown)
    assert "null" not in answer and not UUID.search(answer), answer
    # Today's answer was the record pretty-printed (and its nulls): the concise one is 3x smaller at least.
    assert 3 * len(answer.encode()) <= len(json.dumps(record, indent=2, ensure_ascii=False).encode()), answer


async def test_a_concise_recall_carries_dates_sources_and_episode_handles(plain, tenant):
    async with plain.client(tenant) as c:
        await _seed(c)
        answer = text(await c.call_tool("recall", {"query": "charity race mental health", "limit": 20}))
        assert "Melanie ran a charity race for mental health (2023-" in answer and "D1:1" in answer
        episode = re.search(r"^2023-05-20 13:56:\n#(\d+) Melanie: I ran a charity race", answer, re.M)
        assert episode, answer
        # The handle is the episode's id: the episode tools take it.
        removed = await c.call_tool("remove_episodes", {"ids": [int(episode.group(1))]})
        assert text(removed) == f"Deleted #{episode.group(1)}."
        # An entity's handle is its name: a follow-up call takes it where it takes an id.
        assert "Melanie" in text(await c.call_tool("neighbors", {"entity": "Melanie"}))


async def test_handles_do_not_reach_another_tenant(plain, tenant):
    async with plain.client(tenant) as c:
        await _seed(c)
        answer = text(await c.call_tool("list_episodes", {}))
    ids = [int(i) for i in re.findall(r"^#(\d+)", answer, re.M)]
    async with plain.client(f"{tenant}-other") as other:
        assert error_code(await other.call_tool("get_entity", {"name": "Melanie"})) == "not_found"
        refused = await other.call_tool("remove_episodes", {"ids": ids})
        assert text(refused).startswith("Deleted none.")
    async with plain.client(tenant) as c:
        assert len(re.findall(r"^#\d+", text(await c.call_tool("list_episodes", {})), re.M)) == len(ids)


async def test_writes_answer_what_changed_not_an_echo(plain, tenant):
    long_fact = "a fact worth keeping " * 40
    async with plain.client(tenant) as c:
        made = text(
            await c.call_tool(
                "upsert_entities", {"entities": [{"name": "Ada", "type": "person", "observations": [long_fact]}]}
            )
        )
        again = text(await c.call_tool("upsert_entities", {"entities": [{"name": "Ada", "type": "person"}]}))
        added = text(
            await c.call_tool("append_observations", {"items": [{"entity": "Ada", "observations": [long_fact, "new"]}]})
        )
        removed = text(await c.call_tool("remove_entities", {"entities": ["Ada"]}))
        restored = await c.call_tool("restore_entities", {"ids": UUID.findall(removed)})
    assert made == "Created: Ada v1 +1 facts." and again == "Unchanged: Ada v1."
    assert added == "Ada v2: added 1 facts." and long_fact not in added
    assert removed.startswith("Deleted: Ada (id ") and text(restored) == "Restored: Ada v4."


@pytest.mark.parametrize("query", ["-1", "-0", "-0.0", "+1", "- -", "-Melanie"])
async def test_recall_takes_a_query_of_signs_and_numbers(plain, tenant, query):
    async with plain.client(tenant) as c:
        await _seed(c)
        result = await c.call_tool("recall", {"query": query})
        assert not result.is_error, result.content
        keyword = await c.call_tool("recall", {"query": query, "mode": "keyword", "detail": "full"})
        assert not keyword.is_error, keyword.content


# --- the budget ----------------------------------------------------------------------------------------


def _fits(answer: str, max_tokens: int) -> None:
    assert len(answer.encode()) <= 4 * max_tokens, (len(answer.encode()), max_tokens)


BUDGETED = [
    ("recall", {"query": "Ada"}),
    ("search", {"query": "Ada"}),
    ("get_entity", {"name": "Ada"}),
    ("list_episodes", {}),
]


@pytest.mark.parametrize("script", ["latin", "cjk", "emoji"])
async def test_the_budget_holds_for_any_data(plain, tenant, script):
    letter = {"latin": "ab", "cjk": "記憶", "emoji": "🧠🗂"}[script]
    huge = (letter * 8000)[:16_000]
    async with plain.client(tenant) as c, plain.at("memory").client(tenant) as m:
        ok(
            await m.call_tool(
                "create_entities", {"entities": [{"name": "Ada", "entityType": "person", "observations": [huge]}]}
            )
        )
        facts = [f"Ada {letter} fact {i}" for i in range(500)]
        for i in range(0, 500, 100):
            done(
                await c.call_tool(
                    "append_observations", {"items": [{"entity": "Ada", "observations": facts[i : i + 100]}]}
                )
            )
        done(await c.call_tool("update_entity", {"name": "Ada", "changes": {"description": letter * 2000}}))
        done(await c.call_tool("add_episodes", {"episodes": [{"text": (letter * 4000)[:8000], "speakers": ["Ada"]}]}))
        for tool, args in BUDGETED:
            for max_tokens in (200, 500, 1000):
                result = await c.call_tool(tool, {**args, "max_tokens": max_tokens})
                assert not result.is_error, (tool, result.content)
                assert len(text(result).encode()) <= 4 * max_tokens, (tool, max_tokens, text(result))
                if tool == "get_entity":
                    assert "…[+" in text(result)  # a shortened text says so
            # The complete record keeps to the budget too, one record at least (its text shortened).
            full = await c.call_tool(tool, {**args, "max_tokens": 2000, "detail": "full"})
            assert len(text(full).encode()) <= 4 * 2000, (tool, len(text(full).encode()), text(full)[:3000])


async def test_what_does_not_fit_comes_with_the_cursor(plain, tenant):
    async with plain.client(tenant) as c:
        await _seed(c)
        whole = _record(
            await c.call_tool("recall", {"query": "Melanie", "limit": 30, "detail": "full", "max_tokens": 20000})
        )
        texts = [f["text"] for f in whole["facts"]]
        seen: list[str] = []
        cursor = None
        for _ in range(30):
            args = {"query": "Melanie", "limit": 30, "detail": "full", "max_tokens": 300}
            page = _record(await c.call_tool("recall", {**args, **({"cursor": cursor} if cursor else {})}))
            seen += [f["text"] for f in page["facts"]]
            cursor = page.get("next_cursor")
            if not cursor or len(seen) >= len(texts):
                break
            assert page["omitted"] > 0 or len(seen) % 30 == 0
        concise = text(await c.call_tool("recall", {"query": "Melanie", "limit": 30, "max_tokens": 200}))
    assert seen[: len(texts)] == texts
    assert re.search(r"\n… \d+ more facts: cursor=[\w.-]{40,100}$", concise), concise


async def test_an_empty_tenant_says_so_briefly(plain, tenant):
    async with plain.client(tenant) as c:
        answers = [
            text(await c.call_tool("recall", {"query": "anything"})),
            text(await c.call_tool("search", {"query": "anything"})),
            text(await c.call_tool("list_episodes", {})),
            text(await c.call_tool("find_entities", {})),
        ]
    assert answers == ["No facts found.", "Nothing found.", "No episodes.", "No entities match."]


async def test_with_output_schemas_the_record_is_structured_and_the_text_concise(server, tenant):
    async with server.client(tenant) as c:
        await _seed(c)
        result = await c.call_tool("recall", {"query": "charity race"})
    record = ok(result)
    assert record["facts"] and not text(result).startswith("{")
    in_order(text(result), [f["text"] for f in record["facts"]])


def test_a_long_text_is_shown_by_the_sentences_that_answer():
    text = (
        "Hey Caroline, so good to hear from you! The kids were wild all week. "
        "On Saturday I finally ran the charity race for mental health, ten kilometres. "
        "Anyway, how was your week? Tell me everything."
    )
    shown = excerpt(text, "When did Melanie run the charity race?")
    assert shown == "… On Saturday I finally ran the charity race for mental health, ten kilometres. …"
    assert excerpt("Short enough.", "anything") is None


async def test_a_long_episode_answers_with_its_excerpt_and_the_record_keeps_it_whole(plain, tenant):
    filler = "We talked about many other things that afternoon, none of them memorable at all. " * 4
    long = f"{filler}Melanie said the charity race raised four thousand dollars for the clinic. {filler}"
    async with plain.client(tenant) as c:
        done(await c.call_tool("add_episodes", {"episodes": [{"text": long, "source": "chat"}]}))
        await embedded(c)
        concise = text(await c.call_tool("recall", {"query": "How much did the charity race raise?"}))
        full = _record(await c.call_tool("recall", {"query": "How much did the charity race raise?", "detail": "full"}))
    assert "… Melanie said the charity race raised four thousand dollars for the clinic. …" in concise
    assert len(concise) < len(long) / 3
    assert full["facts"][0]["text"] == long.strip() and "excerpt" not in full["facts"][0]


@pytest.mark.parametrize(
    "bad",
    [
        {"max_tokens": 199},
        {"max_tokens": 20_001},
        {"max_tokens": -1},
        {"max_tokens": 2**63},
        {"max_tokens": 1000.5},
        {"max_tokens": None},
        {"detail": "verbose"},
        {"detail": ""},
        {"detail": "FULL"},
        {"detail": "concise\x00"},
        {"detail": ["full"]},
    ],
)
async def test_bad_budgets_and_details_are_refused_with_the_argument_named(plain, tenant, bad):
    async with plain.client(tenant) as c:
        for tool, args in [*BUDGETED, ("neighbors", {"entity": "Ada"}), ("subgraph", {"entities": ["Ada"]})]:
            if "max_tokens" in bad or tool in ("recall", "search", "get_entity", "list_episodes"):
                refused = await c.call_tool(tool, {**args, **bad})
                assert error_code(refused) == "invalid", (tool, bad, refused.content)
                assert next(iter(bad)) in text(refused)
