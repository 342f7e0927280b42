"""`python -m bench.hooks`: memory in the loop, measured through `/hooks/claude-code` over HTTP.

Data: the conversational-memory development set in ../shared/data/conversational-memory/ (LoCoMo,
read in place; skipped, saying so, when absent). Each conversation is replayed into a tenant of
its own as Claude Code's hooks would post it: each of its sessions starts with SessionStart, then
each turn of the first speaker is a UserPromptSubmit (`prompt`: "Name: text") and each turn of the
second a Stop (`last_assistant_message`), so every turn is kept as an episode by the hooks alone.

Measured:
- replay: the latency of UserPromptSubmit over HTTP (p50/p95) and the tokens injected per prompt
  (bytes ÷ 4, as the budget counts them), with the share of prompts given anything;
- evidence: after the replay each question of the set is asked as a prompt in a fresh session; a
  question is answered from memory when the injected context holds one of its evidence turns
  (hit), or all of them (all), per category, at each fused-score threshold swept (ENGRAM's
  `engram hooks set --min-score`); small talk ("thanks!", "ok", ...) asked the same way gives the
  share of noise injected at each threshold;
- a larger tenant: UserPromptSubmit over HTTP on a tenant holding N episodes (default 10,000),
  once its embeddings are in.

    python -m bench.hooks [--conversations N] [--episodes N] [--results FILE]
    python -m bench.hooks --quick   # one conversation, a few questions, 200 episodes, a scratch database
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx2
import orjson

from bench import env
from bench.recall import CATEGORIES, DATA, Conversation, bulk_episodes, locomo, settled
from bench.stats import Latency
from tests.support.client import record
from tests.support.server import Server, serve

SMALL_TALK = ("thanks!", "ok", "great, go on", "sounds good", "lol", "yes please", "hmm", "nice, thank you!")
THRESHOLDS = (0.1, 0.2, 0.25, 0.3, 0.4)
DEFAULT = 0.2  # ENGRAM_HOOK_MIN_SCORE


def tokens(text: str | None) -> int:
    return -(-len(text.encode()) // 4) if text else 0


class Hooks:
    """Posts hook inputs as Claude Code does, with one tenant's token."""

    def __init__(self, server: Server, tenant: str) -> None:
        self.server = server
        self.tenant = tenant
        self.http = httpx2.AsyncClient(
            base_url=server.base,
            timeout=30,
            headers={"Authorization": f"Bearer {server.token(tenant)}", "Content-Type": "application/json"},
        )

    async def post(self, sid: str, event: str, **fields: Any) -> tuple[str | None, int]:
        """The context injected (or None) and the nanoseconds the request took."""
        body = {
            "session_id": sid,
            "transcript_path": f"/home/bench/.claude/projects/x/{sid}.jsonl",
            "cwd": "/home/bench/notes",
            "permission_mode": "default",
            "hook_event_name": event,
            **fields,
        }
        started = time.perf_counter_ns()
        r = await self.http.post("/hooks/claude-code", content=orjson.dumps(body))
        took = time.perf_counter_ns() - started
        if r.status_code != 200:
            raise RuntimeError(f"{event}: {r.status_code} {r.text[:200]}")
        out = r.json().get("hookSpecificOutput")
        return (out["additionalContext"] if out else None), took

    async def close(self) -> None:
        await self.http.aclose()


def engram(s: Any, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "app.cli", *args], env=env.database_env(s), check=True, capture_output=True)


async def replay(hooks: Hooks, c: Conversation) -> dict[str, Any]:
    """Every session of `c`, turn by turn; what the prompts cost and were given."""
    first = c.speakers[0]
    prompt_ns: list[int] = []
    injected: list[int] = []
    by_session: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for speaker, dia, text, _ in c.turns:
        by_session[dia.split(":")[0]].append((speaker, f"{speaker}: {text}"))
    for n, (session, turns) in enumerate(by_session.items()):
        sid = f"{c.name}-{session}-{uuid.uuid4().hex[:8]}"
        await hooks.post(sid, "SessionStart", source="startup" if n == 0 else "resume")
        for speaker, text in turns:
            if speaker == first:
                given, took = await hooks.post(sid, "UserPromptSubmit", prompt=text)
                prompt_ns.append(took)
                injected.append(tokens(given))
            else:
                await hooks.post(sid, "Stop", stop_hook_active=False, last_assistant_message=text)
        await hooks.post(sid, "SessionEnd", reason="prompt_input_exit")
    return {
        "prompts": len(prompt_ns),
        "latency_ns": prompt_ns,
        "tokens": injected,
    }


async def ask(hooks: Hooks, c: Conversation, texts: dict[str, str]) -> dict[str, Any]:
    """Each question in a fresh session: was an evidence turn (or all) in what was injected?"""
    rows = []
    for q in c.questions:
        given, _ = await hooks.post(f"q-{uuid.uuid4().hex}", "UserPromptSubmit", prompt=q.text)
        found = [e for e in q.evidence if e in texts and given is not None and texts[e][:50] in given]
        wanted = [e for e in q.evidence if e in texts]
        rows.append(
            {
                "category": CATEGORIES[q.category],
                "hit": bool(found),
                "all": bool(wanted) and len(found) == len(wanted),
                "tokens": tokens(given),
            }
        )
    noise = 0
    for text in SMALL_TALK:
        given, _ = await hooks.post(f"t-{uuid.uuid4().hex}", "UserPromptSubmit", prompt=text)
        noise += given is not None
    return {"questions": rows, "small_talk_injected": noise, "small_talk": len(SMALL_TALK)}


async def baseline(client: Any, c: Conversation, texts: dict[str, str]) -> list[dict[str, Any]]:
    """The same questions through the `recall` tool (limit 20, no threshold, no hook filters): what
    the hooks' filters and budget start from."""
    rows = []
    for q in c.questions:
        r = record(await client.call_tool("recall", {"query": q.text, "limit": 20, "detail": "full"}))
        said = [f["text"] for f in r["facts"]]
        found = [e for e in q.evidence if e in texts and any(texts[e][:50] in t for t in said)]
        wanted = [e for e in q.evidence if e in texts]
        rows.append({"category": CATEGORIES[q.category], "hit": bool(found),
                     "all": bool(wanted) and len(found) == len(wanted), "tokens": 0})  # fmt: skip
    return rows


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for cat in ["all", *CATEGORIES.values()]:
        chosen = [r for r in rows if cat == "all" or r["category"] == cat]
        if chosen:
            out[cat] = {
                "n": len(chosen),
                "hit": round(sum(r["hit"] for r in chosen) / len(chosen), 3),
                "all": round(sum(r["all"] for r in chosen) / len(chosen), 3),
                "tokens_mean": round(statistics.fmean(r["tokens"] for r in chosen), 1),
            }
    return out


async def main(args: argparse.Namespace) -> dict[str, Any]:
    s = env.settings()
    name = env.scratch_name("hooks") if args.quick else "engram_bench_hooks"
    s = await env.fresh_database(s, name)
    skipped = None
    convs: list[Conversation] = []
    if DATA.exists():
        convs = locomo(DATA)[: args.conversations]
    else:
        skipped = f"{DATA} is absent: the replay and its questions were not measured"
        print(f"skipped: {skipped}")
    if args.quick:
        convs = convs[:1]
        for c in convs:
            c.turns = [t for t in c.turns if t[1].split(":")[0] in ("D1", "D2")]
            present = {t[1] for t in c.turns}
            c.questions = [q for q in c.questions if set(q.evidence) <= present][:8]
    thresholds = (DEFAULT,) if args.quick else THRESHOLDS
    replays: dict[str, Any] = {}
    sweep: dict[str, list[dict[str, Any]]] = defaultdict(list)
    noise: dict[str, list[int]] = defaultdict(list)
    recall_rows: list[dict[str, Any]] = []
    # The production write budget (the suite's servers wait for every vector) and settings cache.
    with serve(s, ENGRAM_EMBED_WRITE_BUDGET_MS="50") as server:
        for c in convs:
            tenant = f"bench-hooks-{c.name}"
            engram(s, "tenant", "create", tenant)
            hooks = Hooks(server, tenant)
            try:
                print(f"{c.name}: replaying {len(c.turns)} turns ...", flush=True)
                replays[c.name] = await replay(hooks, c)
            finally:
                await hooks.close()
        print(f"writing {args.episodes} episodes ...", flush=True)
        big = "bench-hooks-large"
        engram(s, "tenant", "create", big)
        async with server.client(big) as client:
            bulk = await bulk_episodes(client, args.episodes)
        hooks = Hooks(server, big)
        try:
            prompts = [q.text for c in convs for q in c.questions] or [f"the lantern number {i}" for i in range(50)]
            prompts = prompts[: 30 if args.quick else 300]
            for p in prompts[:5]:  # warm-up
                await hooks.post(f"w-{uuid.uuid4().hex}", "UserPromptSubmit", prompt=p)
            large_ns = []
            for p in prompts:
                _, took = await hooks.post(f"l-{uuid.uuid4().hex}", "UserPromptSubmit", prompt=p)
                large_ns.append(took)
        finally:
            await hooks.close()
    # The threshold sweep: a tenant's settings read on every call, so each change applies at once.
    with serve(s, ENGRAM_EMBED_WRITE_BUDGET_MS="50", ENGRAM_LIMITS_CACHE_SECONDS="0") as server:
        for c in convs:
            tenant = f"bench-hooks-{c.name}"
            hooks = Hooks(server, tenant)
            try:
                texts = {dia: f"{speaker}: {text}" for speaker, dia, text, _ in c.turns}
                async with server.client(tenant) as client:
                    await settled(client)
                    recall_rows += await baseline(client, c, texts)
                for x in thresholds:
                    engram(s, "hooks", "set", tenant, "--min-score", str(x))
                    print(f"{c.name}: {len(c.questions)} questions at threshold {x} ...", flush=True)
                    asked = await ask(hooks, c, texts)
                    sweep[str(x)] += asked["questions"]
                    noise[str(x)].append(asked["small_talk_injected"])
            finally:
                await hooks.close()
    replay_ns = [n for r in replays.values() for n in r["latency_ns"]]
    replay_tokens = [t for r in replays.values() for t in r["tokens"]]
    return {
        "machine": {**env.machine(), "quick": args.quick, "load_average_after": os.getloadavg()},
        "data": {"conversations": [c.name for c in convs], "skipped": skipped},
        "replay": {
            "prompts": len(replay_ns),
            "latency": Latency.of(replay_ns).as_dict() if replay_ns else None,
            "tokens_mean": round(statistics.fmean(replay_tokens), 1) if replay_tokens else None,
            "tokens_max": max(replay_tokens, default=0),
            "injected_share": round(sum(t > 0 for t in replay_tokens) / len(replay_tokens), 3)
            if replay_tokens
            else None,
        },
        "evidence": {
            x: {**summary(rows), "small_talk_injected": f"{sum(noise[x])}/{len(SMALL_TALK) * len(noise[x])}"}
            for x, rows in sweep.items()
        },
        "recall_limit_20": summary(recall_rows),
        "large": {"episodes": args.episodes, "bulk": bulk, "latency": Latency.of(large_ns).as_dict()},
        "default_threshold": DEFAULT,
    }


def render(r: dict[str, Any]) -> str:
    lines = [f"## Hooks ({r['machine'].get('date', '')}, {'quick' if r['machine']['quick'] else 'full'} run)", ""]
    if r["data"]["skipped"]:
        lines.append(f"Skipped: {r['data']['skipped']}.\n")
    lines.append(f"Conversations replayed: {', '.join(r['data']['conversations']) or 'none'}.\n")
    rp = r["replay"]
    if rp["latency"]:
        lat = rp["latency"]
        lines.append(
            f"Replay: {rp['prompts']} UserPromptSubmit over HTTP, p50 {lat['p50']:.1f} ms, p95 {lat['p95']:.1f} ms; "
            f"tokens injected per prompt: mean {rp['tokens_mean']}, max {rp['tokens_max']}; "
            f"prompts given anything: {rp['injected_share']:.0%}.\n"
        )
    if r["evidence"]:
        cats = ["all", *CATEGORIES.values()]
        lines.append(
            "| min score | " + " | ".join(f"hit {c}" for c in cats) + " | all-evidence | tokens | small talk |"
        )
        lines.append("|---" * (len(cats) + 4) + "|")
        for x, e in r["evidence"].items():
            hits = [f"{e[c]['hit']:.2f} ({e[c]['n']})" if c in e else "-" for c in cats]
            lines.append(
                f"| {x} | " + " | ".join(hits) + f" | {e['all']['all']:.2f} | {e['all']['tokens_mean']} | "
                f"{e['small_talk_injected']} |"
            )
        lines.append("")
    if r.get("recall_limit_20"):
        b = r["recall_limit_20"]
        cats = ["all", *CATEGORIES.values()]
        row = " | ".join(f"{b[c]['hit']:.2f} ({b[c]['n']})" if c in b else "-" for c in cats)
        lines.append(f"The same questions through `recall` (limit 20, no threshold, no hook filters): hit {row}.\n")
    lg = r["large"]
    lines.append(
        f"Tenant of {lg['episodes']} episodes: UserPromptSubmit over HTTP p50 {lg['latency']['p50']:.1f} ms, "
        f"p95 {lg['latency']['p95']:.1f} ms (n {lg['latency']['n']})."
    )
    return "\n".join(lines)


def cli() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.hooks", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one conversation, a few questions, a scratch database")
    parser.add_argument("--conversations", type=int, default=2, help="conversations of the development set to replay")
    parser.add_argument("--episodes", type=int, help="episodes of the larger tenant (default 10,000; quick 200)")
    parser.add_argument("--results", type=Path, help="where to keep the raw figures (JSON)")
    args = parser.parse_args()
    if args.episodes is None:
        args.episodes = 200 if args.quick else 10_000
    started = time.monotonic()
    results = asyncio.run(main(args))
    results["seconds"] = round(time.monotonic() - started, 1)
    print(render(results))
    if args.results:
        args.results.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    cli()
