"""`python -m bench.claude_code`: what Engram's hooks add to a prompt in the real Claude Code.

Claude Code (tests/clients pins it) runs `claude -p "<prompt>"` against the stand-in model API of
tests/support/model_api.py (it answers at once), on a real server with a seeded tenant, in three
set-ups taken in turn so the machine's load falls on each alike: no hooks; the repository plugin
(`--plugin-dir clients/claude-code`: every event a command running scripts/engram_hook.py); the
settings the console gives (SessionStart through curl, UserPromptSubmit, Stop and SubagentStop as
http hooks). Each run is one whole session of one prompt (SessionStart, UserPromptSubmit, Stop,
SessionEnd); the figure is the median wall time of a run, and what each set-up adds to the run
without hooks.

    python -m bench.claude_code [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from app.console.hook_setups import hooks_block
from bench import env
from tests.support.model_api import model_api
from tests.support.server import ROOT, Server, serve
from tests.test_claude_code import EARLIER, FACT, QUESTION

CLAUDE = ROOT / "tests" / "clients" / "node_modules" / ".bin" / "claude"
PLUGIN = ROOT / "clients" / "claude-code"


def once(server: Server, api_url: str, key: str, setup: str) -> float:
    with tempfile.TemporaryDirectory() as home:
        (Path(home) / ".claude").mkdir()
        args = [str(CLAUDE), "-p", QUESTION]
        if setup == "plugin":
            args += ["--plugin-dir", str(PLUGIN)]
        elif setup == "settings":
            (Path(home) / ".claude" / "settings.json").write_text(json.dumps(hooks_block(server.base)))
        environ = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": home,
            "CLAUDE_CONFIG_DIR": f"{home}/.claude",
            "ANTHROPIC_BASE_URL": api_url,
            "ANTHROPIC_API_KEY": "sk-ant-stand-in",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "ENGRAM_URL": server.base,
            "ENGRAM_API_KEY": key,
        }
        started = time.perf_counter()
        done = subprocess.run(args, env=environ, cwd=home, capture_output=True, text=True, timeout=180)
        took = time.perf_counter() - started
        assert done.returncode == 0, done.stderr
        return took


async def main(runs: int) -> None:
    s = await env.fresh_database(env.settings(), env.scratch_name("claude_code"))
    setups = ("none", "plugin", "settings")
    times: dict[str, list[float]] = {k: [] for k in setups}
    with serve(s, ENGRAM_EMBED_WRITE_BUDGET_MS="50") as server, model_api() as api:
        tenant = "bench-claude-code"
        async with server.client(tenant) as c:
            entity = {"name": "Shop checkout", "type": "service", "observations": [FACT]}
            await c.call_tool("upsert_entities", {"entities": [entity]})
            await c.call_tool("add_episodes", {"episodes": [{"text": EARLIER}]})
        key = server.token(tenant, ttl=24 * 3600)
        for setup in setups:  # a first run of each, not counted: caches warm
            once(server, api.url, key, setup)
        for _ in range(runs):
            for setup in setups:
                times[setup].append(once(server, api.url, key, setup))
    base = statistics.median(times["none"])
    for setup in setups:
        median = statistics.median(times[setup])
        print(f"{setup}: median {median * 1000:.0f} ms, added {(median - base) * 1000:+.0f} ms (n {runs})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=9)
    asyncio.run(main(parser.parse_args().runs))
