"""`python -m bench.context`: what an answer costs a model, and how much of the evidence it carries.

Through the real server, on the data of `bench.recall` (the conversational-memory development set,
read in place, and the benchmark's own relevance set), stored the same two ways (facts; episodes):

- **sizes**: bytes and tokens (bytes/4) of every native read tool's answer text — concise (the
  default), concise with room for every item (`max_tokens` 20,000: the same items as the full
  record), `detail="full"` (compact JSON), and before (the record pretty-printed, nulls and all, as
  answers were before the concise form);
- **evidence within a budget**: for every question, `recall` with `max_tokens` of 250, 500, 1,000
  and 2,000 (limit 50): the share of the question's evidence turn ids found in the answer's text;
  beside it, in the same run, plain baselines over the same texts written the same way (one line
  per memory: its speaker, text, date and source) until the same number of bytes: exact cosine
  with the server's model, BM25 and their reciprocal-rank fusion, top first;
- **latency**: `recall` at limit 10 and at a 1,000-token budget (limit 50) over HTTP on the largest
  tenant (with `--facts N`, a tenant of N generated facts), beside the bare SDK's trivial tool.

    python -m bench.context [--conversations N] [--facts N] [--results FILE]
    python -m bench.context --quick   # the relevance set and one conversation, a few questions
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
import orjson

from bench import env
from bench.recall import (
    CATEGORIES,
    Baselines,
    Conversation,
    Memory,
    Question,
    conversations,
    describe,
    embedder,
    floor,
    full_name,
    models,
    settled,
    stems_of,
    store_episodes,
    store_facts,
)
from bench.stats import Latency
from tests.support.client import ok
from tests.support.server import serve

BUDGETS = (250, 500, 1000, 2000)
ROOMY = 20_000


def found(text: str, evidence: tuple[str, ...]) -> float:
    """The share of `evidence` ids written in `text` (as a whole id: D1:3 is not D1:30)."""
    hit = sum(1 for e in evidence if re.search(rf"(?<![\w:]){re.escape(e)}(?![\w:])", text))
    return hit / len(evidence)


def line(memory: Memory, layout: str, at: str, speaker: str) -> str:
    """A baseline's memory as Engram writes a line of the same kind."""
    day = at[:10]
    ids = ",".join(memory.ids)
    if layout == "episodes":
        return f"#{ids} {day} {at[11:16]} {memory.text} ({ids})\n"
    return f"{speaker}: {memory.text} ({day}, {ids})\n"


def within(lines: list[str], budget: int) -> str:
    """The first lines that fit `budget` tokens (bytes/4), whole."""
    out, size = [], 0
    for text in lines:
        size += len(text.encode())
        if size > budget * 4:
            break
        out.append(text)
    return "".join(out)


class Tally:
    def __init__(self) -> None:
        self.by: dict[tuple[str, str, int], list[float]] = defaultdict(list)  # (system, category, budget)

    def add(self, system: str, category: str, budget: int, value: float) -> None:
        self.by[(system, category, budget)].append(value)
        self.by[(system, "all", budget)].append(value)

    def table(self) -> dict[str, dict[str, dict[str, float]]]:
        out: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
        for (system, category, budget), values in self.by.items():
            out[system].setdefault(category, {})[str(budget)] = round(statistics.fmean(values), 3)
            out[system][category]["n"] = len(values)
        return out


async def evidence(
    client: Any, layout: str, c: Conversation, memories: list[Memory], meta: list[tuple[str, str]], model: Any,
    conn: Any, tally: Tally,
) -> None:  # fmt: skip
    """Every question through `recall` within each budget, and through the baselines written as lines."""
    texts = [m.text for m in memories]
    vectors = np.array(await model.embed(texts), dtype=np.float32)
    base = Baselines(vectors / np.linalg.norm(vectors, axis=1, keepdims=True), await stems_of(conn, texts))
    q_vectors = np.array(await model.embed_queries([q.text for q in c.questions]), dtype=np.float32)
    q_stems = await stems_of(conn, [q.text for q in c.questions])
    written = [line(m, layout, *meta[i]) for i, m in enumerate(memories)]
    for q, qv, qs in zip(c.questions, q_vectors, q_stems, strict=True):
        cat = CATEGORIES[q.category]
        for budget in BUDGETS:
            r = await client.call_tool("recall", {"query": q.text, "limit": 50, "max_tokens": budget})
            answer = r.content[0].text
            assert len(answer.encode()) <= budget * 4, (budget, len(answer.encode()))
            tally.add(f"{layout}: engram recall", cat, budget, found(answer, q.evidence))
        cos = base.cosine(qv / np.linalg.norm(qv))
        bm = base.bm25(qs)
        for name, order in (("exact cosine", cos), ("BM25", bm), ("cosine+BM25 RRF", base.fused(cos, bm))):
            lines = [written[i] for i in order[:200]]
            for budget in BUDGETS:
                tally.add(f"{layout}: {name} as lines", cat, budget, found(within(lines, budget), q.evidence))


def _meta(c: Conversation, layout: str) -> list[tuple[str, str]]:
    """Each stored memory's time and speaker, in the order store_facts / store_episodes return them."""
    if layout == "episodes":
        return [(at, who) for who, _, _, at in c.turns]
    out = [(at, speaker) for speaker, facts in c.facts.items() for _, _, at in facts]
    return out + [("2024-03-01T12:00:00+00:00", a) for a, _, _, _ in c.relations]


# --- sizes of every read tool's answer ------------------------------------------------------------------


def _calls(c: Conversation, layout: str) -> list[tuple[str, dict[str, Any]]]:
    people = sorted(c.facts) or sorted({t[0] for t in c.turns})
    first, other = people[0], people[-1]
    q = c.questions[0].text if c.questions else "what happened?"
    calls: list[tuple[str, dict[str, Any]]] = [
        ("recall", {"query": q}),
        ("search", {"query": q}),
        ("get_entity", {"name": first}),
        ("find_entities", {}),
        ("entity_history", {"name": first, "limit": 10}),
        ("neighbors", {"entity": first}),
        ("shortest_path", {"from": first, "to": other}),
        ("subgraph", {"entities": [first, other]}),
        ("hierarchy", {}),
        ("graph_stats", {}),
        ("query_graph", {"query": "MATCH (n:Entity) RETURN n.name, n.type LIMIT 20"}),
        ("find_duplicates", {}),
    ]
    if c.relations:
        calls.append(("relation_chain", {"entity": c.relations[0][0], "relation_type": c.relations[0][1]}))
    if layout == "episodes":
        calls.append(("list_episodes", {"limit": 10}))
    return calls


async def sizes(records: Any, plain: Any, name: str, c: Conversation, layout: str) -> list[dict[str, Any]]:
    """Each read tool's answer four ways: concise, concise with room, full, before."""
    out = []
    for tool, args in _calls(c, layout):
        record = await records.call_tool(tool, args)
        if record.is_error:
            out.append({"tenant": name, "tool": tool, "error": record.content[0].text[:200]})
            continue
        before = json.dumps(ok(record), indent=2, ensure_ascii=False)
        concise = (await plain.call_tool(tool, args)).content[0].text
        roomy_args = {**args, "max_tokens": ROOMY} if _budgeted(tool) else args
        roomy = (await plain.call_tool(tool, roomy_args)).content[0].text
        full = (await plain.call_tool(tool, {**roomy_args, "detail": "full"})).content[0].text
        row: dict[str, Any] = {"tenant": name, "tool": tool}
        for what, text in (("concise", concise), ("concise_roomy", roomy), ("full", full), ("before", before)):
            row[what] = len(text.encode())
        row["before_over_roomy"] = round(row["before"] / max(row["concise_roomy"], 1), 1)
        out.append(row)
    return out


def _budgeted(tool: str) -> bool:
    return tool in ("recall", "search", "get_entity", "list_episodes", "neighbors", "subgraph")


# --- latency --------------------------------------------------------------------------------------------


async def generated(client: Any, n: int) -> list[Question]:
    """A tenant of `n` facts over 100 people, and questions about some of them."""
    topics = ["harbour", "violin", "glacier", "bakery", "satellite", "orchard", "lantern", "compass", "tundra"]
    people = [f"Person {i:03d}" for i in range(100)]
    ok(await client.call_tool("upsert_entities", {"entities": [{"name": p, "type": "person"} for p in people]}))
    items = [
        {"entity": people[i % 100], "observations": [f"{people[i % 100]} talked about the {topics[i % 9]} on day {i}"]}
        for i in range(n)
    ]
    for i in range(0, n, 100):
        ok(await client.call_tool("append_observations", {"items": items[i : i + 100]}))
    await settled(client, seconds=3600)
    return [Question(f"What did {people[i]} say about the {topics[i % 9]}?", (), 4) for i in range(0, 100, 5)]


async def latency(client: Any, questions: list[Question], rounds: int, args: dict[str, Any]) -> Latency:
    samples = []
    for _ in range(rounds):
        for q in questions:
            started = time.perf_counter_ns()
            result = await client.call_tool("recall", {"query": q.text, **args})
            samples.append(time.perf_counter_ns() - started)
            assert not result.is_error, result.content
    return Latency.of(samples)


# --- the run --------------------------------------------------------------------------------------------


async def main(args: argparse.Namespace) -> dict[str, Any]:
    s = env.settings()
    name = env.scratch_name("context") if args.quick else full_name("context")
    s = await env.fresh_database(s, name)
    convs, skipped = conversations(args, 6)
    provider = await embedder(s)
    tally = Tally()
    size_rows: list[dict[str, Any]] = []
    lat: dict[str, Any] = {}
    conn = await asyncpg.connect(s.admin_dsn())
    try:
        with serve(s) as records_server, serve(s, ENGRAM_TOOL_OUTPUT_SCHEMAS="false") as plain_server:
            for c in convs:
                for layout in ("facts", "episodes"):
                    if layout == "episodes" and not c.turns:
                        continue
                    tenant = f"context-{c.name}-{layout}"
                    async with records_server.client(tenant) as records, plain_server.client(tenant) as plain:
                        memories = await (store_facts if layout == "facts" else store_episodes)(records, c)
                        await settled(records)
                        print(f"{c.name}/{layout}: {len(memories)} texts, {len(c.questions)} questions ...", flush=True)
                        size_rows += await sizes(records, plain, f"{c.name}/{layout}", c, layout)
                        meta = _meta(c, layout)
                        await evidence(plain, layout, c, memories, meta, provider, conn, tally)
            if args.facts:
                print(f"writing {args.facts} facts ...", flush=True)
                async with records_server.client("context-latency") as records:
                    questions = await generated(records, args.facts)
                tenant, where = "context-latency", f"{args.facts} generated facts"
            else:
                biggest = max(convs, key=lambda c: sum(len(f) for f in c.facts.values()))
                questions = biggest.questions
                tenant, where = f"context-{biggest.name}-facts", f"{biggest.name} facts"
            rounds = 1 if args.quick else 3
            async with plain_server.client(tenant) as p:
                await p.call_tool("recall", {"query": "warm up"})
                lat[f"recall limit 10 ({where})"] = (await latency(p, questions, rounds, {"limit": 10})).as_dict()
                budgeted = await latency(p, questions, rounds, {"limit": 50, "max_tokens": 1000})
                lat[f"recall max_tokens 1000, limit 50 ({where})"] = budgeted.as_dict()
        lat["bare MCPServer trivial tool"] = (await floor(questions, rounds)).as_dict()
    finally:
        await conn.close()
        await provider.close()
    return {
        "machine": {**env.machine(), "quick": args.quick, "load_average_after": os.getloadavg()},
        "models": models(s, provider),
        "data": {"conversations": [c.name for c in convs], "skipped": skipped},
        "sizes": size_rows,
        "evidence": tally.table(),
        "latency": lat,
    }


def render(r: dict[str, Any]) -> str:
    lines = [f"## Context ({r['machine'].get('date', '')}, {'quick' if r['machine']['quick'] else 'full'} run)", ""]
    if r["data"]["skipped"]:
        lines.append(f"Skipped: {r['data']['skipped']}.\n")
    lines.append(f"Conversations: {', '.join(r['data']['conversations'])}.\n")
    lines.append(f"Models: {describe(r['models'])}.\n")
    lines.append("| evidence recall within a budget (tokens) | " + " | ".join(str(b) for b in BUDGETS) + " | n |")
    lines.append("|---" * (len(BUDGETS) + 2) + "|")
    for system, by_cat in sorted(r["evidence"].items()):
        a = by_cat["all"]
        lines.append(f"| {system} | " + " | ".join(f"{a[str(b)]:.3f}" for b in BUDGETS) + f" | {a['n']} |")
    lines.append("")
    cats = list(CATEGORIES.values())
    lines.append("| at 1,000 tokens, by category | " + " | ".join(cats) + " |")
    lines.append("|---" * (len(cats) + 1) + "|")
    for system, by_cat in sorted(r["evidence"].items()):
        row = [f"{by_cat[c]['1000']:.3f} ({by_cat[c]['n']})" if c in by_cat else "-" for c in cats]
        lines.append(f"| {system} | " + " | ".join(row) + " |")
    lines.append("")
    lines.append(
        "| answer bytes | tool | concise (default) | concise, every item | full (JSON) | before | before ÷ every item |"
    )
    lines.append("|---|---|---|---|---|---|---|")
    for x in r["sizes"]:
        if "error" in x:
            lines.append(f"| {x['tenant']} | {x['tool']} | error: {x['error']} | | | | |")
            continue
        lines.append(
            f"| {x['tenant']} | {x['tool']} | {x['concise']} | {x['concise_roomy']} | {x['full']} | {x['before']} "
            f"| {x['before_over_roomy']}x |"
        )
    lines.append("")
    lines.append("| latency over HTTP | n | p50 ms | p95 ms |")
    lines.append("|---|---|---|---|")
    for what, lat in r["latency"].items():
        lines.append(f"| {what} | {lat['n']} | {lat['p50']:.1f} | {lat['p95']:.1f} |")
    return "\n".join(lines)


def cli() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.context", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="the relevance set and one conversation, a few questions")
    parser.add_argument("--conversations", type=int, default=4, help="conversations of the development set to use")
    parser.add_argument("--facts", type=int, default=0, help="time recall on a tenant of this many generated facts")
    parser.add_argument("--results", type=Path, help="where to keep the raw figures (JSON)")
    args = parser.parse_args()
    started = time.monotonic()
    results = asyncio.run(main(args))
    results["seconds"] = round(time.monotonic() - started, 1)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = args.results or env.bench_dir() / ("context-quick.json" if args.quick else f"context-{stamp}.json")
    path.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    print(render(results))
    print(f"\nraw figures: {path}")
    if not results["evidence"] or not results["sizes"]:
        print("FAILED no figures", file=sys.stderr)
        sys.exit(1)
    print(f"{'quick run' if args.quick else 'run'} took {results['seconds']:.0f} s")


if __name__ == "__main__":
    cli()
