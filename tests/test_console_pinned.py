"""The console's pinned facts page: the tenant's pins listed with their entities, an Unpin form
posted with the session's CSRF token (refused without it, and for a reader), under the strict CSP,
and the same in headless Chromium."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from app.config import Settings
from tests.support.auth import PASSWORD, add_user
from tests.support.browser import ARTIFACTS, CHROMIUM, console_in_chromium
from tests.support.client import ok
from tests.support.console import CSP, Tenant, seed, serve_console, sign_in_with_browser, table
from tests.support.oauth_agent import Person, oauth_client
from tests.support.server import Server

FACT = "Mainframe backups run at 02:00 every night"
OTHER = "The archive room key is at reception"


@pytest.fixture(scope="module")
def builtin(db_settings: Settings) -> Iterator[Server]:
    with serve_console(db_settings) as running:
        yield running


async def pinned_lab(server: Server) -> Tenant:
    lab = await seed(server, [{"name": "Ops", "type": "team", "observations": [FACT, OTHER]}], [])
    http, _ = oauth_client(server.url, Person(lab.admin.username, PASSWORD, tenant=lab.id))
    async with Client(streamable_http_client(server.url, http_client=http), mode="legacy") as c:
        pin = {"items": [{"entity": "Ops", "observations": [FACT, OTHER]}]}
        assert ok(await c.call_tool("pin_facts", pin))["pinned"] == 2
    return lab


async def test_a_writer_unpins_a_fact(builtin: Server, browse: Any) -> None:
    lab = await pinned_lab(builtin)
    wanda = await browse(add_user(builtin, lab.id, "writer"), lab.id)
    shown = await wanda.get("/console/pinned")
    assert shown.status_code == 200 and CSP in shown.headers["content-security-policy"]
    rows = table(shown.text, "pins")
    assert FACT in rows and OTHER in rows and "Ops" in rows and 'id="pin-count">2<' in shown.text
    csrf = wanda.csrf(shown.text)
    form = {"entity": lab.ids["Ops"], "observation": FACT}
    refused = await wanda.post("/console/pinned/unpin", form)  # no CSRF token: refused, nothing changes
    assert refused.status_code == 403
    done = await wanda.post("/console/pinned/unpin", {**form, "csrf": csrf})
    assert done.status_code == 200 and "Fact unpinned." in done.text
    assert FACT not in table(done.text, "pins") and OTHER in table(done.text, "pins")


async def test_a_reader_sees_the_pins_and_cannot_unpin(builtin: Server, browse: Any) -> None:
    lab = await pinned_lab(builtin)
    rita = await browse(add_user(builtin, lab.id, "reader"), lab.id)
    shown = await rita.get("/console/pinned")
    assert FACT in table(shown.text, "pins") and "Unpin" not in shown.text
    answer = await rita.post(
        "/console/pinned/unpin", {"entity": lab.ids["Ops"], "observation": FACT, "csrf": rita.csrf(shown.text)}
    )
    assert answer.status_code == 403
    assert FACT in table((await rita.get("/console/pinned")).text, "pins")


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (scripts/system-deps.sh)")
async def test_a_person_unpins_in_chromium(builtin: Server) -> None:
    lab = await pinned_lab(builtin)
    blocked: list[str] = []
    async with console_in_chromium(blocked) as page:
        await sign_in_with_browser(page, builtin, lab)
        await page.get_by_role("link", name="Pinned").click()
        await page.wait_for_url("**/console/pinned")
        assert FACT in await page.locator("#pins").inner_text()
        await page.screenshot(path=ARTIFACTS / "pinned.png", full_page=True)
        await page.get_by_role("button", name=f"Unpin: {FACT}").click()
        await page.wait_for_url("**/console/pinned")
        assert "Fact unpinned." in await page.locator("#flash").inner_text()
        listed = await page.locator("#pins").inner_text()
        assert FACT not in listed and OTHER in listed
    assert blocked == []
