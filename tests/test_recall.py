"""`recall` and episodes through the real server, the SDK's client and the real embedding model.

Facts are ranked one by one: a fact that is only the fifth-best text of its entity still comes back;
relations are recalled by meaning as sentences; a question naming two entities recalls the fact
that joins them through a neighbour; episodes are written, linked to the entities they name,
recalled, listed, ended and deleted; tenants never see each other's facts, episodes or cursors.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg
import pytest
from mcp.shared.exceptions import MCPError

from app.auth.principal import READ
from tests.support.client import error_code, ok, relate, upsert
from tests.support.search import reindex
from tests.support.transfer import export, lines_of, summary

Y2020, Y2021, Y2022, Y2023 = (f"{y}-05-01T00:00:00+00:00" for y in range(2020, 2024))


async def embedded(c: Any, query: str, expect: str, seconds: float = 180) -> dict[str, Any]:
    """`recall` once every text is embedded (the background filler embeds what a write left)."""
    deadline = time.monotonic() + seconds
    while True:
        found = ok(await c.call_tool("recall", {"query": query, "limit": 50}))
        if not any("have no embedding" in n for n in found["notices"]) and any(
            expect in f["text"] for f in found["facts"]
        ):
            return found
        assert time.monotonic() < deadline, found
        await asyncio.sleep(0.5)


def texts(result: dict[str, Any]) -> list[str]:
    return [f["text"] for f in result["facts"]]


async def test_every_fact_of_an_entity_can_come_back(client_for, tenant):
    """A fact that is only the fifth-best text of its entity for a query is still recalled, each fact
    on its own, with its entity, source and times."""
    facts = [
        "Ada plays the cello in a quartet",
        "Ada plays chess on Sundays",
        "Ada plays tennis with her brother",
        "Ada plays the piano badly",
        "Ada grows tomatoes on her balcony",
        "Ada was born in London",
    ]
    async with client_for(tenant) as c:
        up = ok(
            await c.call_tool(
                "upsert_entities",
                {"entities": [{"name": "Ada", "type": "person", "observations": facts}], "source": "chat-1"},
            )
        )
        assert up["embeddings_pending"] == 0
        found = ok(await c.call_tool("recall", {"query": "what does Ada like to play?", "limit": 10}))
        got = texts(found)
        assert {
            "Ada plays the cello in a quartet",
            "Ada plays chess on Sundays",
            "Ada plays tennis with her brother",
            "Ada plays the piano badly",
        } <= set(got[:5])
        assert len(got) == len(set(got))  # each fact once
        first = found["facts"][0]
        assert first["kind"] == "observation" and first["entity"]["name"] == "Ada"
        assert first["source"] == "chat-1" and first["created_at"] and first["scores"]["named"] is True
        assert found["named"] == [{"id": first["entity"]["id"], "name": "Ada", "type": "person"}]
        # `search` still finds the entity once.
        hits = ok(await c.call_tool("search", {"query": "what does Ada like to play?"}))["hits"]
        assert [h["entity"]["name"] for h in hits] == ["Ada"]


async def test_relations_are_recalled_by_meaning_and_kept_in_step(client_for, tenant):
    async with client_for(tenant) as c:
        await upsert(
            c,
            [
                {"name": "Ada Lovelace", "type": "person"},
                {"name": "Charles Babbage", "type": "person"},
                {"name": "Analytical Engine", "type": "machine", "observations": ["a mechanical computer"]},
            ],
        )
        await relate(
            c,
            [
                {
                    "from": "Ada Lovelace",
                    "to": "Charles Babbage",
                    "type": "collaborated with",
                    "notes": "on notes about the engine",
                    "source": "letters",
                },
                {"from": "Charles Babbage", "to": "Analytical Engine", "type": "designed"},
            ],
        )
        found = await embedded(c, "who worked together with the mathematician?", "collaborated with")
        rel = next(f for f in found["facts"] if f["kind"] == "relation" and "collaborated" in f["text"])
        assert rel["text"] == "Ada Lovelace collaborated with Charles Babbage"
        assert rel["entity"]["name"] == "Ada Lovelace" and rel["to"]["name"] == "Charles Babbage"
        assert rel["relation"]["notes"] == "on notes about the engine" and rel["source"] == "letters"
        spoke = {"episodes": [{"text": "the engine will weave algebra", "speakers": ["Charles Babbage"]}]}
        ok(await c.call_tool("add_episodes", spoke))
        keyword = {"query": "Babbage weave", "mode": "keyword", "limit": 50}
        assert any(f["kind"] == "episode" for f in ok(await c.call_tool("recall", keyword))["facts"])
        # A renamed end renames the sentence; a removed relation is no longer recalled.
        ok(await c.call_tool("update_entity", {"name": "Charles Babbage", "changes": {"name": "Charles B."}}))
        found = await embedded(c, "who collaborated with Ada Lovelace?", "Charles B.")
        assert "Ada Lovelace collaborated with Charles B." in texts(found)
        # The episode he spoke is indexed under his new name: the old one finds only its own words.
        spoken = next(f for f in ok(await c.call_tool("recall", keyword))["facts"] if f["kind"] == "episode")
        assert spoken["scores"]["keyword"] < 1.0 and spoken["entities"][0]["name"] == "Charles B."
        ok(
            await c.call_tool(
                "disconnect_entities",
                {"relations": [{"from": "Ada Lovelace", "to": "Charles B.", "type": "collaborated with"}]},
            )
        )
        found = ok(await c.call_tool("recall", {"query": "who collaborated with Ada Lovelace?", "limit": 50}))
        assert not any("collaborated" in t for t in texts(found))


async def test_a_question_naming_two_entities_finds_what_joins_them(client_for, tenant):
    """Ada and Charles never met; what joins them is a fact of their common neighbour."""
    async with client_for(tenant) as c:
        await upsert(
            c,
            [
                {"name": "Ada", "type": "person", "observations": ["Ada likes long walks"]},
                {"name": "Charles", "type": "person", "observations": ["Charles collects stamps"]},
                {
                    "name": "Mary Somerville",
                    "type": "person",
                    "observations": ["Mary introduced her two friends to each other at a dinner in 1833"],
                },
                *(
                    {
                        "name": f"Other {i}",
                        "type": "person",
                        "observations": [f"Other {i} met someone at a dinner party"],
                    }
                    for i in range(20)
                ),
            ],
        )
        await relate(
            c,
            [
                {"from": "Mary Somerville", "to": "Ada", "type": "mentored"},
                {"from": "Mary Somerville", "to": "Charles", "type": "corresponded with"},
            ],
        )
        found = await embedded(c, "How did Ada and Charles meet?", "introduced her two friends")
        top = texts(found)[:5]
        assert "Mary introduced her two friends to each other at a dinner in 1833" in top
        mary = next(f for f in found["facts"] if f["text"].startswith("Mary introduced"))
        assert mary["scores"]["named"] is False  # a neighbour's fact
        assert {n["name"] for n in found["named"]} == {"Ada", "Charles"}


async def test_filters_and_moments(client_for, tenant):
    async with client_for(tenant) as c:
        await upsert(c, [{"name": "Ada", "type": "person"}, {"name": "Acme", "type": "org"}])
        ok(
            await c.call_tool(
                "append_observations",
                {
                    "items": [
                        {
                            "entity": "Ada",
                            "observations": ["Ada lives in Paris"],
                            "valid_from": Y2020,
                            "valid_until": Y2022,
                            "source": "cv",
                        },
                        {"entity": "Acme", "observations": ["Acme moved its office to Paris"], "source": "news"},
                    ]
                },
            )
        )
        now = texts(ok(await c.call_tool("recall", {"query": "Paris"})))
        assert now == ["Acme moved its office to Paris"]  # Ada's ended in 2022
        then = texts(ok(await c.call_tool("recall", {"query": "Paris", "as_of": Y2021})))
        assert set(then) == {"Ada lives in Paris", "Acme moved its office to Paris"}
        every = texts(ok(await c.call_tool("recall", {"query": "Paris", "include_invalid": True})))
        assert set(every) == set(then)
        assert texts(ok(await c.call_tool("recall", {"query": "Paris", "types": ["org"], "as_of": Y2021}))) == [
            "Acme moved its office to Paris"
        ]
        assert texts(ok(await c.call_tool("recall", {"query": "Paris", "sources": ["cv"], "as_of": Y2021}))) == [
            "Ada lives in Paris"
        ]
        assert (
            texts(ok(await c.call_tool("recall", {"query": "Paris", "until": "2000-01-01T00:00:00Z", "as_of": Y2021})))
            == []
        )


async def test_paging_is_bound_to_the_query_and_tenant(client_for, tenant):
    async with client_for(tenant) as c:
        await upsert(
            c,
            [
                {
                    "name": "Notes",
                    "type": "topic",
                    "observations": [f"note number {i} about gardening" for i in range(30)],
                }
            ],
        )
        first = ok(await c.call_tool("recall", {"query": "gardening note", "limit": 10, "mode": "keyword"}))
        assert len(first["facts"]) == 10 and first["next_cursor"]
        second = ok(
            await c.call_tool(
                "recall", {"query": "gardening note", "limit": 10, "mode": "keyword", "cursor": first["next_cursor"]}
            )
        )
        assert not set(texts(first)) & set(texts(second)) and len(second["facts"]) == 10
        other = await c.call_tool("recall", {"query": "other", "cursor": first["next_cursor"]})
        assert error_code(other) == "invalid"
    async with client_for(tenant + "-b") as b:
        assert (
            error_code(
                await b.call_tool(
                    "recall",
                    {"query": "gardening note", "limit": 10, "mode": "keyword", "cursor": first["next_cursor"]},
                )
            )
            == "invalid"
        )


async def test_episodes_end_to_end(client_for, tenant):
    async with client_for(tenant) as c:
        await upsert(
            c,
            [
                {"name": "Caroline", "type": "person"},
                {"name": "Melanie", "type": "person"},
                {"name": "Pottery Club", "type": "group"},
            ],
        )
        ok(await c.call_tool("add_aliases", {"name": "Melanie", "aliases": ["Mel"]}))
        written = ok(
            await c.call_tool(
                "add_episodes",
                {
                    "episodes": [
                        {
                            "text": "Hey Mel! I went to the LGBTQ support group yesterday and it was so powerful.",
                            "at": Y2023,
                            "source": "D1:3",
                            "speakers": ["Caroline"],
                        },
                        {
                            "text": "That's great Caroline. I signed up for a pottery class at the Pottery Club.",
                            "at": Y2023,
                            "source": "D1:4",
                            "speakers": ["Melanie"],
                        },
                        {"text": "The weather was grey all week.", "at": Y2021, "source": "D0:1"},
                    ]
                },
            )
        )
        eps = written["episodes"]
        assert [e["source"] for e in eps] == ["D1:3", "D1:4", "D0:1"]
        roles = {e["name"]: e["role"] for e in eps[0]["entities"]}
        assert roles == {"Caroline": "speaker", "Melanie": "mentioned"}  # by her alias, "Mel"
        roles = {e["name"]: e["role"] for e in eps[1]["entities"]}
        assert roles == {"Melanie": "speaker", "Caroline": "mentioned", "Pottery Club": "mentioned"}
        assert eps[2]["entities"] == []

        found = await embedded(c, "When did Caroline go to the support group?", "support group")
        top = found["facts"][0]
        assert top["kind"] == "episode" and top["source"] == "D1:3" and top["at"].startswith("2023-05-01")
        assert top["entities"][0]["name"] == "Caroline"

        # An entity finds its episodes; listings by time and source.
        listed = ok(await c.call_tool("list_episodes", {"entity": "Pottery Club"}))["episodes"]
        assert [e["source"] for e in listed] == ["D1:4"]
        listed = ok(await c.call_tool("list_episodes", {"limit": 2}))
        assert [e["source"] for e in listed["episodes"]] == ["D1:4", "D1:3"]
        rest = ok(await c.call_tool("list_episodes", {"limit": 2, "cursor": listed["next_cursor"]}))
        assert [e["source"] for e in rest["episodes"]] == ["D0:1"] and rest["next_cursor"] is None
        assert [e["source"] for e in ok(await c.call_tool("list_episodes", {"until": Y2022}))["episodes"]] == ["D0:1"]
        assert [e["source"] for e in ok(await c.call_tool("list_episodes", {"sources": ["D1:3"]}))["episodes"]] == [
            "D1:3"
        ]

        # Ended: no longer recalled or listed, except as of before or with every fact.
        first = eps[0]["id"]
        ended = ok(await c.call_tool("invalidate_episodes", {"ids": [first, 999999], "reason": "retracted"}))
        assert ended == {"ids": [first], "unchanged": [999999]}
        assert first not in [
            f["episode_id"] for f in ok(await c.call_tool("recall", {"query": "support group", "limit": 50}))["facts"]
        ]
        back = ok(await c.call_tool("list_episodes", {"include_invalid": True, "sources": ["D1:3"]}))["episodes"]
        assert back[0]["ended_why"] == "retracted" and back[0]["valid_until"]
        # Removed for good.
        gone = ok(await c.call_tool("remove_episodes", {"ids": [eps[1]["id"]]}))
        assert gone == {"ids": [eps[1]["id"]], "unchanged": []}
        assert ok(await c.call_tool("list_episodes", {"include_invalid": True}))["episodes"][0]["source"] == "D1:3"

    # Another tenant sees none of it, by id or otherwise.
    async with client_for(tenant + "-other") as other:
        assert ok(await other.call_tool("list_episodes", {}))["episodes"] == []
        assert ok(await other.call_tool("recall", {"query": "support group"}))["facts"] == []
        assert ok(await other.call_tool("remove_episodes", {"ids": [eps[2]["id"]]}))["ids"] == []
        assert ok(await other.call_tool("invalidate_episodes", {"ids": [eps[2]["id"]]}))["ids"] == []
    async with client_for(tenant) as c:
        assert eps[2]["id"] in [e["id"] for e in ok(await c.call_tool("list_episodes", {}))["episodes"]]


async def test_episode_speakers_must_exist_and_nothing_is_written(client_for, tenant):
    async with client_for(tenant) as c:
        bad = await c.call_tool(
            "add_episodes",
            {"episodes": [{"text": "fine", "speakers": []}, {"text": "who said this?", "speakers": ["Nobody"]}]},
        )
        assert error_code(bad) == "not_found"
        assert ok(await c.call_tool("list_episodes", {}))["episodes"] == []


@pytest.mark.parametrize(
    "tool,args",
    [
        ("recall", {"query": ""}),
        ("recall", {"query": "   "}),
        ("recall", {"query": "x" * 1001}),
        ("recall", {"query": "a\x00b"}),
        ("recall", {"query": "a", "limit": 51}),
        ("recall", {"query": "a", "limit": 0}),
        ("recall", {"query": "a", "mode": "fuzzy"}),
        ("recall", {"query": "a", "since": Y2023, "until": Y2020}),
        ("recall", {"query": "a", "as_of": Y2020, "include_invalid": True}),
        ("recall", {"query": "a", "cursor": "not-a-cursor"}),
        ("recall", {"query": "a", "types": ["t"] * 21}),
        ("recall", {"query": "a", "surprise": 1}),
        ("add_episodes", {"episodes": []}),
        ("add_episodes", {"episodes": [{"text": ""}]}),
        ("add_episodes", {"episodes": [{"text": "x" * 8001}]}),
        ("add_episodes", {"episodes": [{"text": "nul \x00 here"}]}),
        ("add_episodes", {"episodes": [{"text": "a", "at": "yesterday"}]}),
        ("add_episodes", {"episodes": [{"text": "a", "valid_from": Y2023, "valid_until": Y2020}]}),
        ("add_episodes", {"episodes": [{"text": "a", "speakers": ["x"] * 11}]}),
        ("add_episodes", {"episodes": [{"text": "a", "extra": True}]}),
        ("add_episodes", {"episodes": [{"text": "a"}] * 101}),
        ("list_episodes", {"limit": 0}),
        ("list_episodes", {"cursor": "x.y"}),
        ("list_episodes", {"since": Y2023, "until": Y2020}),
        ("invalidate_episodes", {"ids": []}),
        ("invalidate_episodes", {"ids": [0]}),
        ("invalidate_episodes", {"ids": ["one"]}),
        ("invalidate_episodes", {"ids": [2**63]}),
        ("remove_episodes", {"ids": [-1]}),
        ("remove_episodes", {"ids": list(range(1, 102))}),
    ],
)
async def test_hostile_arguments_are_refused_and_change_nothing(client_for, tenant, tool, args):
    async with client_for(tenant) as c:
        result = await c.call_tool(tool, args)
        assert error_code(result) in ("invalid", "limit"), result
        assert ok(await c.call_tool("list_episodes", {"include_invalid": True}))["episodes"] == []


async def test_writing_episodes_needs_the_write_scope(client_for, tenant):
    async with client_for(tenant, scopes=(READ,)) as c:
        with pytest.raises(MCPError):  # 403 insufficient_scope at the HTTP layer (tests/test_auth.py)
            await c.call_tool("add_episodes", {"episodes": [{"text": "a"}]})
        assert ok(await c.call_tool("recall", {"query": "a"}))["facts"] == []


async def test_get_entity_shows_the_observations_that_matter(client_for, tenant):
    """An entity with hundreds of facts: the newest, or those relevant to a question, come first."""
    facts = [f"Ada visited town number {i} on her tour" for i in range(200)]
    facts[37] = "Ada is allergic to peanuts and carries an epinephrine pen"
    async with client_for(tenant) as c:
        for i in range(0, len(facts), 100):
            await upsert(c, [{"name": "Ada", "type": "person", "observations": facts[i : i + 100]}])
        oldest = ok(await c.call_tool("get_entity", {"name": "Ada", "max_observations": 3}))
        assert oldest["observations"] == facts[:3] and oldest["observations_total"] == 200
        newest = ok(
            await c.call_tool("get_entity", {"name": "Ada", "max_observations": 3, "observations_first": "newest"})
        )
        assert newest["observations"] == facts[-1:-4:-1]
        await embedded(c, "what food must Ada avoid?", "peanuts")
        relevant = ok(
            await c.call_tool(
                "get_entity",
                {
                    "name": "Ada",
                    "max_observations": 3,
                    "observations_first": "relevant",
                    "query": "what food must Ada avoid?",
                },
            )
        )
        assert relevant["observations"][0] == facts[37]
        for bad in (
            {"observations_first": "relevant"},
            {"query": "food"},
            {"observations_first": "relevant", "query": "  "},
            {"observations_first": "random"},
        ):
            assert error_code(await c.call_tool("get_entity", {"name": "Ada", **bad})) == "invalid"


async def test_episodes_travel_in_engram_files_byte_for_byte(server, client_for, tenant, tmp_path):
    """Exported, imported into another tenant and exported again: the same file; imported twice: once;
    the dialect formats carry no episodes."""
    async with client_for(tenant) as c:
        await upsert(c, [{"name": "Caroline", "type": "person"}, {"name": "Melanie", "type": "person"}])
        written = ok(
            await c.call_tool(
                "add_episodes",
                {
                    "episodes": [
                        {
                            "text": "Caroline told Melanie about the adoption agency",
                            "at": Y2023,
                            "source": "D2:1",
                            "speakers": ["Caroline"],
                            "valid_from": Y2021,
                        },
                        {"text": "A note with nobody in it", "at": Y2022},
                    ]
                },
            )
        )
        ok(await c.call_tool("invalidate_episodes", {"ids": [written["episodes"][1]["id"]], "reason": "wrong"}))
    first = export(server, tenant, tmp_path / "a.jsonl")
    rows = lines_of(first)
    eps = [r for r in rows if r["type"] == "episode"]
    assert [e["text"] for e in eps] == ["Caroline told Melanie about the adoption agency", "A note with nobody in it"]
    assert {(e["name"], e["role"]) for e in eps[0]["entities"]} == {("Caroline", "speaker"), ("Melanie", "mentioned")}
    assert eps[1]["ended_why"] == "wrong" and rows[-1]["episodes"] == 2
    copy = tenant + "-copy"
    done = summary(server, copy, tmp_path / "a.jsonl")
    assert done["episodes"]["added"] == 2 and done["refused_total"] == 0
    assert export(server, copy, tmp_path / "b.jsonl") == first
    again = summary(server, copy, tmp_path / "a.jsonl")
    assert again["episodes"]["added"] == 0 and again["episodes"]["skipped"] == 2
    async with client_for(copy) as c:
        found = await embedded(c, "who is adopting?", "adoption agency")
        assert found["facts"][0]["entities"][0]["name"] == "Caroline"
    for fmt in ("memory", "neo4j"):
        assert b"adoption" not in export(server, tenant, tmp_path / f"{fmt}.json", "--format", fmt)


async def test_reindex_rebuilds_the_documents_of_relations_and_episodes(server, client_for, tenant, db_settings):
    async with client_for(tenant) as c:
        await upsert(c, [{"name": "Ada", "type": "person"}, {"name": "Acme", "type": "org"}])
        await relate(c, [{"from": "Ada", "to": "Acme", "type": "works at"}])
        ok(await c.call_tool("add_episodes", {"episodes": [{"text": "Ada signed the contract", "speakers": ["Ada"]}]}))
    owner = await asyncpg.connect(db_settings.admin_dsn())
    try:
        schema = await owner.fetchval("SELECT schema_name FROM engram.tenants WHERE key = $1", tenant)
        await owner.execute(f"DELETE FROM {schema}.search_docs")
    finally:
        await owner.close()
    async with client_for(tenant) as c:
        assert ok(await c.call_tool("recall", {"query": "Ada", "mode": "keyword"}))["facts"] == []
        done = reindex(server, "--tenant", tenant)
        assert done.returncode == 0, done.stderr
        found = ok(await c.call_tool("recall", {"query": "Ada", "mode": "keyword", "limit": 50}))
        assert {f["kind"] for f in found["facts"]} == {"relation", "episode"}
