"""What a model reads from the graph tools (docs/tools.md, "Answers"): one line per item, names as
handles, no nulls and no ids, within the tokens a caller gives the walks, and a short sentence for
an empty result. Through the SDK's client against the suite's server, whose answers carry the
complete record as structured content beside the concise text.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from app.auth.principal import ADMIN, READ, WRITE
from tests.support.client import error_code, in_order, ok, relate, text, upsert
from tests.support.server import Server

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
ALL = (READ, WRITE, ADMIN)

SCIENCE = {"area": "science"}
PEOPLE = [
    ("Ada Lovelace", "person", "mathematics", "English mathematician who wrote the first published algorithm."),
    ("Charles Babbage", "person", "engineering", "Inventor of the Difference Engine and the Analytical Engine."),
    ("Charles Babage", "person", "engineering", "Mathematician who designed mechanical computing engines."),
    ("Luigi Menabrea", "person", None, "Italian engineer who wrote on the Analytical Engine; later prime minister."),
    ("Mary Somerville", "person", "astronomy", "Scottish scientist who introduced Ada to Babbage."),
    ("Augustus De Morgan", "person", "mathematics", "Logician who tutored Ada in mathematics."),
    ("Lord Byron", "person", None, "Romantic poet; Ada's father."),
    ("Anne Isabella Milbanke", "person", "mathematics", "Ada's mother, called the princess of parallelograms."),
    ("Analytical Engine", "machine", "engineering", "A proposed mechanical general-purpose computer."),
    ("Difference Engine", "machine", "engineering", "A mechanical calculator for polynomial tables."),
    ("Jacquard loom", "machine", "engineering", "A loom driven by chains of punched cards."),
    ("Punched cards", "concept", "engineering", "Cards whose holes encode instructions or data."),
    ("Note G", "document", "mathematics", "Ada's note with an algorithm for Bernoulli numbers."),
    ("Bernoulli numbers", "concept", "mathematics", "A sequence of rational numbers from number theory."),
    ("Royal Society", "organisation", None, "The United Kingdom's national academy of sciences."),
    ("University of London", "organisation", None, "A federal university founded in 1836."),
]
LINKS = [
    ("Ada Lovelace", "wrote", "Note G", {"notes": "published in 1843", "strength": 1.0}),
    ("Note G", "computes", "Bernoulli numbers", {}),
    ("Ada Lovelace", "collaborated with", "Charles Babbage", {"notes": "corresponded from 1833", "strength": 0.9}),
    ("Ada Lovelace", "translated", "Luigi Menabrea", {}),
    ("Mary Somerville", "introduced", "Ada Lovelace", {}),
    ("Augustus De Morgan", "tutored", "Ada Lovelace", {}),
    ("Lord Byron", "is father of", "Ada Lovelace", {}),
    ("Anne Isabella Milbanke", "is mother of", "Ada Lovelace", {}),
    ("Charles Babbage", "designed", "Analytical Engine", {}),
    ("Charles Babbage", "designed", "Difference Engine", {}),
    ("Charles Babage", "designed", "Analytical Engine", {}),
    ("Analytical Engine", "depends on", "Punched cards", {}),
    ("Punched cards", "depends on", "Jacquard loom", {}),
    ("Luigi Menabrea", "wrote about", "Analytical Engine", {}),
    ("Augustus De Morgan", "taught at", "University of London", {}),
    ("Charles Babbage", "member of", "Royal Society", {}),
    ("Charles Babage", "member of", "Royal Society", {}),
    ("Mary Somerville", "member of", "Royal Society", {}),
]


async def _seed(c: Any) -> None:
    entities = [
        {
            "name": name,
            "type": kind,
            "description": about,
            **({"area": "science", "topic": topic} if topic else {}),
            **({"certainty": 90, "observations": ["born 1815 in London"]} if name == "Ada Lovelace" else {}),
        }
        for name, kind, topic, about in PEOPLE
    ]
    await upsert(c, entities)
    relations = [{"from": a, "type": t, "to": b, "source": "biography", **x} for a, t, b, x in LINKS]
    await relate(c, relations)


@pytest.fixture(scope="module")
async def seeded(server: Server) -> str:
    """A tenant holding the graph above, read (never written) by the tests that take it."""
    tenant = f"test-graph-{uuid.uuid4().hex[:12]}"
    async with server.client(tenant) as c:
        await _seed(c)
    return tenant


def _compact(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _compact(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_compact(v) for v in value]
    return value


def _full_bytes(record: dict[str, Any]) -> int:
    """The bytes of `detail="full"`: the complete record as compact JSON, nulls left out."""
    return len(json.dumps(_compact(record), ensure_ascii=False, separators=(",", ":")).encode())


def _tree(nodes: list[dict[str, Any]]) -> list[str]:
    return [name for n in nodes for name in ([n["name"]] if n["name"] else []) + _tree(n["children"])]


Items = Callable[[dict[str, Any]], list[str]]
QUERY = "MATCH (a:Entity)-[r:REL]->(b:Entity) RETURN a, r, b ORDER BY a.name, r.type, b.name"
READS: list[tuple[str, dict[str, Any], Items]] = [
    (
        "neighbors",
        {"entity": "Ada Lovelace", "depth": 2},
        lambda r: [n["entity"]["name"] for n in r["neighbors"]],
    ),
    (
        "shortest_path",
        {"from": "Lord Byron", "to": "Jacquard loom"},
        lambda r: [
            x
            for n, rel in zip(r["nodes"], [*r["relations"], None], strict=True)
            for x in (n["name"], rel and rel["type"])
            if x
        ],
    ),
    (
        "relation_chain",
        {"entity": "Analytical Engine", "relation_type": "depends on"},
        lambda r: [n["entity"]["name"] for n in r["neighbors"]],
    ),
    (
        "subgraph",
        {"entities": ["Ada Lovelace", "Charles Babbage"]},
        lambda r: [e["name"] for e in r["entities"]] + [f"{x['from']} {x['type']} {x['to']}" for x in r["relations"]],
    ),
    ("hierarchy", {}, lambda r: _tree(r["areas"])),
    (
        "graph_stats",
        {},
        lambda r: [x["name"] for k in ("entity_types", "relation_types", "most_connected") for x in r[k]],
    ),
    ("server_status", {}, lambda r: [r["version"], f"{len(r['tools'])} tools usable"]),
    (
        "query_graph",
        {"query": QUERY},
        lambda r: [
            v
            for a, rel, b in r["rows"]
            for v in (a["properties"]["name"], rel["properties"]["type"], b["properties"]["name"])
        ],
    ),
    ("find_duplicates", {}, lambda r: [n for p in r["pairs"] for n in (p["a"]["name"], p["b"]["name"])]),
    ("audit_log", {}, lambda r: [e["tool"] for e in r["entries"]]),
]


@pytest.mark.parametrize(("tool", "args", "items"), READS, ids=[r[0] for r in READS])
async def test_concise_names_the_records_items_in_order_in_a_third_of_the_bytes(server, seeded, tool, args, items):
    async with server.client(seeded, ALL) as c:
        result = await c.call_tool(tool, args)
        record = ok(result)
        full = ok(await c.call_tool(tool, {**args, "detail": "full"}))
    answer = text(result)
    shown = items(record)
    assert shown, record
    in_order(answer, shown)
    assert "null" not in answer and not UUID.search(answer), answer
    assert _compact(full) == _compact(record)  # with output schemas, the record is structured either way
    assert 3 * len(answer.encode()) <= _full_bytes(record), (len(answer.encode()), _full_bytes(record), answer)


async def test_walks_and_paths_read_as_arrows_under_the_entity_they_start_from(server, seeded):
    async with server.client(seeded) as c:
        near = text(await c.call_tool("neighbors", {"entity": "Ada Lovelace", "depth": 1}))
        path = text(await c.call_tool("shortest_path", {"from": "Lord Byron", "to": "Difference Engine"}))
        chain = text(
            await c.call_tool("relation_chain", {"entity": "Analytical Engine", "relation_type": "depends on"})
        )
        machines = "MATCH (n:Entity) WHERE n.type = 'machine' RETURN n.name, n.type ORDER BY n.name"
        rows = text(await c.call_tool("query_graph", {"query": machines}))
    assert near.startswith("Ada Lovelace:\n  ") and near.count(":\n") == 1  # one heading: all start there
    assert "\n  -wrote (published in 1843; strength 1)→ Note G (document; science/mathematics): Ada's note" in near
    assert "\n  ←is father of- Lord Byron (person): Romantic poet; Ada's father." in near
    assert path == (
        "Lord Byron -is father of→ Ada Lovelace -collaborated with (corresponded from 1833; strength 0.9)→"
        " Charles Babbage -designed→ Difference Engine"
    )
    assert chain.splitlines() == [
        "Analytical Engine:",
        "  -depends on→ Punched cards (concept; science/engineering): Cards whose holes encode instructions or data.",
        "Punched cards:",
        "  -depends on→ Jacquard loom (machine; science/engineering): A loom driven by chains of punched cards.",
    ]
    assert rows.splitlines() == [
        "n.name | n.type",
        "Analytical Engine | machine",
        "Difference Engine | machine",
        "Jacquard loom | machine",
    ]


async def test_an_empty_result_says_so_in_a_sentence(server, tenant):
    async with server.client(tenant, ALL) as c:
        empty = [
            text(await c.call_tool("hierarchy", {})),
            text(await c.call_tool("graph_stats", {})),
            text(await c.call_tool("query_graph", {"query": "MATCH (n:Entity) RETURN n"})),
            text(await c.call_tool("find_duplicates", {})),
            text(await c.call_tool("audit_log", {})),
        ]
        await upsert(c, [{"name": "Ada", "type": "p"}, {"name": "Bo", "type": "p"}])
        alone = [
            text(await c.call_tool("neighbors", {"entity": "Ada"})),
            text(await c.call_tool("relation_chain", {"entity": "Ada", "relation_type": "knows"})),
            text(await c.call_tool("shortest_path", {"from": "Ada", "to": "Bo"})),
            text(await c.call_tool("subgraph", {"entities": ["Ada", "Bo"]})),
        ]
    assert empty == [
        "No entities.",
        "The memory is empty.",
        "No rows.",
        "No likely duplicates among the 0 entities scanned.",
        "No calls recorded.",
    ]
    assert alone == [
        "Ada: no neighbours found.",
        "Ada: no neighbours found.",
        "No path within max_depth relations; a larger max_depth (up to 10) may find one.",
        "Ada (p)\nBo (p)\nNo relations among them.",
    ]


async def test_writes_answer_what_changed_in_a_line_or_two(server, tenant):
    async with server.client(tenant, ALL) as c:
        await _seed(c)
        added = await c.call_tool(
            "add_aliases", {"name": "Ada Lovelace", "aliases": ["Ada King", "Countess of Lovelace"]}
        )
        again = await c.call_tool("add_aliases", {"name": "Ada Lovelace", "aliases": ["Ada King"]})
        removed = await c.call_tool("remove_aliases", {"name": "Ada Lovelace", "aliases": ["Ada King", "Ada B."]})
        merged = await c.call_tool("merge_entities", {"into": "Charles Babbage", "merge": ["Charles Babage"]})
    assert (
        text(added)
        == "Ada Lovelace v2: Added Ada King, Countess of Lovelace. Aliases now: Ada King, Countess of Lovelace."
    )
    assert ok(added)["changed"] == ["Ada King", "Countess of Lovelace"]
    assert (
        text(again)
        == "Ada Lovelace v2: Added none; already held: Ada King. Aliases now: Ada King, Countess of Lovelace."
    )
    assert text(removed) == "Ada Lovelace v3: Removed Ada King; not held: Ada B.. Aliases now: Countess of Lovelace."
    record, answer = ok(merged), text(merged)
    assert answer.startswith(f"Merged Charles Babage into Charles Babbage v{record['entity']['version']}: ")
    assert f"{record['relations_folded']} relations folded into copies" in answer and record["relations_folded"]
    assert answer.splitlines()[1] == "New aliases: Charles Babage." and answer.count("\n") <= 2
    for answer in map(text, (added, again, removed, merged)):
        assert "null" not in answer and not UUID.search(answer)


# --- the budget ----------------------------------------------------------------------------------------

HUB = "記憶の中心 🧠"
SPOKES = 500


@pytest.fixture(scope="module")
async def hub(server: Server) -> str:
    """A tenant whose hub has a 4,000-character description and 500 neighbours with non-Latin names,
    one of them with a 4,000-character description too, each relation with notes."""
    tenant = f"test-hub-{uuid.uuid4().hex[:12]}"
    long = ("記憶と知識 " * 700)[:4000]
    async with server.client(tenant) as c:
        names = [f"ノード {i:03} Ωμέγα" for i in range(SPOKES)]
        await upsert(c, [{"name": HUB, "type": "中心", "description": long}])
        for i in range(0, SPOKES, 100):
            entities = [
                {"name": n, "type": "節点", "description": long if n == names[0] else f"第{i}群の節点です"}
                for n in names[i : i + 100]
            ]
            await upsert(c, entities)
            relations = [
                {"from": HUB, "to": n, "type": "つながる", "notes": "関係の説明 " * 30} for n in names[i : i + 100]
            ]
            await relate(c, relations)
    return tenant


WALKS = [
    ("neighbors", {"entity": HUB, "depth": 2, "limit": 200}, "neighbors"),
    ("subgraph", {"entities": [HUB], "depth": 1, "max_nodes": 500, "max_relations": 2000}, "entities"),
]


@pytest.mark.parametrize(("tool", "args", "listed"), WALKS, ids=[w[0] for w in WALKS])
async def test_the_budget_holds_for_any_data(server, hub, tool, args, listed):
    async with server.client(hub) as c:
        whole = ok(await c.call_tool(tool, {**args, "max_tokens": 20_000, "detail": "full"}))
        found = len(whole[listed]) + whole["omitted"] + len(whole.get("relations", []))
        for max_tokens in (200, 300, 2000):
            for detail in ("concise", "full"):
                result = await c.call_tool(tool, {**args, "max_tokens": max_tokens, "detail": detail})
                answer, record = text(result), ok(result)
                assert len(answer.encode()) <= 4 * max_tokens, (max_tokens, detail, len(answer.encode()))
                if detail == "full":
                    assert _full_bytes(record) <= 4 * max_tokens, (
                        max_tokens,
                        _full_bytes(record),
                        json.dumps(_compact(record), ensure_ascii=False),
                    )
                # What was left out is counted, and the answer says how to get it.
                assert len(record[listed]) + record["omitted"] + len(record.get("relations", [])) == found
                assert record["omitted"] > 0
                assert re.search(r"… \d+ more \S.* \(raise max_tokens to see them, or narrow ", answer), answer
                assert "null" not in answer and not UUID.search(answer)
        concise = text(await c.call_tool(tool, {**args, "max_tokens": 2000}))
    assert "…[+" in concise  # the long description, shortened visibly
    assert concise.count("\n") > 10


BAD_ARGUMENTS = [
    *({"detail": bad} for bad in ("bogus", "FULL", "", None, 1, ["full"])),
    *({"max_tokens": bad} for bad in (199, 20_001, 2**64, 1.5, "lots", None)),
]


async def test_bad_detail_and_max_tokens_are_invalid(server, seeded):
    calls = [(tool, args) for tool, args, _ in READS] + [(tool, args) for tool, args, _ in WALKS]
    async with server.client(seeded, ALL) as c:
        for tool, args in calls:
            for bad in BAD_ARGUMENTS:
                if "max_tokens" in bad and tool not in ("neighbors", "subgraph"):
                    bad = {"max_tokens": 2000}  # an argument the tool does not take
                assert error_code(await c.call_tool(tool, {**args, **bad})) == "invalid", (tool, bad)
