"""The real Claude Code (tests/clients pins it) against a real Engram server, offline: its model is
tests/support/model_api.py, which records what the model would have been given. What is checked is
what a person gets: every tool visible to the model, a tool call's answer back in the conversation,
the plugin valid and its hooks firing (the brief and the prompt's facts reach the model, each turn
kept once, nothing repeated on resume), the pasted settings loaded, the plugin installed from the
repository's marketplace and from the console's download."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from app.config import Settings
from app.console.hook_setups import hooks_block
from tests.support.auth import add_user
from tests.support.client import connect, record
from tests.support.console import console_sign_in, serve_console
from tests.support.model_api import ModelAPI, Text, ToolUse, model_api
from tests.support.server import ROOT, Server

CLAUDE = ROOT / "tests" / "clients" / "node_modules" / ".bin" / "claude"
PLUGIN = ROOT / "clients" / "claude-code"

pytestmark = pytest.mark.skipif(not CLAUDE.exists(), reason="Claude Code is not installed (make test-clients)")


def engram(server: Server, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", *args], env=server.env, cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@dataclass
class Run:
    """One `claude -p`: its output, and its debug log (which hooks and tools loaded, and why not)."""

    done: subprocess.CompletedProcess[str]
    debug: str


@dataclass
class Claude:
    """Claude Code in a home of its own, its model the stand-in, its memory one tenant's."""

    api: ModelAPI
    server: Server
    tenant: str
    key: str
    home: Path
    cwd: Path
    url_in_env: bool = True  # ENGRAM_URL set (the repository plugin reads it; the downloaded one has it)

    def env(self) -> dict[str, str]:
        env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.home),
            "CLAUDE_CONFIG_DIR": str(self.home / ".claude"),
            "ANTHROPIC_BASE_URL": self.api.url,
            "ANTHROPIC_API_KEY": "sk-ant-stand-in",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            # Its documented bound on an MCP server's start, in ms: a loaded machine's server may take
            # longer than the default to list its tools, and the test is about what it lists.
            "MCP_TIMEOUT": "120000",
            "ENGRAM_URL": self.server.base,
            "ENGRAM_API_KEY": self.key,
        }
        if not self.url_in_env:
            del env["ENGRAM_URL"]
        return env

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`claude <args>` (a bound for a loaded machine, not a timing assertion)."""
        return subprocess.run(
            [str(CLAUDE), *args], env=self.env(), cwd=self.cwd, capture_output=True, text=True, timeout=180
        )

    def prompt(self, text: str, *args: str) -> Run:
        log = self.home / f"debug-{uuid.uuid4().hex[:8]}.log"
        done = self.cli("-p", text, "--debug-file", str(log), *args)
        assert done.returncode == 0, (done.stdout, done.stderr)
        return Run(done, log.read_text() if log.exists() else "")

    def mcp_config(self) -> str:
        server = {"type": "http", "url": self.server.url, "headers": {"Authorization": f"Bearer {self.key}"}}
        return json.dumps({"mcpServers": {"engram": server}})


@pytest.fixture(scope="module")
def api() -> Iterator[ModelAPI]:
    with model_api() as running:
        yield running


@pytest.fixture(scope="module")
def api_key(server: Server) -> tuple[str, str]:
    """A tenant with a real API key, as a person makes one (`engram apikey create`), made once."""
    tenant = f"cc-{uuid.uuid4().hex[:10]}"
    engram(server, "tenant", "create", tenant)
    return tenant, engram(server, "apikey", "create", "--tenant", tenant, "--name", "claude code")


def claude_for(api: ModelAPI, server: Server, tmp_path: Path, tenant: str, key: str) -> Claude:
    cwd = tmp_path / "workdir"
    cwd.mkdir()
    (tmp_path / "home" / ".claude").mkdir(parents=True)
    api.reset()
    return Claude(api, server, tenant, key, tmp_path / "home", cwd)


@pytest.fixture
def claude(api: ModelAPI, server: Server, tmp_path: Path) -> Claude:
    """Claude Code in a fresh home, its memory a fresh tenant's (a token for it, as hooks and MCP
    take any credential); the stand-in's record emptied."""
    tenant = f"cc-{uuid.uuid4().hex[:10]}"
    return claude_for(api, server, tmp_path, tenant, server.token(tenant, ttl=3600))


@pytest.fixture
def keyed(api: ModelAPI, server: Server, tmp_path: Path, api_key: tuple[str, str]) -> Claude:
    """The same, holding a real API key of its tenant (one test uses it: the tenant is fresh)."""
    return claude_for(api, server, tmp_path, *api_key)


async def tool_names(server: Server, tenant: str) -> list[str]:
    async with server.client(tenant) as c:
        return [t.name for t in (await c.list_tools()).tools]


async def seed(server: Server, tenant: str) -> None:
    """What other sessions left: a fact about the shop's checkout and an earlier conversation."""
    async with server.client(tenant) as c:
        entity = {"name": "Shop checkout", "type": "service", "observations": [FACT]}
        assert not (await c.call_tool("upsert_entities", {"entities": [entity]})).is_error
        said = {"text": EARLIER}
        assert not (await c.call_tool("add_episodes", {"episodes": [said]})).is_error


async def episodes(server: Server, tenant: str) -> list[dict[str, Any]]:
    async with server.client(tenant) as c:
        page = record(await c.call_tool("list_episodes", {"limit": 200, "max_tokens": 20000, "detail": "full"}))
    return list(page["episodes"])


def said_to_model(body: dict[str, Any]) -> str:
    """Everything a request put before the model, as one text."""
    return json.dumps({"system": body.get("system"), "messages": body.get("messages")})


def memory_reached_the_model(claude: Claude) -> str:
    """The conversation's last request, once the brief and the prompt's fact are both in it."""
    last = said_to_model(claude.api.turns()[-1])
    assert "SessionStart hook additional context: Engram memory" in last, last[-3000:]
    assert "Stripe to Adyen" in last  # the brief: the latest from other sessions
    assert "UserPromptSubmit hook additional context: Engram memory" in last
    assert "exponential backoff" in last  # the fact this prompt needs
    return last


FACT = "the checkout service retries card payments three times with exponential backoff"
EARLIER = "We decided to move the shop's payments from Stripe to Adyen in March."
QUESTION = "How many times does checkout retry a card payment?"
ANSWER = "Checkout retries a card payment three times."


async def test_every_native_tool_reaches_the_model(claude: Claude) -> None:
    names = await tool_names(claude.server, claude.tenant)
    run = claude.prompt("hello", "--mcp-config", claude.mcp_config(), "--strict-mcp-config")
    offered = {t["name"] for t in claude.api.turns()[0]["tools"]}
    assert {f"mcp__engram__{n}" for n in names} <= offered, sorted(offered)
    assert len(names) >= 20  # every native tool, none left out by the server either
    assert 'MCP server "engram": Successfully connected' in run.debug
    skipped = [line for line in run.debug.splitlines() if "engram" in line and "skip" in line.lower()]
    assert not skipped and "oneOf" not in run.debug and "anyOf" not in run.debug, skipped


async def test_a_recall_round_trip(claude: Claude) -> None:
    await seed(claude.server, claude.tenant)
    claude.api.reset(ToolUse("mcp__engram__recall", {"query": QUESTION}), Text(ANSWER))
    run = claude.prompt(
        QUESTION, "--mcp-config", claude.mcp_config(), "--strict-mcp-config", "--allowedTools", "mcp__engram__recall"
    )
    assert ANSWER in run.done.stdout
    turns = claude.api.turns()
    assert len(turns) == 2, [said_to_model(t)[-500:] for t in turns]
    results = [
        block
        for message in turns[1]["messages"]
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]
    assert len(results) == 1 and not results[0].get("is_error"), results
    assert FACT in json.dumps(results[0]["content"])


def validated(claude: Claude, path: Path) -> str:
    done = claude.cli("plugin", "validate", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Validation passed" in done.stdout and "error" not in done.stdout.lower(), done.stdout
    return done.stdout


def test_the_plugin_and_the_marketplace_validate(claude: Claude) -> None:
    validated(claude, PLUGIN)
    assert "marketplace manifest" in validated(claude, ROOT)


async def test_the_plugin_runs_each_hook_and_repeats_nothing_on_resume(claude: Claude) -> None:
    await seed(claude.server, claude.tenant)
    sid = str(uuid.uuid4())
    claude.api.reset(Text(ANSWER))
    run = claude.prompt(QUESTION, "--plugin-dir", str(PLUGIN), "--session-id", sid)
    assert "Registered 6 hooks from 1 plugins" in run.debug
    assert "not supported" not in run.debug
    memory_reached_the_model(claude)
    kept = [e for e in await episodes(claude.server, claude.tenant) if sid in (e.get("source") or "")]
    assert [e["text"] for e in kept].count(ANSWER) == 1, kept  # Stop kept it; SessionEnd did not again
    assert [e["text"] for e in kept].count(QUESTION) == 1, kept

    claude.api.reset(Text("Exponential backoff."))
    claude.prompt("And what backoff does it use between the tries?", "--plugin-dir", str(PLUGIN), "--resume", sid)
    last = said_to_model(claude.api.turns()[-1])
    assert QUESTION in last and ANSWER in last  # the resumed conversation
    for shown in ("Stripe to Adyen", "exponential backoff"):
        assert last.count(shown) == 1, (shown, last[-4000:])
    kept = [e for e in await episodes(claude.server, claude.tenant) if sid in (e.get("source") or "")]
    assert [e["text"] for e in kept].count(ANSWER) == 1, kept


async def test_the_settings_to_paste_load_and_fire(claude: Claude) -> None:
    await seed(claude.server, claude.tenant)
    settings = claude.home / ".claude" / "settings.json"
    settings.write_text(json.dumps(hooks_block(claude.server.base), indent=2))
    claude.api.reset(Text(ANSWER))
    run = claude.prompt(QUESTION)
    assert "Registered" not in run.debug or "from 0 plugins" in run.debug
    memory_reached_the_model(claude)
    kept = [e["text"] for e in await episodes(claude.server, claude.tenant)]
    assert kept.count(ANSWER) == 1 and kept.count(QUESTION) == 1, kept


async def test_the_marketplace_installs_the_plugin_offline(keyed: Claude) -> None:
    claude = keyed
    await seed(claude.server, claude.tenant)
    added = claude.cli("plugin", "marketplace", "add", str(ROOT))
    assert added.returncode == 0 and "engram" in added.stdout, added.stdout + added.stderr
    installed = claude.cli("plugin", "install", "engram-memory@engram")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    claude.api.reset(Text(ANSWER))
    claude.prompt(QUESTION)
    memory_reached_the_model(claude)
    names = await tool_names(claude.server, claude.tenant)
    offered = {t["name"] for t in claude.api.turns()[0]["tools"]}
    assert {f"mcp__plugin_engram-memory_engram__{n}" for n in names} <= offered, sorted(offered)


@pytest.fixture(scope="module")
def builtin(db_settings: Settings) -> Iterator[Server]:
    """A server with Engram's own sign-in, for the console's download."""
    with serve_console(db_settings) as running:
        yield running


async def download(server: Server, tenant: str) -> bytes:
    """The plugin from the Connect page's link, as a signed-in admin of `tenant` gets it."""
    async with httpx2.AsyncClient(base_url=server.base, timeout=30) as anonymous:
        refused = await anonymous.get("/console/connect/plugin.zip")
    assert refused.status_code in (302, 303, 401) and not refused.content.startswith(b"PK"), refused.status_code
    browser = await console_sign_in(server, add_user(server, tenant, "admin"), tenant)
    try:
        page = await browser.http.get("/console/connect")
        assert 'href="/console/connect/plugin.zip"' in page.text
        got = await browser.http.get("/console/connect/plugin.zip")
    finally:
        await browser.http.aclose()
    assert got.status_code == 200 and got.headers["content-type"] == "application/zip", got.text[:300]
    assert 'filename="engram-memory.zip"' in got.headers["content-disposition"]
    return got.content


async def test_the_downloaded_plugin_validates_loads_and_fires(builtin: Server, api: ModelAPI, tmp_path: Path) -> None:
    tenant = f"cc-{uuid.uuid4().hex[:10]}"
    archive = tmp_path / "engram-memory.zip"
    archive.write_bytes(await download(builtin, tenant))
    key = engram(builtin, "apikey", "create", "--tenant", tenant, "--name", "claude code")
    async with connect(builtin.url, key) as c:
        assert not (await c.call_tool("add_episodes", {"episodes": [{"text": EARLIER}]})).is_error
    with zipfile.ZipFile(archive) as z:
        z.extractall(tmp_path / "unzipped")
        hooks = json.loads(z.read("engram-memory/hooks/hooks.json"))
    assert builtin.base in json.dumps(hooks) and "ENGRAM_URL" not in json.dumps(hooks)

    claude = claude_for(api, builtin, tmp_path, tenant, key)
    claude.url_in_env = False  # the address is in the plugin
    validated(claude, tmp_path / "unzipped" / "engram-memory")
    claude.api.reset(Text(ANSWER))
    run = claude.prompt(QUESTION, "--plugin-dir", str(archive))
    assert "Registered 6 hooks from 1 plugins" in run.debug
    last = said_to_model(claude.api.turns()[-1])
    assert "SessionStart hook additional context: Engram memory" in last and "Stripe to Adyen" in last
    offered = {t["name"] for t in claude.api.turns()[0]["tools"]}
    assert "mcp__plugin_engram-memory_engram__recall" in offered, sorted(offered)
    async with connect(builtin.url, key) as c:
        page = record(await c.call_tool("list_episodes", {"limit": 200, "max_tokens": 20000, "detail": "full"}))
    assert [e["text"] for e in page["episodes"]].count(ANSWER) == 1  # the Stop hook, by its literal URL
