"""`python -m bench.answers`: every read tool's answer text on the benchmark tenants, from this
checkout and from another one, byte for byte: proof that a change to how answers are printed or
cut left what a model reads as it was.

The tenants are those of `bench.context`: the relevance set and the conversational-memory
development set's conversations (`--conversations`), each stored as facts and as episodes. Both
checkouts serve the same database, so they read the very same rows (ids, ties and times alike);
each call of tests/support/answers.py is made on both (every read tool of every endpoint, several
budgets, limits and forms, and the hook briefs) and the texts compared. Only what differs from
call to call whoever answers (a cursor's issue time) is set aside.

    python -m bench.answers --reference DIR [--conversations N] [--out FILE]

`DIR`: the other checkout (e.g. `git archive <commit> | tar -x -C DIR`); it must hold the same
migrations.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from bench import env
from bench.recall import Conversation, conversations, settled, store_episodes, store_facts
from tests.support.answers import Data, analyzed, briefs, record
from tests.support.server import Server, free_port, serve, server_env, start_server

QUESTIONS = 6  # of each conversation, asked of recall and search at every budget


@contextmanager
def serve_from(checkout: Path, settings: Any, **extra: str) -> Iterator[Server]:
    """`engram serve` run from another checkout (its code), on `settings`' database."""
    port = free_port()
    env_vars = server_env(settings, port, **extra)
    process = start_server(env_vars, cwd=checkout)
    try:
        url = f"http://127.0.0.1:{port}"
        yield Server(f"{url}/mcp", url, settings.model_copy(update={"port": port}), env_vars, process)
    finally:
        process.terminate()
        process.wait(timeout=30)


def data_of(c: Conversation, layout: str) -> Data:
    holders = list(c.facts) if layout == "facts" else sorted({t[0] for t in c.turns})
    ends = [x for a, _, b, _ in c.relations for x in (a, b)]
    return Data(
        entities=list(dict.fromkeys([*holders, *ends]))[:6],
        questions=[q.text for q in c.questions[:QUESTIONS]],
        relations=[(a, kind, b) for a, kind, b, _ in c.relations] if layout == "facts" else [],
        episodes=layout == "episodes",
    )


async def main(args: argparse.Namespace) -> dict[str, Any]:
    s = await env.fresh_database(env.settings(), env.scratch_name("answers"))
    convs, skipped = conversations(args, QUESTIONS)
    plain = {"ENGRAM_TOOL_OUTPUT_SCHEMAS": "false", "ENGRAM_HOOK_CAPTURE": "false"}
    here: dict[str, str] = {}
    there: dict[str, str] = {}
    with serve(s) as writer, serve(s, **plain) as mine, serve_from(args.reference, s, **plain) as theirs:
        for c in convs:
            for layout in ("facts", "episodes"):
                if layout == "episodes" and not c.turns:
                    continue
                tenant = f"answers-{c.name}-{layout}"
                async with writer.client(tenant) as client:
                    await (store_facts if layout == "facts" else store_episodes)(client, c)
                    await settled(client)
                await analyzed(writer)
                data = data_of(c, layout)
                prompts = data.questions[:3]
                for first, server, out in ((0, mine, here), (100, theirs, there)):  # a session is briefed once
                    got = await record(server, tenant, data) | await briefs(server, tenant, data, prompts, first)
                    out |= {f"{tenant} {key}": value for key, value in got.items()}
                print(f"{tenant}: {sum(here[k] == there.get(k) for k in here)} of {len(here)} alike", flush=True)
    differ = sorted(k for k in here if here[k] != there.get(k))
    return {"tenants": [c.name for c in convs], "skipped": skipped, "calls": len(here), "differ": differ}


def cli() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.answers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", type=Path, required=True, help="the other checkout")
    parser.add_argument("--conversations", type=int, default=1, help="of the conversational-memory set")
    parser.add_argument("--out", type=Path, help="the report, as JSON")
    parser.set_defaults(quick=False)
    args = parser.parse_args()
    report = asyncio.run(main(args))
    if args.out:
        args.out.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    print(f"{report['calls']} answers, {len(report['differ'])} differ")
    for key in report["differ"][:20]:
        print(f"  differs: {key}")
    sys.exit(1 if report["differ"] else 0)


if __name__ == "__main__":
    cli()
