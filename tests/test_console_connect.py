"""The console's Connect page in a real headless Chromium: the tenant's MCP addresses, settings to
paste for each assistant, the marked place for Claude Code's hook settings, and an API key made for
a headless agent (a CSRF-protected form) whose settings then work for a real tool call through the
SDK's client; a reader is told to ask an administrator; the strict policy blocks nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from app.config import ENDPOINT_PATHS, Settings
from app.console.web import CSP
from tests.support.auth import PASSWORD, add_user
from tests.support.browser import ARTIFACTS, CHROMIUM, console_in_chromium
from tests.support.client import connect, ok
from tests.support.console import seed, serve_console, sign_in_with_browser
from tests.support.server import Server

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (scripts/system-deps.sh)")


@pytest.fixture(scope="module")
def builtin(db_settings: Settings) -> Iterator[Server]:
    with serve_console(db_settings) as running:
        yield running


async def test_an_admin_connects_an_assistant_and_makes_a_key_for_an_agent(builtin):
    t = await seed(builtin, [{"name": "Ada Lovelace", "type": "person"}], [])
    blocked: list[str] = []
    async with console_in_chromium(blocked) as page:
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
