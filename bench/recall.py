"""`python -m bench.recall`: does memory give back what it was told? Recall@k through the real server.

Data: the conversational-memory development set in ../shared/data/conversational-memory/ (LoCoMo,
read in place, never copied; skipped, saying so, when absent) and a small relevance set of this
module's own (`OWN`: relations, neighbours, several facts per entity). Each conversation is stored
twice, in a tenant of its own each, the way an assistant writes memory over MCP:

- facts: each speaker an entity, the facts extracted from each session its observations, with the
  evidence turn id(s) as `source` and the session's date as `valid_from`;
- episodes: every raw turn an episode (`at` = the session's date, `source` = the turn id, the
  speaker as `speakers`).

Each question (categories 1-4; 5 has no answer) is asked through `recall` (limit 50) and, for facts,
through `search` (limit 50: one best text per entity); recall@k is the share of the question's
evidence turn ids among the sources of the first k memories returned, hit@k whether any is. Plain
baselines over the very same texts in the same run: exact cosine with the server's embedding model,
BM25 (k1 1.2, b 0.75, the same English stemming as PostgreSQL's via its own `to_tsvector`), and
their reciprocal-rank fusion (k 60). Latency: `recall` at limit 10 over HTTP, p50/p95, beside the
bare SDK's trivial tool over HTTP in the same run (the floor).

    python -m bench.recall [--conversations N] [--results FILE]
    python -m bench.recall --quick   # one conversation, a few questions, a scratch database: checks it runs
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
import orjson

from app.embeddings.factory import create_provider
from bench import env, procs
from bench.stats import Latency
from tests.support.client import connect, ok
from tests.support.server import free_port, serve

# The development set, beside the checkout (ENGRAM_DEV_SET names it elsewhere: a worktree's checkout).
DEV_SET = env.ROOT.parent / "shared" / "data" / "conversational-memory" / "locomo-dev.json"
DATA = Path(os.environ.get("ENGRAM_DEV_SET") or DEV_SET)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "inference", 4: "single-hop"}
KS = (1, 5, 10, 50)
LIMIT = 50
BATCH = 100
EPISODE_BATCH = 50  # turns per add_episodes call: what a write can embed within its deadline on a busy machine
RRF_K = 60
ROOM = 20_000  # max_tokens: room for every fact of a page, so recall@50 measures the ranking, not the budget


@dataclass
class Memory:
    """One stored text and the evidence ids it carries."""

    text: str
    ids: tuple[str, ...]


@dataclass
class Question:
    text: str
    evidence: tuple[str, ...]
    category: int


@dataclass
class Conversation:
    name: str
    speakers: tuple[str, str]
    facts: dict[str, list[tuple[str, tuple[str, ...], str]]] = field(default_factory=dict)  # speaker -> (fact, ids, at)
    turns: list[tuple[str, str, str, str]] = field(default_factory=list)  # (speaker, id, text, at)
    relations: list[tuple[str, str, str, str]] = field(default_factory=list)  # (from, type, to, id)
    questions: list[Question] = field(default_factory=list)


# --- data ---------------------------------------------------------------------------------------------


def _when(text: str) -> str:
    """LoCoMo's "1:56 pm on 8 May, 2023" as an ISO time (UTC)."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC).isoformat()


def _ids(value: Any) -> tuple[str, ...]:
    items = value if isinstance(value, list) else [value]
    return tuple(i.strip() for item in items for i in str(item).replace(";", ",").split(",") if i.strip())


def locomo(path: Path) -> list[Conversation]:
    out = []
    for sample in orjson.loads(path.read_bytes()):
        conv = sample["conversation"]
        c = Conversation(sample["sample_id"], (conv["speaker_a"], conv["speaker_b"]))
        sessions = sorted(int(k.split("_")[1]) for k in conv if k.startswith("session_") and k.endswith("date_time"))
        for n in sessions:
            at = _when(conv[f"session_{n}_date_time"])
            for turn in conv.get(f"session_{n}", []):
                text = turn["text"] + (f" [shares {turn['blip_caption']}]" if turn.get("blip_caption") else "")
                c.turns.append((turn["speaker"], turn["dia_id"], text, at))
            for speaker, facts in (sample["observation"].get(f"session_{n}_observation") or {}).items():
                for fact, ids in facts:
                    c.facts.setdefault(speaker, []).append((fact, _ids(ids), at))
        for q in sample["qa"]:
            if q.get("category") in CATEGORIES and q.get("evidence"):
                c.questions.append(Question(q["question"], _ids(q["evidence"]), q["category"]))
        out.append(c)
    return out


def own() -> Conversation:
    """A relevance set of our own: facts spread over many entities, relations that answer questions, a
    fact reached only through a neighbour, several facts of one entity answering one question."""
    at = "2024-03-01T12:00:00+00:00"
    people = {
        "Ada": [
            "Ada plays the cello in a string quartet",
            "Ada grows tomatoes on her balcony",
            "Ada speaks Portuguese because her mother is from Lisbon",
            "Ada runs ten kilometres every Saturday",
            "Ada is allergic to peanuts",
            "Ada plays chess at the club on Tuesdays",
        ],
        "Babbage Labs": [
            "Babbage Labs builds difference engines for banks",
            "Babbage Labs has 40 employees",
            "Babbage Labs moved its office to Manchester in 2023",
        ],
        "Grace": ["Grace writes compilers", "Grace keeps bees in her garden", "Grace once lived in Tokyo"],
        "Tomás": ["Tomás teaches physics at the university", "Tomás restores old motorbikes"],
        "Lin": ["Lin is training for a marathon in October", "Lin adopted a rescue greyhound named Pixel"],
    }
    c = Conversation("own", ("Ada", "Grace"))
    n = 0
    for person, facts in people.items():
        for fact in facts:
            n += 1
            c.facts.setdefault(person, []).append((fact, (f"O{n}",), at))
    c.relations = [
        ("Ada", "works at", "Babbage Labs", "R1"),
        ("Grace", "mentors", "Ada", "R2"),
        ("Tomás", "is married to", "Lin", "R3"),
        ("Grace", "collaborates with", "Tomás", "R4"),
    ]
    ask = [
        ("Which instruments or games does Ada play?", ("O1", "O6"), 4),
        ("Where does Ada work?", ("R1",), 4),
        ("Who is Ada's mentor?", ("R2",), 4),
        ("Who is Lin's husband and what does he teach?", ("R3", "O13"), 1),
        ("Where is the office of the company Ada works for?", ("O9", "R1"), 1),
        ("Which languages does Ada speak?", ("O3",), 4),
        ("What pet does the wife of Tomás have?", ("O16", "R3"), 1),
        ("Which food must Ada avoid?", ("O5",), 3),
        ("Who keeps insects as a hobby?", ("O11",), 3),
        ("When did Babbage Labs relocate?", ("O9",), 2),
    ]
    c.questions = [Question(q, ids, cat) for q, ids, cat in ask]
    return c


# --- storing through the server -------------------------------------------------------------------------


def _ids_of_source(source: str | None) -> tuple[str, ...]:
    return _ids(source) if source else ()


def _returned(fact: dict[str, Any]) -> tuple[str, ...]:
    """The evidence a recalled fact carries: its source, and those of the facts folded into it."""
    return _ids_of_source(fact["source"]) + tuple(i for a in fact["also"] for i in _ids_of_source(a["source"]))


async def write(client: Any, tool: str, args: dict[str, Any], attempts: int = 3) -> dict[str, Any]:
    """A write as a careful client makes it: again after `unavailable` that committed nothing."""
    for attempt in range(attempts):
        result = await client.call_tool(tool, args)
        if not result.is_error or attempt == attempts - 1 or "unavailable" not in str(result.content):
            return ok(result)
        await asyncio.sleep(1)
    raise AssertionError("unreachable")


async def store_facts(client: Any, c: Conversation) -> list[Memory]:
    people = sorted({*c.facts, *(r[0] for r in c.relations), *(r[2] for r in c.relations)})
    for i in range(0, len(people), BATCH):
        ents = [{"name": p, "type": "person"} for p in people[i : i + BATCH]]
        ok(await client.call_tool("upsert_entities", {"entities": ents}))
    memories = []
    items = []
    for speaker, facts in c.facts.items():
        for fact, ids, at in facts:
            items.append({"entity": speaker, "observations": [fact], "source": ",".join(ids), "valid_from": at})
            memories.append(Memory(fact, ids))
    for i in range(0, len(items), BATCH):
        ok(await client.call_tool("append_observations", {"items": items[i : i + BATCH]}))
    if c.relations:
        rels = [{"from": a, "to": b, "type": t, "source": rid} for a, t, b, rid in c.relations]
        ok(await client.call_tool("connect_entities", {"relations": rels}))
        memories += [Memory(f"{a} {t} {b}", (rid,)) for a, t, b, rid in c.relations]
    return memories


async def store_episodes(client: Any, c: Conversation) -> list[Memory]:
    ents = [{"name": s, "type": "person"} for s in sorted({t[0] for t in c.turns})]
    ok(await client.call_tool("upsert_entities", {"entities": ents}))
    episodes = [{"text": text, "at": at, "source": tid, "speakers": [who]} for who, tid, text, at in c.turns]
    for i in range(0, len(episodes), EPISODE_BATCH):
        await write(client, "add_episodes", {"episodes": episodes[i : i + EPISODE_BATCH]})
    return [Memory(f"{who}: {text}", (tid,)) for who, tid, text, _ in c.turns]


async def settled(client: Any, seconds: float = 900) -> float:
    """Seconds until the background filler has embedded every stored text."""
    started = time.monotonic()
    while True:
        r = ok(await client.call_tool("recall", {"query": "anything at all", "limit": 1}))
        if not any("have no embedding" in n for n in r["notices"]):
            return time.monotonic() - started
        if time.monotonic() - started > seconds:
            raise RuntimeError("texts still waiting for embeddings")
        await asyncio.sleep(0.5)


# --- scoring and baselines ---------------------------------------------------------------------------------


def scores(found: Sequence[tuple[str, ...]], evidence: Sequence[str]) -> dict[str, float]:
    """recall@k and hit@k of one answer (the evidence ids of each memory returned, in order)."""
    want = set(evidence)
    out = {}
    for k in KS:
        got = {i for ids in found[:k] for i in ids} & want
        out[f"R@{k}"] = len(got) / len(want)
        out[f"hit@{k}"] = float(bool(got))
    return out


class Baselines:
    """Exact cosine (the server's model), BM25 (PostgreSQL's English stems) and their RRF fusion."""

    def __init__(self, vectors: np.ndarray, stems: list[list[str]]) -> None:
        self.vectors = vectors
        self.docs = [Counter(s) for s in stems]
        self.lengths = np.array([len(s) for s in stems], dtype=float)
        df: Counter[str] = Counter()
        for d in self.docs:
            df.update(d.keys())
        n = len(self.docs)
        self.idf = {w: math.log(1 + (n - f + 0.5) / (f + 0.5)) for w, f in df.items()}

    def cosine(self, query: np.ndarray) -> list[int]:
        return list(np.argsort(-(self.vectors @ query), kind="stable"))

    def bm25(self, stems: list[str], k1: float = 1.2, b: float = 0.75) -> list[int]:
        avg = float(self.lengths.mean()) or 1.0
        score = np.zeros(len(self.docs))
        for w in set(stems):
            if w not in self.idf:
                continue
            tf = np.array([d.get(w, 0) for d in self.docs], dtype=float)
            score += self.idf[w] * tf * (k1 + 1) / (tf + k1 * (1 - b + b * self.lengths / avg))
        order = [int(i) for i in np.argsort(-score, kind="stable") if score[i] > 0]
        return order

    @staticmethod
    def fused(*rankings: list[int]) -> list[int]:
        total: dict[int, float] = defaultdict(float)
        for ranking in rankings:
            for rank, i in enumerate(ranking, start=1):
                total[i] += 1 / (RRF_K + rank)
        return sorted(total, key=lambda i: -total[i])


async def stems_of(conn: asyncpg.Connection, texts: Sequence[str]) -> list[list[str]]:
    """Each text's lexemes with their counts, as PostgreSQL's English configuration makes them."""
    rows = await conn.fetch(
        "SELECT n, array_agg(lexeme ORDER BY lexeme) FILTER (WHERE lexeme IS NOT NULL),"
        " array_agg(cardinality(positions) ORDER BY lexeme) FILTER (WHERE lexeme IS NOT NULL)"
        " FROM unnest($1::text[]) WITH ORDINALITY AS t(body, n)"
        " LEFT JOIN LATERAL unnest(to_tsvector('english', body)) ON true GROUP BY n ORDER BY n",
        list(texts),
    )
    out = []
    for r in rows:
        words = []
        for lexeme, count in zip(r[1] or [], r[2] or [], strict=False):
            words += [lexeme] * (count or 1)
        out.append(words)
    return out


# --- the run ------------------------------------------------------------------------------------------------


class Tally:
    def __init__(self) -> None:
        self.by: dict[tuple[str, str, str], list[float]] = defaultdict(list)  # (system, category, metric)

    def add(self, system: str, category: str, s: dict[str, float]) -> None:
        for metric, value in s.items():
            self.by[(system, category, metric)].append(value)
            self.by[(system, "all", metric)].append(value)

    def table(self) -> dict[str, dict[str, dict[str, float]]]:
        out: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
        for (system, category, metric), values in self.by.items():
            out[system].setdefault(category, {})[metric] = round(statistics.fmean(values), 3)
            out[system][category]["n"] = len(values)
        return out


async def evaluate(
    client: Any, layout: str, memories: list[Memory], questions: list[Question], model: Any, conn: Any, tally: Tally
) -> list[int]:
    """Ask every question through the server and the baselines; returns recall's latencies (ns) at limit 50."""
    texts = [m.text for m in memories]
    vectors = np.array(await model.embed(texts), dtype=np.float32)
    base = Baselines(vectors / np.linalg.norm(vectors, axis=1, keepdims=True), await stems_of(conn, texts))
    q_vectors = np.array(await model.embed_queries([q.text for q in questions]), dtype=np.float32)
    q_stems = await stems_of(conn, [q.text for q in questions])
    latencies = []
    for q, qv, qs in zip(questions, q_vectors, q_stems, strict=True):
        cat = CATEGORIES[q.category]
        started = time.perf_counter_ns()
        r = ok(await client.call_tool("recall", {"query": q.text, "limit": LIMIT, "max_tokens": ROOM}))
        latencies.append(time.perf_counter_ns() - started)
        tally.add(f"{layout}: engram recall", cat, scores([_returned(f) for f in r["facts"]], q.evidence))
        if layout == "facts":
            hits = ok(await client.call_tool("search", {"query": q.text, "limit": LIMIT, "max_tokens": ROOM}))["hits"]
            found = [_ids_of_source(h["match"].get("source")) for h in hits]
            tally.add(f"{layout}: engram search (before)", cat, scores(found, q.evidence))
        cos = base.cosine(qv / np.linalg.norm(qv))
        bm = base.bm25(qs)
        for name, order in (("exact cosine", cos), ("BM25", bm), ("cosine+BM25 RRF", base.fused(cos, bm))):
            tally.add(f"{layout}: {name}", cat, scores([memories[i].ids for i in order[:LIMIT]], q.evidence))
    return latencies


async def bulk_episodes(client: Any, n: int) -> dict[str, Any]:
    """`n` made-up episodes through add_episodes in batches of 100: how fast they are written, that
    a sample is found by words at once, and how long until the filler has embedded them all."""
    topics = ["harbour", "violin", "glacier", "bakery", "satellite", "orchard", "lantern", "compass"]
    ok(await client.call_tool("upsert_entities", {"entities": [{"name": "Robin", "type": "person"}]}))
    started = time.monotonic()
    pending = 0
    for i in range(0, n, BATCH):
        batch = [
            {
                "text": f"Robin mentioned the {topics[j % len(topics)]} number {j} during standup",
                "at": datetime(2024, 1, 1, tzinfo=UTC).isoformat(),
                "source": f"bulk:{j}",
                "speakers": ["Robin"],
            }
            for j in range(i, min(i + BATCH, n))
        ]
        pending += (await write(client, "add_episodes", {"episodes": batch}))["embeddings_pending"]
    written = time.monotonic() - started
    sample = range(0, n, max(1, n // 20))
    by_words = 0
    for j in sample:
        r = ok(await client.call_tool("recall", {"query": f"number {j} {topics[j % len(topics)]}", "mode": "keyword"}))
        by_words += any(f["source"] == f"bulk:{j}" for f in r["facts"])
    embedded = await settled(client, seconds=3600)
    return {
        "episodes": n,
        "written_s": round(written, 1),
        "episodes_per_s": round(n / written, 1),
        "pending_after_writes": pending,
        "fully_embedded_after_s": round(written + embedded, 1),
        "found_by_words_at_once": f"{by_words}/{len(sample)}",
    }


async def latency(client: Any, questions: list[Question], rounds: int) -> Latency:
    samples = []
    for _ in range(rounds):
        for q in questions:
            started = time.perf_counter_ns()
            ok(await client.call_tool("recall", {"query": q.text, "limit": 10}))
            samples.append(time.perf_counter_ns() - started)
    return Latency.of(samples)


async def floor(questions: list[Question], rounds: int) -> Latency:
    """The bare SDK's trivial tool over HTTP, one call per question and round."""
    port = free_port()
    with procs.serve(procs.python("-m", "bench.floors", "mcp", str(port)), port):
        async with connect(f"http://127.0.0.1:{port}/mcp", None) as c:
            for _ in range(3):
                await c.call_tool("ping", {"text": "warm"})
            samples = []
            for _ in range(rounds):
                for q in questions:
                    started = time.perf_counter_ns()
                    await c.call_tool("ping", {"text": q.text})
                    samples.append(time.perf_counter_ns() - started)
    return Latency.of(samples)


def conversations(args: argparse.Namespace, quick_questions: int) -> tuple[list[Conversation], str | None]:
    """The relevance set and the development set's conversations (`--conversations`), a few
    questions each in quick mode; and why the development set was skipped, if it was."""
    convs = [own()]
    skipped = None
    if DATA.exists():
        convs += locomo(DATA)[: args.conversations]
    else:
        skipped = f"{DATA} is absent: the conversational-memory set was not measured"
        print(f"skipped: {skipped}")
    if args.quick:
        convs = convs[:2]
        for c in convs:
            c.questions = c.questions[:quick_questions]
    return convs, skipped


def full_name(part: str) -> str:
    """A full run's database: ENGRAM_BENCH_DB (one per checkout, when several measure at once) or
    engram_bench, with `part` added."""
    return f"{os.environ.get('ENGRAM_BENCH_DB', 'engram_bench')}_{part}"


def models(s: Any, provider: Any) -> dict[str, Any]:
    """The models measured: the server's embedding model and its reranker, if any (docs/search.md)."""
    reranker = Path(s.rerank_model).name if s.rerank_model else None
    return {"embedding": provider.model, "reranker": reranker, "rerank_depth": s.rerank_depth if reranker else None}


async def embedder(s: Any) -> Any:
    """The server's embedding model, started, for the baselines."""
    provider = create_provider(s)
    if provider is None:
        raise SystemExit("an embedding provider is needed (ENGRAM_EMBEDDING_PROVIDER)")
    await provider.start()
    return provider


async def main(args: argparse.Namespace) -> dict[str, Any]:
    s = env.settings()
    name = env.scratch_name("recall") if args.quick else full_name("recall")
    s = await env.fresh_database(s, name)
    convs, skipped = conversations(args, 8)
    provider = await embedder(s)
    tally = Tally()
    loading: dict[str, Any] = {}
    recall_ns: list[int] = []
    conn = await asyncpg.connect(s.admin_dsn())
    try:
        with serve(s) as server:
            for c in convs:
                for layout in ("facts", "episodes"):
                    if layout == "episodes" and not c.turns:
                        continue
                    async with server.client(f"bench-{c.name}-{layout}") as client:
                        started = time.monotonic()
                        memories = await (store_facts if layout == "facts" else store_episodes)(client, c)
                        written = time.monotonic() - started
                        embedded = await settled(client)
                        loading[f"{c.name}/{layout}"] = {
                            "texts": len(memories),
                            "written_s": round(written, 1),
                            "embedded_after_s": round(embedded, 1),
                        }
                        print(f"{c.name}/{layout}: {len(memories)} texts, {len(c.questions)} questions ...", flush=True)
                        recall_ns += await evaluate(client, layout, memories, c.questions, provider, conn, tally)
            biggest = max(convs, key=lambda c: len(c.turns))
            async with server.client(f"bench-{biggest.name}-facts") as client:
                lat10 = await latency(client, biggest.questions, 1 if args.quick else 3)
            print(f"writing {args.episodes} episodes ...", flush=True)
            async with server.client("bench-bulk-episodes") as client:
                bulk = await bulk_episodes(client, args.episodes)
        bare = await floor(biggest.questions, 1 if args.quick else 3)
    finally:
        await conn.close()
        await provider.close()
    return {
        "machine": {**env.machine(), "quick": args.quick, "load_average_after": os.getloadavg()},
        "models": models(s, provider),
        "data": {"conversations": [c.name for c in convs], "skipped": skipped, "loading": loading},
        "quality": tally.table(),
        "latency": {
            "recall limit 10 (facts tenant)": lat10.as_dict(),
            "recall limit 50 (all tenants)": Latency.of(recall_ns).as_dict(),
            "bare MCPServer trivial tool": bare.as_dict(),
        },
        "bulk episodes": bulk,
    }


def describe(m: dict[str, Any]) -> str:
    reranker = f", reranker {m['reranker']} over the first {m['rerank_depth']}" if m.get("reranker") else ""
    return f"{m['embedding']}{reranker}"


def render(r: dict[str, Any]) -> str:
    lines = [f"## Recall ({r['machine'].get('date', '')}, {'quick' if r['machine']['quick'] else 'full'} run)", ""]
    if r["data"]["skipped"]:
        lines.append(f"Skipped: {r['data']['skipped']}.\n")
    lines.append(f"Conversations: {', '.join(r['data']['conversations'])}.\n")
    lines.append(f"Models: {describe(r['models'])}.\n")
    cats = ["all", *CATEGORIES.values()]
    lines.append(
        "| retrieval | "
        + " | ".join(f"R@{k}" for k in KS)
        + " | hit@10 | "
        + " | ".join(f"R@10 {c}" for c in cats[1:])
        + " |"
    )
    lines.append("|---" * (len(KS) + 2 + len(cats) - 1) + "|")
    for system, by_cat in sorted(r["quality"].items()):
        a = by_cat["all"]
        row = [f"{a[f'R@{k}']:.3f}" for k in KS] + [f"{a['hit@10']:.3f}"]
        row += [f"{by_cat[c]['R@10']:.3f} ({by_cat[c]['n']})" if c in by_cat else "-" for c in cats[1:]]
        lines.append(f"| {system} (n {a['n']}) | " + " | ".join(row) + " |")
    lines.append("")
    lines.append("| latency over HTTP | n | p50 ms | p95 ms |")
    lines.append("|---|---|---|---|")
    for what, lat in r["latency"].items():
        lines.append(f"| {what} | {lat['n']} | {lat['p50']:.1f} | {lat['p95']:.1f} |")
    lines.append("")
    b = r["bulk episodes"]
    lines.append(
        f"Bulk: {b['episodes']} episodes written in {b['written_s']} s ({b['episodes_per_s']}/s, "
        f"{b['pending_after_writes']} left to the filler), fully embedded after {b['fully_embedded_after_s']} s; "
        f"found by words at once: {b['found_by_words_at_once']}.\n"
    )
    lines.append("| tenant | texts | written (s) | embedded after (s) |")
    lines.append("|---|---|---|---|")
    for what, x in r["data"]["loading"].items():
        lines.append(f"| {what} | {x['texts']} | {x['written_s']} | {x['embedded_after_s']} |")
    return "\n".join(lines)


def cli() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.recall", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one conversation, a few questions, a scratch database")
    parser.add_argument("--conversations", type=int, default=4, help="conversations of the development set to use")
    parser.add_argument("--episodes", type=int, help="episodes of the bulk write (default 10,000; quick 200)")
    parser.add_argument("--results", type=Path, help="where to keep the raw figures (JSON)")
    args = parser.parse_args()
    if args.episodes is None:
        args.episodes = 200 if args.quick else 10_000
    started = time.monotonic()
    results = asyncio.run(main(args))
    results["seconds"] = round(time.monotonic() - started, 1)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = args.results or env.bench_dir() / ("recall-quick.json" if args.quick else f"recall-{stamp}.json")
    path.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    print(render(results))
    print(f"\nraw figures: {path}")
    empty = [s for s, by in results["quality"].items() if not by.get("all", {}).get("n")]
    if not results["quality"] or empty:
        print(f"FAILED no figures for {empty or 'any system'}", file=sys.stderr)
        sys.exit(1)
    print(f"{'quick run' if args.quick else 'run'} took {results['seconds']:.0f} s")


if __name__ == "__main__":
    cli()
