"""The console's Connect page in a real headless Chromium: the tenant's MCP addresses, settings to
paste for each assistant, the marked place for Claude Code's hook settings, and an API key made for
a headless agent (a CSRF-protected form) whose settings then work for a real tool call through the
SDK's client; every settings block's Copy button puts its exact text on the clipboard (read back
through the page, with the clipboard permissions granted to the browser context); the install links
of Cursor and VS Code carry the configuration shown; claude.ai and ChatGPT are warned that this
server's loopback address cannot work for them; a reader is told to ask an administrator; the strict
policy blocks nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from app.config import ENDPOINT_PATHS, Settings
from app.console.client_setups import agent_setups, setups
from app.console.hook_setups import hook_setups
from app.console.web import CSP
from tests.support.auth import PASSWORD, add_user
from tests.support.browser import ARTIFACTS, CHROMIUM, console_in_chromium
from tests.support.client import connect, ok
from tests.support.console import seed, serve_console, sign_in_with_browser
from tests.support.install_links import decode_cursor, decode_vscode
from tests.support.server import Server

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (scripts/system-deps.sh)")
CLIPBOARD = ["clipboard-read", "clipboard-write"]


@pytest.fixture(scope="module")
def builtin(db_settings: Settings) -> Iterator[Server]:
    with serve_console(db_settings) as running:
        yield running


async def test_an_admin_connects_an_assistant_and_makes_a_key_for_an_agent(builtin):
    t = await seed(builtin, [{"name": "Ada Lovelace", "type": "person"}], [])
    blocked: list[str] = []
    async with console_in_chromium(blocked, CLIPBOARD) as page:
        await sign_in_with_browser(page, builtin, t)
        await page.get_by_role("link", name="Connect", exact=True).click()
        await page.wait_for_url("**/console/connect")
        answer = await page.request.get(f"{builtin.base}/console/connect")
        assert answer.headers["content-security-policy"] == CSP
        # Every served endpoint's URL, as the server names itself.
        for name, path in ENDPOINT_PATHS.items():
            assert await page.get_by_label(f"{name} MCP address").input_value() == f"{builtin.base}{path}"
        native = f"{builtin.base}/mcp"
        settings = {
            setup: await page.locator(f"#{setup} pre").inner_text()
            for setup in ("claude-code", "vscode", "cursor", "claude-ai", "chatgpt")
        }
        assert settings["claude-code"] == f"claude mcp add --transport http engram {native}"
        assert json.loads(settings["vscode"]) == {"servers": {"engram": {"type": "http", "url": native}}}
        assert json.loads(settings["cursor"]) == {"mcpServers": {"engram": {"url": native}}}
        assert settings["claude-ai"] == native and settings["chatgpt"] == f"{builtin.base}/mcp/chatgpt"
        assert await page.locator("#claude-code-hooks h2").inner_text() == "Claude Code hooks"
        hooks = await page.locator("#claude-code-hooks").inner_text()
        assert f"{builtin.base}/hooks/claude-code" in hooks and "allowedEnvVars" in hooks
        await page.screenshot(path=ARTIFACTS / "connect.png", full_page=True)

        # A key for a headless agent: the form is the administration page's own, CSRF and all.
        forged = await page.request.post(
            f"{builtin.base}/console/admin/keys/create", form={"name": "forged", "scope": "memory:read"}
        )
        assert forged.status == 403 and "did not come from this console" in await forged.text()
        await page.get_by_label("Key name").fill("nightly agent")
        await page.get_by_role("button", name="Make an API key").click()
        await page.wait_for_url("**/console/admin/keys/create")
        key = await page.locator("#new-key").input_value()
        assert key.startswith("egk_")
        agent = await page.locator("#agent-claude-code pre").inner_text()
        assert agent == f'claude mcp add --transport http engram {native} --header "Authorization: Bearer {key}"'
        config = json.loads(await page.locator("#agent-json pre").inner_text())
        assert config["mcpServers"]["engram"] == {
            "type": "http",
            "url": native,
            "headers": {"Authorization": f"Bearer {key}"},
        }
        assert await copied(page, "agent-json") == await page.locator("#agent-json pre").inner_text()
        await page.screenshot(path=ARTIFACTS / "connect-key.png", full_page=True)
    assert not blocked, blocked

    # The settings work: the key, at the address they name, through the SDK's client.
    async with connect(native, key) as client:
        found = ok(await client.call_tool("find_entities", {"name_contains": "Ada"}))
        assert [e["name"] for e in found["entities"]] == ["Ada Lovelace"]


async def test_a_reader_is_told_who_makes_keys(builtin):
    t = await seed(builtin, [{"name": "Grace Hopper", "type": "person"}], [])
    reader = add_user(builtin, t.id, "reader")
    t.admin = reader
    t.admin.password = PASSWORD
    async with console_in_chromium([]) as page:
        await sign_in_with_browser(page, builtin, t)
        await page.goto(f"{builtin.base}/console/connect")
        assert "Only an administrator of this tenant can make API keys" in await page.locator("#ask-admin").inner_text()
        assert await page.locator("#agent-key-form").count() == 0
        assert "egk_…" in await page.locator("#agent-claude-code pre").inner_text()  # the shape, without a key


async def copied(page: Any, block: str) -> str:
    """Clicks the block's Copy button; the clipboard's text, once the button shows "Copied"."""
    button = page.locator(f"#{block} button.copy")
    await button.click()
    await page.wait_for_function(
        "id => document.querySelector(`#${id} button.copy`).dataset.state === 'copied'", arg=block
    )
    assert await button.locator(".copy-label").inner_text() == "Copied"  # seen, and told to a screen reader:
    assert await page.locator(f"#{block} [role=status]").text_content() == "Copied"
    return str(await page.evaluate("navigator.clipboard.readText()"))


async def test_each_block_copies_its_exact_text_and_install_links_carry_the_settings(builtin):
    t = await seed(builtin, [{"name": "Alan Turing", "type": "person"}], [])
    native = f"{builtin.base}/mcp"
    endpoints = {name: f"{builtin.base}{path}" for name, path in ENDPOINT_PATHS.items()}
    expected = {s.id: s.text for s in [*setups(endpoints), *hook_setups(builtin.base), *agent_setups(native, "egk_…")]}
    blocked: list[str] = []
    async with console_in_chromium(blocked, CLIPBOARD) as page:
        await sign_in_with_browser(page, builtin, t)
        await page.goto(f"{builtin.base}/console/connect")
        buttons = await page.locator("button.copy").evaluate_all("bs => bs.map(b => b.closest('section').id)")
        assert sorted(buttons) == sorted(expected)  # one button per block, every block has one
        for block, text in expected.items():
            assert await copied(page, block) == text, block
        # The button goes back to "Copy" after a while.
        await page.wait_for_function("() => !document.querySelector('#codex button.copy').dataset.state")
        assert await page.locator("#codex .copy-label").inner_text() == "Copy"
        await copied(page, "claude-desktop")
        await page.locator("#claude-desktop").screenshot(path=ARTIFACTS / "connect-copied.png")

        # Codex's block and Claude Desktop's through mcp-remote, as generated.
        assert "bearer_token_env_var" in await page.locator("#codex pre").inner_text()
        desktop = json.loads(await page.locator("#claude-desktop pre").inner_text())
        assert desktop["mcpServers"]["engram"] == {"command": "npx", "args": ["-y", "mcp-remote", native]}

        # The one-click links carry what the blocks beside them show.
        vscode = json.loads(await page.locator("#vscode pre").inner_text())["servers"]["engram"]
        assert decode_vscode(await page.get_by_role("link", name="Install in VS Code").get_attribute("href")) == {
            "name": "engram",
            **vscode,
        }
        cursor = json.loads(await page.locator("#cursor pre").inner_text())["mcpServers"]["engram"]
        link = await page.get_by_role("link", name="Install in Cursor").get_attribute("href")
        assert decode_cursor(link) == ("engram", cursor) and cursor == {"url": native}

        # The test server listens on 127.0.0.1: claude.ai and ChatGPT are told it cannot work for them.
        for client in ("claude-ai", "chatgpt"):
            warning = await page.locator(f"#{client}-warning").inner_text()
            assert "is a loopback address" in warning and "ENGRAM_PUBLIC_URL" in warning
        assert await page.locator(".setup .warning").count() == 2
        await page.locator("#claude-ai").scroll_into_view_if_needed()
        await page.screenshot(path=ARTIFACTS / "connect-copy.png", full_page=True)
    assert not blocked, blocked
