"""The console's pages as a person sees them in a real headless Chromium: an entity page that reads
first and edits on demand (compact facts, the forms behind "Edit" controls that work without
JavaScript), the graph view (fit to view, colours by type with a legend), and `/`. Screenshots go to
test-artifacts/console/."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
from playwright.async_api import expect

from app.config import Settings
from tests.support.browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, console_in_chromium, png_size
from tests.support.console import seed, serve_console, sign_in_with_browser
from tests.support.server import Server, engram, serve

needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (scripts/system-deps.sh)"
)

FACTS = ["Wrote the first published program", "Translated Menabrea's paper on the Engine", "Born in London in 1815"]


@pytest.fixture(scope="module")
def builtin(db_settings: Settings) -> Iterator[Server]:
    with serve_console(db_settings) as running:
        yield running


async def three_facts(server):
    return await seed(
        server,
        [
            {"name": "Ada Lovelace", "type": "person", "description": "Mathematician", "observations": FACTS},
            {"name": "Analytical Engine", "type": "machine"},
            {"name": "Charles Babbage", "type": "person"},
        ],
        [
            {"from": "Ada Lovelace", "to": "Analytical Engine", "type": "wrote about"},
            {"from": "Charles Babbage", "to": "Ada Lovelace", "type": "corresponded with"},
        ],
    )


@asynccontextmanager
async def ada_in_chromium(server, path: str) -> AsyncIterator[tuple[Any, Any]]:
    """Ada's tenant seeded, its admin signed in, `path` (given Ada's id) open; the policy blocks nothing."""
    t = await three_facts(server)
    blocked: list[str] = []
    async with console_in_chromium(blocked) as page:
        await sign_in_with_browser(page, server, t)
        await page.goto(f"{server.base}{path.format(ada=t.ids['Ada Lovelace'])}")
        yield page, t
    assert not blocked, blocked  # the policy blocked nothing the pages use (the libraries included)


@needs_chromium
async def test_an_entity_page_with_three_facts_reads_first(builtin):
    async with ada_in_chromium(builtin, "/console/entity/{ada}") as (page, _):
        height = await page.evaluate("document.documentElement.scrollHeight")
        await page.screenshot(path=ARTIFACTS / "entity-read.png", full_page=True)
        print(f"entity page with 3 facts: {height} px at 1200 px wide")
        # Every form waits behind a control; the facts are read first.
        assert await page.locator("main form[method=post]:visible").count() == 0
        facts = await page.locator("#observations").inner_text()
        assert all(fact in facts for fact in FACTS)
        # One fact's edit control opens its forms (a <details>: no script involved) and ends it.
        await page.get_by_label(f"Edit observation: {FACTS[2]}").click()
        await page.get_by_label(f"Why it ended: {FACTS[2]}").fill("a wrong date")
        await page.get_by_role("button", name=f"End observation: {FACTS[2]}").click()
        assert await page.locator("#flash").inner_text() == "Observation ended."
        assert FACTS[2] not in await page.locator("#observations").inner_text()
    # Before the forms moved behind edit controls this page was 3,163 px high here.
    assert height < 1600, height
    assert png_size(ARTIFACTS / "entity-read.png")[0] == 1200


async def test_the_root_leads_browsers_to_the_console_and_tells_clients_what_it_is(builtin):
    async with httpx2.AsyncClient(base_url=builtin.base, timeout=10) as http:
        browser = await http.get("/", headers={"Accept": "text/html,application/xhtml+xml"})
        assert browser.status_code == 303 and browser.headers["location"] == f"{builtin.base}/console"
        about = await http.get("/")
        assert about.status_code == 200 and about.headers["content-type"] == "application/json"
        body = about.json()
        assert body["name"] == "Engram" and body["mcp"]["native"] == f"{builtin.base}/mcp"
        assert body["console"] == f"{builtin.base}/console"
        # An MCP client given the bare base URL is told where MCP is, not answered as if it were.
        probe = await http.post("/", json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
        assert probe.status_code == 404 and f"{builtin.base}/mcp" in probe.json()["message"]
        # The MCP endpoint and the OAuth discovery documents are unaffected.
        assert (await http.post("/mcp", json={})).status_code == 401
        assert (await http.get("/.well-known/oauth-protected-resource/mcp")).json()["resource"] == f"{builtin.base}/mcp"
        assert (await http.get("/.well-known/oauth-authorization-server")).json()["issuer"] == builtin.base


def test_the_root_without_a_console_says_what_the_server_is(db_settings):
    with serve(db_settings, ENGRAM_CONSOLE="false") as server:
        answer = httpx2.get(f"{server.base}/", headers={"Accept": "text/html"}, timeout=10)
        assert answer.status_code == 200 and answer.json()["console"] is None
        assert answer.json()["mcp"]["native"] == server.url


@needs_chromium
async def test_the_graph_fits_the_view_with_readable_labels_coloured_by_type(builtin):
    async with ada_in_chromium(builtin, "/console/graph?entity={ada}&depth=1") as (page, t):
        nodes = page.locator("svg#graph g.node")
        await expect(nodes).to_have_count(3)
        await page.wait_for_timeout(1500)  # let the layout settle for the measures and the picture
        frame = await page.locator("svg#graph").bounding_box()
        for i in range(3):
            box = await nodes.nth(i).bounding_box()  # circle and name inside the drawing: fitted
            assert frame["x"] <= box["x"] and box["x"] + box["width"] <= frame["x"] + frame["width"] + 1, box
            assert frame["y"] <= box["y"] and box["y"] + box["height"] <= frame["y"] + frame["height"] + 1, box
            label = await nodes.nth(i).locator("text").bounding_box()
            assert label["height"] >= 12, label  # readable at the fitted zoom
        # Colour by type, named by the legend; the same colour class as the entity page's badge.
        legend = page.locator("#legend li")
        assert sorted(await legend.all_inner_texts()) == ["machine", "person"]
        ada = page.locator(f"svg#graph g.node[data-id='{t.ids['Ada Lovelace']}']")
        person = await ada.get_attribute("class")
        (colour,) = [c for c in person.split() if c.startswith("type-")]
        assert await page.locator("#legend li", has_text="person").get_attribute("class") == colour
        fill = await ada.locator("circle").evaluate("c => getComputedStyle(c).fill")
        assert fill.startswith("rgb(") and fill != "rgb(255, 255, 255)"
        await page.screenshot(path=ARTIFACTS / "graph-fit.png", full_page=True)
        # Zoomed away, then fitted again.
        for _ in range(4):
            await page.get_by_role("button", name="Zoom in").click()
        await page.get_by_role("button", name="Fit").click()
        box = await nodes.nth(0).bounding_box()
        assert frame["x"] <= box["x"] <= frame["x"] + frame["width"]
        await page.goto(f"{builtin.base}/console/entity/{t.ids['Ada Lovelace']}")
        badge = await page.locator("#entity-type").get_attribute("class")
        assert colour in badge.split()


@needs_chromium
async def test_the_edit_controls_work_without_javascript(builtin):
    """<details> opens by itself: with scripts off, a person still edits, adds and ends facts."""
    from playwright.async_api import async_playwright

    t = await three_facts(builtin)
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        context = await browser.new_context(java_script_enabled=False, viewport={"width": 1200, "height": 900})
        page = await context.new_page()
        try:
            await sign_in_with_browser(page, builtin, t)
            await page.goto(f"{builtin.base}/console/entity/{t.ids['Ada Lovelace']}")
            await page.get_by_text("Edit fields").click()
            await page.get_by_label("Description").fill("Mathematician, first programmer")
            await page.get_by_role("button", name="Save changes").click()
            assert await page.locator("#flash").inner_text() == "Saved."
            assert await page.locator("#description").inner_text() == "Mathematician, first programmer"
            await page.get_by_text("Add an observation").click()
            await page.get_by_label("New observation").fill("Corresponded with Faraday")
            await page.get_by_role("button", name="Add observation").click()
            assert "Corresponded with Faraday" in await page.locator("#observations").inner_text()
            await page.get_by_label(f"Edit observation: {FACTS[0]}").click()
            await page.get_by_role("button", name=f"End observation: {FACTS[0]}").click()
            assert await page.locator("#flash").inner_text() == "Observation ended."
            await page.screenshot(path=ARTIFACTS / "entity-no-script.png", full_page=True)
        finally:
            await browser.close()


@needs_chromium
async def test_the_hooks_page_shows_which_episodes_came_from_hooks_by_session(builtin):
    t = await three_facts(builtin)
    made = engram(builtin.env, "apikey", "create", "--tenant", t.id, "--scope", "memory:write", "--name", "hooks")
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    # The key's turns would be its own private memory: this tenant shares its hooks' turns, so that
    # its administrator's page lists them (docs/private-memory.md).
    shared = engram(builtin.env, "hooks", "set", t.id, "--private", "off")
    assert shared.returncode == 0, shared.stderr
    sid = f"s-{uuid.uuid4().hex[:12]}"
    async with httpx2.AsyncClient(base_url=builtin.base, timeout=30) as http:
        for body in (
            {"hook_event_name": "UserPromptSubmit", "prompt": "Who translated Menabrea's paper?"},
            {"hook_event_name": "Stop", "stop_hook_active": False, "last_assistant_message": "Ada Lovelace did."},
        ):
            r = await http.post(
                "/hooks/claude-code",
                json={"session_id": sid, "cwd": "/home/ada/engine", "transcript_path": "/tmp/t.jsonl", **body},
                headers={"Authorization": f"Bearer {key}"},
            )
            assert r.status_code == 200, r.text
    blocked: list[str] = []
    async with console_in_chromium(blocked) as page:
        await sign_in_with_browser(page, builtin, t)
        await page.get_by_role("link", name="Hooks").click()
        sessions = page.locator("#sessions")
        await expect(sessions).to_contain_text(sid)
        assert await sessions.locator("tr", has_text=sid).locator("td").nth(1).inner_text() == "2"  # turns kept
        settings = await page.locator("#claude-code-hooks").inner_text()
        assert f"{builtin.base}/hooks/claude-code" in settings and "allowedEnvVars" in settings
        await page.get_by_role("link", name=sid).click()
        rows = page.locator("#turns tbody tr")
        await expect(rows).to_have_count(2)
        assert "user" in await rows.nth(0).inner_text() and "Menabrea" in await rows.nth(0).inner_text()
        assert "assistant" in await rows.nth(1).inner_text() and "Ada Lovelace did." in await rows.nth(1).inner_text()
        await page.screenshot(path=ARTIFACTS / "hooks-session.png", full_page=True)
        for bad in ("../../etc/passwd", "a%00b", "x" * 300):  # no session id: refused, said so, not a 5xx
            answer = await page.goto(f"{builtin.base}/console/hooks?session={bad}")
            assert answer is not None and answer.status == 400, (bad, answer and answer.status)
        # The tenant's administrator switches capture off and adds a word to redact.
        await page.goto(f"{builtin.base}/console/hooks")
        await page.get_by_label("Keep prompts and answers as episodes").uncheck()
        await page.get_by_label("Words to redact before storing").fill("ACME-*\nhunter?")
        await page.get_by_role("button", name="Save hook settings").click()
        assert await page.locator("#flash").inner_text() == "Hook settings saved."
        assert await page.get_by_label("Keep prompts and answers as episodes").is_checked() is False
        assert await page.get_by_label("Keep them in each user's private memory", exact=False).is_checked() is False
        assert await page.get_by_label("Words to redact before storing").input_value() == "ACME-*\nhunter?"
        async with httpx2.AsyncClient(base_url=builtin.base, timeout=30) as http:
            asked = {"session_id": sid, "hook_event_name": "UserPromptSubmit", "prompt": "Ada's notes on the Engine?"}
            r = await http.post("/hooks/claude-code", json=asked, headers={"Authorization": f"Bearer {key}"})
            assert r.status_code == 200
            # A form posted from elsewhere (no session, no CSRF token) changes nothing.
            forged = await http.post("/console/hooks/settings", data={"capture": "on", "prompt_tokens": "1"})
            assert forged.status_code in (303, 403)
        await page.reload()
        row = page.locator("#sessions").locator("tr", has_text=sid)
        assert await row.locator("td").nth(1).inner_text() == "2"  # capture off: the prompt was not kept
        assert await page.get_by_label("Keep prompts and answers as episodes").is_checked() is False
        await page.goto(f"{builtin.base}/console/admin/audit?tool=console:hook_settings")
        assert "hook-settings:capture,events,deny" in await page.locator("#audit").inner_text()
    assert not blocked, blocked  # the strict policy blocked nothing the page uses
