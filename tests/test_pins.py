"""Pinned facts (docs/pinned-facts.md) against a real server and database, with the SDK's client and
real tokens: pin_facts and unpin_facts, their bound and `not_found`, the pins shown by get_entity,
leading recall and every session's brief, and walled per tenant; a private episode stays private."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from mcp.types import CallToolResult

from app.services.pins import MAX_PINNED
from tests.support.client import error_code, ok, text
from tests.support.hooks import common, context, new_tenant, post, session
from tests.support.server import Server

pytestmark = pytest.mark.asyncio

CELLO = "Ada plays the cello in a string quartet"
LISBON = "Ada speaks Portuguese because her mother is from Lisbon"
DEPLOY = "Deploys to production need two approvals"


async def seeded(server: Server) -> str:
    tenant = new_tenant(server)
    async with server.client(tenant) as c:
        done(
            await c.call_tool(
                "upsert_entities",
                {
                    "entities": [
                        {"name": "Ada Lovelace", "type": "person", "observations": [CELLO, LISBON]},
                        {"name": "Release process", "type": "process", "observations": [DEPLOY]},
                    ]
                },
            )
        )
    return tenant


def done(result: CallToolResult) -> None:
    assert not result.is_error, result.content


def items(entity: str, *texts: str) -> dict[str, Any]:
    return {"items": [{"entity": entity, "observations": list(texts)}]}


async def test_pin_unpin_and_what_was_not_found(server: Server) -> None:
    tenant = await seeded(server)
    async with server.client(tenant) as c:
        r = ok(await c.call_tool("pin_facts", items("Ada Lovelace", LISBON, "Ada never said this")))
        assert [x["observations"] for x in r["changed"]] == [[LISBON]]
        assert r["not_found"] == [{"entity": "Ada Lovelace", "observation": "Ada never said this"}]
        assert r["pinned"] == 1 and r["max_pinned"] == MAX_PINNED
        again = ok(await c.call_tool("pin_facts", items("Ada Lovelace", LISBON)))
        assert again["changed"] == [] and again["unchanged"] == [{"entity": "Ada Lovelace", "observation": LISBON}]
        # get_entity marks the pinned fact, and its record says since when
        entity = ok(await c.call_tool("get_entity", {"name": "Ada Lovelace"}))
        records = {o["text"]: o for o in entity["observation_records"]}
        assert records[LISBON]["pinned_at"] is not None and records[CELLO]["pinned_at"] is None
        history = ok(await c.call_tool("entity_history", {"name": "Ada Lovelace"}))
        assert history["entries"][0]["action"] == "observations_pinned"
        # an unknown entity fails the call, and nothing changes
        assert error_code(await c.call_tool("pin_facts", items("Nobody at all", CELLO))) == "not_found"
        gone = ok(await c.call_tool("unpin_facts", items("Ada Lovelace", LISBON, CELLO)))
        assert [x["observations"] for x in gone["changed"]] == [[LISBON]] and gone["pinned"] == 0
        assert gone["unchanged"] == [{"entity": "Ada Lovelace", "observation": CELLO}]


async def test_concise_answers_mark_pins(plain: Server) -> None:
    tenant = await seeded(plain)
    async with plain.client(tenant) as c:
        answer = text(await c.call_tool("pin_facts", items("Ada Lovelace", CELLO, "nothing like it")))
        assert answer.splitlines() == [
            "Pinned 1 facts: Ada Lovelace: 1.",
            'Not found: Ada Lovelace: "nothing like it".',
            f"1 of {MAX_PINNED} facts pinned.",
        ]
        entity = text(await c.call_tool("get_entity", {"name": "Ada Lovelace"}))
        assert f"- [pinned] {CELLO}" in entity and f"- {LISBON}" in entity
        # recall: the pinned fact leads the facts it was among, marked
        recalled = text(await c.call_tool("recall", {"query": "What languages does Ada speak?"}))
        facts = [line for line in recalled.splitlines() if line.startswith("- ")]
        assert facts[0].startswith(f"- [pinned] {CELLO}"), recalled
        assert any(LISBON in line for line in facts[1:])


async def test_at_most_so_many_pins(server: Server) -> None:
    tenant = new_tenant(server)
    texts = [f"Rule number {i} of the house" for i in range(MAX_PINNED + 1)]
    async with server.client(tenant) as c:
        house = {"name": "House", "type": "place", "observations": texts}
        ok(await c.call_tool("upsert_entities", {"entities": [house]}))
        assert ok(await c.call_tool("pin_facts", items("House", *texts[:MAX_PINNED])))["pinned"] == MAX_PINNED
        over = await c.call_tool("pin_facts", items("House", texts[-1]))
        assert error_code(over) == "limit"
        message = over.content[0].text  # type: ignore[union-attr]
        assert str(MAX_PINNED) in message and "unpin_facts" in message and "pinned_facts" in message
        ok(await c.call_tool("unpin_facts", items("House", texts[0])))
        assert ok(await c.call_tool("pin_facts", items("House", texts[-1])))["pinned"] == MAX_PINNED


async def test_every_session_brief_leads_with_the_pins(server: Server) -> None:
    tenant = await seeded(server)
    async with server.client(tenant) as c:
        ok(await c.call_tool("add_episodes", {"episodes": [{"text": "We agreed to ship the shop on Friday."}]}))
        ok(await c.call_tool("pin_facts", items("Release process", DEPLOY)))
    token = server.token(tenant)
    sid = session()
    first = context(await post(server, token, common(sid, "SessionStart", source="startup")))
    assert first is not None
    lines = first.splitlines()
    assert lines[1].startswith("Pinned facts") and DEPLOY in first and first.count(DEPLOY) == 1, first
    assert first.index(DEPLOY) < first.index("ship the shop")
    # a resumed session is not given the episodes again, but the pins lead every brief
    resumed = context(await post(server, token, common(sid, "SessionStart", source="resume")))
    assert resumed is not None and DEPLOY in resumed and "ship the shop" not in resumed


async def test_pins_stay_in_their_tenant(server: Server) -> None:
    mine, theirs = await seeded(server), await seeded(server)
    async with server.client(mine) as c:
        ok(await c.call_tool("pin_facts", items("Ada Lovelace", CELLO)))
    async with server.client(theirs) as c:
        entity = ok(await c.call_tool("get_entity", {"name": "Ada Lovelace"}))
        assert all(o.get("pinned_at") is None for o in entity["observation_records"])
        r = ok(await c.call_tool("recall", {"query": "cello", "detail": "full"}))
        assert all(not f.get("pinned") for f in r["facts"])
        assert ok(await c.call_tool("unpin_facts", items("Ada Lovelace", CELLO)))["changed"] == []
    brief = context(await post(server, server.token(theirs), common(session(), "SessionStart", source="startup")))
    assert brief is None or "Pinned facts" not in brief


async def test_a_private_episode_cannot_be_pinned_nor_shown(server: Server) -> None:
    """Pins are on observations, which are shared; a private episode's text is no observation, so
    another principal cannot pin it or learn it through a pin."""
    tenant = await seeded(server)
    secret = f"the vault code is {uuid.uuid4().hex[:12]}"
    async with server.client(tenant) as alice:
        ok(await alice.call_tool("add_episodes", {"episodes": [{"text": f"Ada: {secret}", "private": True}]}))
        r = ok(await alice.call_tool("pin_facts", items("Ada Lovelace", f"Ada: {secret}")))
        assert r["changed"] == [] and len(r["not_found"]) == 1
    bob = server.token(tenant, subject="bob")
    brief = context(await post(server, bob, common(session(), "SessionStart", source="startup")))
    assert brief is None or secret not in brief
