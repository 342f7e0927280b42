"""Every read tool's answer on a seeded tenant, recorded as text, so that a change to how answers
are printed or cut can be shown to leave them byte for byte as they were.

`calls(data)` lists the calls: each read tool of every endpoint, with several budgets, limits and
forms (`detail`), on the names and questions of the data seeded; `record` makes them and returns
each answer's text by its call. What differs from run to run however the answers are printed is
replaced by a placeholder (`normal`): ids, cursors, the times of writes made by the run, the
version. The hook briefs (/hooks/claude-code) are recorded too.

Used by tests/test_answers_same.py (the project's own data, against tests/data/answers.json) and by
`python -m bench.answers` (the benchmark tenants of `bench.context`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from app.auth.principal import ADMIN, READ, WRITE
from app.store import connect
from tests.support.client import embedded, ok, text
from tests.support.hooks import common, post
from tests.support.server import Server

BUDGETS = (200, 300, 500, 1000, 2000, 20_000)

# A tenant's own text, long and many-lined, with characters of several bytes: what a budget cuts.
LONG = " ".join(f"Part {i}: the engine's mill — «store» ✓ computes {i * i} in π-steps." for i in range(60))


@dataclass
class Data:
    """What a tenant holds, as far as the calls need to know it."""

    entities: list[str]
    questions: list[str]
    relations: list[tuple[str, str, str]] = field(default_factory=list)  # (from, type, to)
    episodes: bool = True
    project: str = "/home/dev/babbage-labs"


@dataclass(frozen=True)
class Call:
    endpoint: str
    tool: str
    args: dict[str, Any]

    @property
    def key(self) -> str:
        return f"{self.endpoint} {self.tool} {orjson.dumps(self.args, option=orjson.OPT_SORT_KEYS).decode()}"


def calls(data: Data) -> list[Call]:
    return [*_native(data), *_walks(data), *_dialects(data)]


def _native(data: Data) -> Iterator[Call]:
    def n(tool: str, **args: Any) -> Call:
        return Call("native", tool, args)

    for q in data.questions:
        for tokens in BUDGETS:
            yield n("recall", query=q, limit=50, max_tokens=tokens)
        yield n("recall", query=q, max_tokens=300, detail="full")
        yield n("recall", query=q, mode="keyword", limit=5)
        for tokens in (200, 500, 2000):
            yield n("search", query=q, limit=50, max_tokens=tokens)
        yield n("search", query=q, max_tokens=300, detail="full")
    for tokens in BUDGETS:
        yield n("list_episodes", limit=100, max_tokens=tokens)
    yield n("list_episodes", limit=3)
    yield n("list_episodes", max_tokens=300, detail="full")
    for name in data.entities:
        for tokens in BUDGETS:
            yield n("get_entity", name=name, max_tokens=tokens, include_history=True)
        yield n("get_entity", name=name, max_tokens=200, detail="full")
        yield n("get_entity", name=name, max_observations=2, observations_first="newest")
        if data.questions:
            yield n("get_entity", name=name, observations_first="relevant", query=data.questions[0], max_tokens=300)
        yield n("entity_history", name=name, limit=3)
        yield n("entity_history", name=name, detail="full")
        if data.episodes:
            yield n("list_episodes", entity=name, max_tokens=500)
    for args in ({}, {"sort": "name"}, {"sort": "name", "limit": 2}, {"name_contains": "a"}, {"detail": "full"}):
        yield n("find_entities", **args)
    for tool in ("hierarchy", "graph_stats", "server_status"):
        yield n(tool)
    yield n("find_duplicates")
    for query in ("MATCH (n:Entity) RETURN n.name, n.type ORDER BY n.name", "MATCH (n:Entity) RETURN n LIMIT 3"):
        yield n("query_graph", query=query)
        yield n("query_graph", query=query, limit=2, detail="full")


def _walks(data: Data) -> Iterator[Call]:
    def n(tool: str, **args: Any) -> Call:
        return Call("native", tool, args)

    ends = list(dict.fromkeys(x for a, _, b in data.relations for x in (a, b)))
    for name in ends:
        for tokens in BUDGETS:
            yield n("neighbors", entity=name, max_tokens=tokens)
        yield n("neighbors", entity=name, depth=1, limit=2)
        yield n("neighbors", entity=name, max_tokens=200, detail="full")
    for a, kind, b in data.relations:
        yield n("shortest_path", **{"from": a, "to": b})
        yield n("shortest_path", **{"from": b, "to": ends[-1]})
        yield n("relation_chain", entity=a, relation_type=kind)
        yield n("relation_chain", entity=b, relation_type=kind, direction="in", detail="full")
    for some in (ends[:1], ends[:3], ends):
        if some:
            for tokens in BUDGETS:
                yield n("subgraph", entities=some, max_tokens=tokens)
            yield n("subgraph", entities=some, max_nodes=2, max_relations=1)
            yield n("subgraph", entities=some, max_tokens=200, detail="full")


def _dialects(data: Data) -> Iterator[Call]:
    yield Call("memory", "read_graph", {})
    yield Call("neo4j", "read_graph", {})
    for q in [*data.questions[:2], *data.entities[:2]]:
        yield Call("memory", "search_nodes", {"query": q})
        yield Call("neo4j", "search_memories", {"query": q})
        yield Call("chatgpt", "search", {"query": q})
    for name in data.entities[:3]:
        yield Call("chatgpt", "fetch", {"id": name})
    yield Call("memory", "open_nodes", {"names": data.entities[:3]})
    yield Call("neo4j", "find_memories_by_name", {"names": data.entities[:3]})
    yield Call("native", "audit_log", {})
    yield Call("native", "audit_log", {"limit": 2, "detail": "full"})


async def seed(server: Server, tenant: str) -> Data:
    """The project's own relevance set (bench.recall.own: facts, relations) and, beside it, texts
    longer than a small budget, many-lined, of several-byte characters, an alias, a change, an ended
    relation, and a conversation's episodes; written through `server`, which must answer with
    records (output schemas listed)."""
    from bench.recall import own

    c = own()
    async with server.client(tenant) as client:
        # One write each, in order: ties (of a time, of an edge's place) fall the same way every run.
        for name, facts in c.facts.items():
            ok(await client.call_tool("upsert_entities", {"entities": [{"name": name, "type": "person"}]}))
            for fact, ids, at in facts:
                item = {"entity": name, "observations": [fact], "source": ",".join(ids), "valid_from": at}
                ok(await client.call_tool("append_observations", {"items": [item]}))
        for a, kind, b, rid in c.relations:
            ok(
                await client.call_tool(
                    "connect_entities", {"relations": [{"from": a, "to": b, "type": kind, "source": rid}]}
                )
            )
        engine = {"name": "Analytical Engine", "type": "machine", "area": "science", "topic": "computing"}
        engine |= {"description": LONG, "certainty": 80, "properties": {"year": 1837, "built": False}}
        engine |= {"observations": [LONG[:1500], "It was never finished.\nIts plans survive in London."]}
        ok(await client.call_tool("upsert_entities", {"entities": [engine]}))
        ok(await client.call_tool("update_entity", {"name": "Ada", "changes": {"description": "A mathematician."}}))
        ok(await client.call_tool("add_aliases", {"name": "Ada", "aliases": ["Countess of Lovelace"]}))
        wrote = {"from": "Ada", "to": "Analytical Engine", "type": "wrote programs for", "strength": 0.8}
        ended = {"from": "Grace", "to": "Analytical Engine", "type": "studied", "valid_until": "2024-06-01T00:00:00Z"}
        for relation in (wrote | {"notes": LONG[:600]}, ended):
            ok(await client.call_tool("connect_entities", {"relations": [relation]}))
        for episode in EPISODES:
            ok(await client.call_tool("add_episodes", {"episodes": [episode]}))
        await embedded(client)
    await analyzed(server)
    relations = [(a, kind, b) for a, kind, b, _ in c.relations] + [(wrote["from"], wrote["type"], wrote["to"])]
    return Data(
        entities=[*c.facts, "Analytical Engine"],
        questions=[q.text for q in c.questions] + ["What did Ada compute on the engine?"],
        relations=relations,
    )


async def analyzed(server: Server) -> None:
    """Planner statistics made from every row now: keyword ranking reads its common words from them,
    and autovacuum would make them at a moment of its own (or never, for a table this small)."""
    async with connect.owner(server.settings.admin_dsn()) as conn:
        await conn.execute("ANALYZE")


EPISODES = [
    {"text": "I ran a charity race last Saturday!", "speakers": ["Ada"], "at": "2023-05-20T13:56:00Z", "source": "T1"},
    {"text": "That's amazing, what was it for?", "speakers": ["Grace"], "at": "2023-05-20T13:57:00Z", "source": "T2"},
    {"text": "Mental health.\nIt felt great.", "speakers": ["Ada"], "at": "2023-05-20T13:58:00Z", "source": "T3"},
    {"text": LONG, "speakers": ["Grace"], "at": "2023-06-01T00:00:00Z", "source": "T4"},
    {"text": "We met at Babbage Labs about the engine.", "speakers": ["Ada", "Grace"], "at": "2023-06-02T09:00:00Z"},
]


async def record(server: Server, tenant: str, data: Data) -> dict[str, str]:
    """Each call's answer text (an error's too), normalised, by its call's key: one endpoint at a time."""
    out: dict[str, str] = {}
    todo = calls(data)
    for endpoint in dict.fromkeys(c.endpoint for c in todo):
        async with server.at(endpoint).client(tenant, (READ, WRITE, ADMIN)) as client:
            for call in (c for c in todo if c.endpoint == endpoint):
                result = await client.call_tool(call.tool, call.args)
                out[call.key] = normal(("error: " if result.is_error else "") + text(result))
    return out


async def briefs(server: Server, tenant: str, data: Data, prompts: list[str], first: int = 0) -> dict[str, str]:
    """The briefs the hook endpoint gives: a session's start, then a prompt each in a new session
    (sessions numbered from `first`: a session is given nothing twice)."""
    token = server.token(tenant)
    out = {}
    start = common(_session(first), "SessionStart", source="startup", cwd=data.project)
    out["hooks SessionStart"] = normal((await post(server, token, start)).text)
    for i, prompt in enumerate(prompts, start=first + 1):
        body = common(_session(i), "UserPromptSubmit", prompt=prompt, cwd=data.project)
        out[f"hooks UserPromptSubmit {prompt}"] = normal((await post(server, token, body)).text)
    return out


def _session(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


HOST = re.compile(r"127\.0\.0\.1:\d+")
SCORE = re.compile(r'("(?:semantic|keyword|fused|score|similarity)":)[0-9.e+-]+')
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
CURSOR = re.compile(r"""((?:cursor|Cursor)(?:=|": ?"|\\": ?\\"))[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+""")
# A time the run made (a write's): the seeds' own times are all before 2025.
NOW = re.compile(r"20(?:2[5-9]|[3-9]\d)-\d\d-\d\d(?:[ T]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?:Z|[+-]\d\d:\d\d)?)?")
VERSION = re.compile(r"(Engram |\"version\": ?\")\d[\w.+-]*")
TIMED = re.compile(r'("duration_ms":)[0-9.e+-]+|("request_id":")[0-9a-f]+')


def normal(answer: str) -> str:
    """`answer` with what differs from run to run as placeholders: ids numbered by first appearance."""
    ids: dict[str, str] = {}
    answer = UUID.sub(lambda m: ids.setdefault(m.group(), f"<id{len(ids) + 1}>"), answer)
    answer = CURSOR.sub(r"\1<cursor>", answer)
    answer = NOW.sub("<now>", answer)
    answer = SCORE.sub(r"\1<score>", HOST.sub("<host>", answer))
    answer = TIMED.sub(lambda m: f"{m.group(1) or m.group(2)}<run>", answer)
    return VERSION.sub(r"\1<version>", answer)
