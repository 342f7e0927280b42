"""Engram's MCP endpoints in real clients, run as their users run them (pinned in tests/clients/,
installed by `make test-clients`): the MCP Inspector's CLI lists and calls every tool of every
endpoint; Codex CLI, configured with the block docs/clients.md gives, offers every tool to its
model in a form OpenAI's API accepts and carries a `recall` round trip.

The module's server is configured as deployed by default (no output schemas listed: answers are
text), which is what these clients meet. Codex talks to a stand-in for OpenAI's Responses API
(tests/support/responses_api.py) that records each request: exactly what the model would be given.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.config import ENDPOINT_PATHS, Settings
from tests.support.listing import ALL, ROOT_REFUSED, SCOPES, seed
from tests.support.responses_api import ResponsesAPI, items_of, offered_tools
from tests.support.server import ROOT, Server, serve

BIN = ROOT / "tests" / "clients" / "node_modules" / ".bin"
INSPECTOR, CODEX = BIN / "mcp-inspector", BIN / "codex"
NODE = shutil.which("node")
needs_inspector = pytest.mark.skipif(
    NODE is None or not INSPECTOR.exists(), reason="the MCP Inspector is not installed (`make test-clients`)"
)
needs_codex = pytest.mark.skipif(
    NODE is None or not CODEX.exists(), reason="Codex CLI is not installed (`make test-clients`)"
)
DOCS = ROOT / "docs" / "clients.md"
DOCUMENTED_URL = "https://engram.example.com/mcp"
# What a tool may answer about the data it was given (not about the call's form).
DOMAIN_ERRORS = ("not_found", "conflict", "ambiguous")
# A bound on a client's run on a loaded machine, not a timing assertion.
RUN_SECONDS = 180


@pytest.fixture(scope="module")
def deployed(db_settings: Settings) -> Iterator[Server]:
    with serve(db_settings, ENGRAM_TOOL_OUTPUT_SCHEMAS="false") as s:
        yield s


async def run(command: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    """A client's command to its end: exit status, standard output and error."""
    process = await asyncio.create_subprocess_exec(
        *command,
        env=env,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), RUN_SECONDS)
    except TimeoutError:
        process.kill()
        raise
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def client_env(home: Path, **extra: str) -> dict[str, str]:
    """A client's environment: nothing of the test run's own but PATH, a home of its own."""
    home.mkdir(exist_ok=True)
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), **extra}


# --- the MCP Inspector's CLI -----------------------------------------------------------------------


async def inspect(url: str, token: str, home: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    """`mcp-inspector --cli URL --transport http --header "Authorization: Bearer …" --format json ARGS`:
    its exit status, the JSON it printed (the result, also when the tool answered an error) and its
    errors. The transport is named: the Inspector guesses it only for a URL ending in `/mcp`."""
    auth = f"Authorization: Bearer {token}"
    command = [str(INSPECTOR), "--cli", url, "--transport", "http", "--header", auth, "--format", "json", *args]
    status, out, err = await run(command, client_env(home), home)
    return status, json.loads(out) if out.strip() else {}, err


def error_code(result: dict[str, Any]) -> str:
    """The code of a tool's error answer as printed ("Error executing tool X: not_found: …")."""
    text = result["content"][0]["text"]
    return text.split("Error executing tool ", 1)[-1].split(": ", 2)[1]


@needs_inspector
@pytest.mark.parametrize("tool_set", list(SCOPES))
async def test_the_inspector_lists_every_tool_in_both_protocol_eras(deployed, tenant, tool_set, tmp_path):
    url, token = f"{deployed.base}{ENDPOINT_PATHS[tool_set]}", deployed.token(tenant, ALL)
    for era in ("legacy", "modern"):
        # --strict: the Inspector's own check of each schema's portability fails on any error-severity finding.
        args = ("--method", "tools/list", "--strict", "--protocol-era", era)
        status, listed, err = await inspect(url, token, tmp_path, *args)
        assert status == 0, (era, err[-2000:])
        assert {t["name"] for t in listed["result"]["tools"]} == set(SCOPES[tool_set]), era


@needs_inspector
@pytest.mark.timeout(900)  # a Node process per call: 33 of them on a loaded machine may pass the usual bound
@pytest.mark.parametrize("tool_set", list(SCOPES))
async def test_the_inspector_calls_every_tool_from_its_listing(deployed, tenant, tool_set, tmp_path):
    url, token = f"{deployed.base}{ENDPOINT_PATHS[tool_set]}", deployed.token(tenant, ALL)
    status, listed, err = await inspect(url, token, tmp_path, "--method", "tools/list")
    assert status == 0, err[-2000:]
    async with deployed.client(tenant, ALL) as native:
        values = await seed(native)
    tools = listed["result"]["tools"]
    slots = asyncio.Semaphore(2)  # the Inspector starts a Node process per call

    async def call(tool: dict[str, Any]) -> tuple[str, int, dict[str, Any], str]:
        arguments = json.dumps(values.for_tool(tool["inputSchema"], tool.get("description")))
        args = ("--method", "tools/call", "--tool-name", tool["name"], "--tool-args-json", arguments)
        async with slots:
            return tool["name"], *await inspect(url, token, tmp_path, *args)

    # What only reads, side by side; then each write in turn. All on the one seeded tenant: a write
    # may remove what a later call names, and `not_found` is an answer about the data.
    reads = [t for t in tools if (t.get("annotations") or {}).get("readOnlyHint")]
    answers = await asyncio.gather(*(call(t) for t in reads))
    answers += [await call(t) for t in tools if t not in reads]
    assert sorted(a[0] for a in answers) == sorted(SCOPES[tool_set])
    for name, status, answer, err in answers:
        # 0: answered; 5: the tool answered an error, printed all the same; anything else is the client's refusal.
        assert status in (0, 5), (name, status, err[-2000:])
        result = answer["result"]
        assert bool(result.get("isError")) == (status == 5) and result["content"], (name, result)
        if status == 5:
            assert error_code(result) in DOMAIN_ERRORS, (name, result["content"])


@needs_inspector
async def test_the_inspector_is_refused_without_a_valid_credential(deployed, tmp_path):
    args = ("--method", "tools/list", "--stored-auth-only")  # no interactive sign-in
    status, _, err = await inspect(deployed.url, "not-a-token", tmp_path, *args)
    assert status != 0 and "auth" in err, err[-2000:]


# --- Codex CLI, with a stand-in for the model ------------------------------------------------------


def documented_block() -> str:
    """The `config.toml` block docs/clients.md gives under "Codex CLI"."""
    section = DOCS.read_text().split("\n## Codex CLI\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```toml\n(.*?)```", section, re.S)
    assert block and DOCUMENTED_URL in block[1], "docs/clients.md: the Codex CLI section's toml block"
    return block[1]


@pytest.fixture(scope="module")
def responses_api() -> Iterator[ResponsesAPI]:
    with ResponsesAPI() as api:
        yield api


def codex_home(api: ResponsesAPI, url: str, home: Path) -> Path:
    """A `CODEX_HOME` whose config.toml is the documented block pointing at `url`, the model the stand-in."""
    home.mkdir()
    provider = f"""model = "gpt-5"
model_provider = "stand-in"

[model_providers.stand-in]
name = "Responses API stand-in"
base_url = "{api.url}"
wire_api = "responses"
env_key = "OPENAI_API_KEY"
request_max_retries = 0
stream_max_retries = 0

"""
    (home / "config.toml").write_text(provider + documented_block().replace(DOCUMENTED_URL, url))
    return home


async def codex_exec(api: ResponsesAPI, url: str, key: str, home: Path, prompt: str) -> list[dict[str, Any]]:
    """`codex exec PROMPT` with Engram at `url` as the docs configure it, the model at the stand-in;
    the requests Codex sent the model, once it has finished (and succeeded)."""
    home = codex_home(api, url, home)
    env = client_env(home, CODEX_HOME=str(home), OPENAI_API_KEY="stand-in", ENGRAM_API_KEY=key)
    api.requests.clear()
    # --strict-config: a key of the documented block that Codex does not know fails the run. The
    # server's start-up bound (10 s by default) is raised for a loaded machine, outside the block.
    bounds = ["-c", "mcp_servers.engram.startup_timeout_sec=120", "-c", "mcp_servers.engram.tool_timeout_sec=120"]
    command = [str(CODEX), "exec", "--skip-git-repo-check", "--strict-config", *bounds, "--cd", str(home), prompt]
    status, out, err = await run(command, env, home)
    assert status == 0, (out[-2000:], err[-4000:])
    assert api.requests, ("Codex sent the model nothing", err[-4000:])
    if not any(namespace == "mcp__engram" for namespace, _ in offered_tools(api.requests[0])):
        raise AssertionError(f"Codex offered none of Engram's tools: {err[-4000:]}")
    return list(api.requests)


@needs_codex
@pytest.mark.parametrize("tool_set", list(SCOPES))
async def test_codex_offers_every_tool_in_a_form_openai_accepts(deployed, responses_api, tenant, tool_set, tmp_path):
    url, token = f"{deployed.base}{ENDPOINT_PATHS[tool_set]}", deployed.token(tenant, ALL)
    first = (await codex_exec(responses_api, url, token, tmp_path / "codex", "hello"))[0]
    offered = {tool["name"]: tool for namespace, tool in offered_tools(first) if namespace == "mcp__engram"}
    assert set(offered) == set(SCOPES[tool_set])
    for name, tool in offered.items():
        parameters = tool["parameters"]
        assert tool["type"] == "function" and parameters.get("type") == "object", name
        assert not ROOT_REFUSED & set(parameters), (tool_set, name, sorted(ROOT_REFUSED & set(parameters)))


@needs_codex
async def test_codex_recalls_a_fact_through_engram(deployed, responses_api, tenant, tmp_path):
    async with deployed.client(tenant, ALL) as c:
        stored = await c.call_tool(
            "upsert_entities",
            {"entities": [{"name": "Staging database", "type": "service", "observations": ["listens on port 5433"]}]},
        )
        assert not stored.is_error, stored.content
    responses_api.call("recall", {"query": "Which port does the staging database listen on?"})
    token = deployed.token(tenant, ALL)
    requests = await codex_exec(responses_api, deployed.url, token, tmp_path / "codex", "Where is staging?")
    assert len(requests) == 2, [items_of(r, "function_call_output") for r in requests]
    call = items_of(requests[1], "function_call")
    output = items_of(requests[1], "function_call_output")
    assert [c["name"] for c in call] == ["recall"] and [o["call_id"] for o in output] == [call[0]["call_id"]]
    answer = output[0]["output"]
    answer = answer if isinstance(answer, str) else json.dumps(answer)
    assert "5433" in answer and "Staging database" in answer, answer
