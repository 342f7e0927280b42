"""Connected applications in the console, end to end: a real SDK client connects through the
built-in authorization server, the person sees it in headless Chromium and disconnects it, and
its tokens stop working and its remembered consent is gone.

What is held: a person sees and ends only their own grants (the user is the session token's, no
form names one), a forged or hostile post changes nothing, and the console's own session is one
of the listed applications — disconnecting it signs the person out.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import asyncpg
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthToken

from app.config import Settings
from tests.support.auth import Flow, add_user, register, until_refused
from tests.support.browser import ARTIFACTS, CHROMIUM, console_in_chromium, png_size
from tests.support.client import ok
from tests.support.console import CSP, Tenant, console_sign_in, serve_console, sign_in_with_browser
from tests.support.oauth_agent import Person, oauth_client
from tests.support.server import Server, engram

DISCONNECT = "/console/apps/disconnect"


@pytest.fixture(scope="module")
def builtin(db_settings: Settings) -> Iterator[Server]:
    with serve_console(db_settings) as running:
        yield running


@dataclass(frozen=True)
class Connected:
    """An assistant's registration and the tokens of its grant."""

    client_id: str
    tokens: OAuthToken


def person_on(server: Server, tenant: str, *, remember: bool = False) -> Person:
    person = add_user(server, tenant, "writer")
    person.tenant, person.remember = tenant, remember
    return person


async def connect_assistant(server: Server, person: Person) -> Connected:
    """The SDK's OAuth client connects by URL alone (registers, the person signs in and consents)
    and writes once through its grant."""
    http, storage = oauth_client(server.url, person)
    async with Client(streamable_http_client(server.url, http_client=http), mode="legacy") as c:
        ok(await c.call_tool("upsert_entities", {"entities": [{"name": "Written by the assistant", "type": "note"}]}))
    assert storage.client_info is not None and storage.client_info.client_id and storage.tokens is not None
    return Connected(storage.client_info.client_id, storage.tokens)


async def refresh(server: Server, client_id: str, refresh_token: str | None) -> httpx2.Response:
    assert refresh_token
    async with httpx2.AsyncClient() as http:
        form = {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": client_id}
        return await http.post(f"{server.base}/token", data=form)


async def held(settings: Settings, username: str) -> tuple[dict[str, bool], int]:
    """The person's grants (id -> revoked) and remembered consents, read by the owner."""
    conn = await asyncpg.connect(settings.admin_dsn())
    try:
        user = await conn.fetchval("SELECT id FROM engram.users WHERE username = $1", username)
        rows = await conn.fetch("SELECT id::text, revoked_at FROM engram.oauth_families WHERE user_id = $1", user)
        consents = await conn.fetchval("SELECT count(*) FROM engram.oauth_consents WHERE user_id = $1", user)
    finally:
        await conn.close()
    return {r["id"]: r["revoked_at"] is not None for r in rows}, consents


def disconnect_events(server: Server, username: str) -> list[list[str]]:
    """`engram audit auth` lines of disconnections by `username`: [outcome, client, tenant, detail]."""
    listed = engram(server.env, "audit", "auth", "--limit", "10000")
    assert listed.returncode == 0, listed.stderr
    rows = [line.split("\t") for line in listed.stdout.splitlines()]
    return [[r[2], *r[4:7]] for r in rows if r[1:2] == ["disconnect"] and r[3] == username]


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (scripts/system-deps.sh)")
async def test_a_person_disconnects_an_assistant_in_chromium(builtin, db_settings):
    tenant = f"apps-{uuid.uuid4().hex[:10]}"
    person = person_on(builtin, tenant, remember=True)
    first = await connect_assistant(builtin, person)
    # The remembered consent skips the page: a second grant of the same assistant, without asking.
    flow = Flow(builtin, person, first.client_id, tenant)
    person.pages.clear()
    second = (await flow.exchange(await flow.code())).json()
    assert not person.pages and "access_token" in second

    blocked: list[str] = []
    async with console_in_chromium(blocked) as page:
        await sign_in_with_browser(page, builtin, Tenant(tenant, person, {}, {}, ""))
        await page.get_by_role("link", name="Connected applications").click()
        await page.wait_for_url("**/console/apps")
        apps = page.locator("#apps")
        assistant = apps.locator("section", has=page.get_by_role("heading", name="Test Assistant"))
        shown = await assistant.inner_text()
        for fact in (tenant, "memory:read memory:write", "127.0.0.1:33418", first.client_id, "2 grants", "yes"):
            assert fact in shown, fact
        console = await apps.locator("section", has=page.get_by_role("heading", name="Engram console")).inner_text()
        assert tenant in console and "this session" in console and "memory:admin" not in console
        await page.screenshot(path=ARTIFACTS / "apps.png", full_page=True)

        await page.get_by_role("button", name=f"Disconnect Test Assistant from {tenant}").click()
        await page.wait_for_url("**/console/apps")
        assert await page.locator("#flash").inner_text() == (
            f"Disconnected Test Assistant from {tenant} (2 grants revoked, remembered consent forgotten)."
        )
        assert "Test Assistant" not in await apps.inner_text() and "this session" in await apps.inner_text()
        await page.screenshot(path=ARTIFACTS / "apps-disconnected.png", full_page=True)

        # Both grants end: their refresh tokens are refused at once, their access tokens within seconds.
        for access, refresh_token in (
            (first.tokens.access_token, first.tokens.refresh_token),
            (second["access_token"], second["refresh_token"]),
        ):
            refused = await refresh(builtin, first.client_id, refresh_token)
            assert refused.status_code == 400 and refused.json()["error"] == "invalid_grant"
            assert await until_refused(builtin, access)
        # The consent is forgotten: the next authorization asks again.
        person.pages.clear()
        person.remember = False
        await flow.code()
        assert len(person.pages) == 1 and 'name="decision"' in person.pages[0] and "Test Assistant" in person.pages[0]

        # Disconnecting the console from this session's tenant signs this browser out.
        await page.reload()
        await page.get_by_role("button", name=f"Disconnect Engram console from {tenant} and sign out").click()
        await page.wait_for_url(f"{builtin.base}/console")
        assert await page.get_by_role("link", name="Sign in").is_visible()
        await page.goto(f"{builtin.base}/console/apps")
        await page.wait_for_url(f"{builtin.base}/console")

    assert not blocked, blocked  # the policy blocked nothing the page uses
    for name in ("apps", "apps-disconnected"):
        width, height = png_size(ARTIFACTS / f"{name}.png")
        assert width == 1200 and height >= 600
    events = disconnect_events(builtin, person.username)
    assert ["ok", first.client_id, tenant, "2 grant(s) revoked; remembered consent forgotten"] in events
    assert ["ok", "engram-console", tenant, "1 grant(s) revoked"] in events


async def test_only_ones_own_applications_are_seen_or_disconnected(builtin, db_settings):
    ta, tb = f"apps-{uuid.uuid4().hex[:10]}", f"apps-{uuid.uuid4().hex[:10]}"
    alice, bob = person_on(builtin, ta, remember=True), person_on(builtin, tb)
    assistant = await connect_assistant(builtin, alice)
    # A second application whose self-chosen name is markup: shown as text, never as markup.
    hostile = (await register(builtin, client_name='<script>alert("x")</script><b>Evil</b>')).json()["client_id"]
    flow = Flow(builtin, alice, hostile, ta)
    await flow.exchange(await flow.code())
    a, b = await console_sign_in(builtin, alice, ta), await console_sign_in(builtin, bob, tb)

    mine = await a.page("/console/apps")
    assert assistant.client_id in mine and hostile in mine and "Test Assistant" in mine
    assert "<script>alert" not in mine and "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&lt;b&gt;Evil" in mine
    theirs = await b.page("/console/apps")
    for what in (assistant.client_id, hostile, ta, "Test Assistant", "Evil"):
        assert what not in theirs, what
    assert "Engram console" in theirs and tb in theirs

    before = await held(db_settings, alice.username)
    assert before[1] == 2 and len(before[0]) == 3 and not any(before[0].values())  # two assistants, the console
    # Bob, with his own valid CSRF token, names Alice's client and tenant (or his own tenant): not found.
    csrf = b.csrf(theirs)
    for data in (
        {"client": assistant.client_id, "tenant": ta},
        {"client": assistant.client_id, "tenant": tb},
        {"client": hostile, "tenant": ta},
        {"client": "engram-console", "tenant": ta},
        {"client": "no-such-client", "tenant": tb},
        {"client": assistant.client_id, "tenant": ta, "user": alice.username},
    ):
        answer = await b.post(DISCONNECT, {**data, "csrf": csrf})
        assert answer.status_code == 404 and "not_found" in answer.text, (data, answer.text)
    # Alice's own session, without its CSRF token, with a made-up one, or with Bob's.
    for token in ({}, {"csrf": "x" * 43}, {"csrf": csrf}):
        answer = await a.post(DISCONNECT, {"client": assistant.client_id, "tenant": ta, **token})
        assert answer.status_code == 403 and "did not come from this console" in answer.text
    # Hostile fields: refused before anything is looked up.
    own = a.csrf(mine)
    for data, words in (
        ({"client": "x" * 2001, "tenant": ta}, "client"),
        ({"client": "a\x00b", "tenant": ta}, "NUL"),
        ({"client": "", "tenant": ta}, "client"),
        ({"tenant": ta}, "client"),
        ({"client": assistant.client_id, "tenant": "t\x00"}, "NUL"),
        ({"client": assistant.client_id, "tenant": "t" * 201}, "tenant"),
        ({"client": assistant.client_id, "tenant": "no spaces; DROP TABLE x"}, "tenant"),
        ({"client": assistant.client_id}, "tenant"),
    ):
        answer = await a.post(DISCONNECT, {**data, "csrf": own})
        assert answer.status_code == 400 and "invalid" in answer.text and words in answer.text, (data, answer.text)
        assert CSP in answer.headers["content-security-policy"]
    huge = await a.post(DISCONNECT, {"client": "z" * 200_000, "tenant": ta, "csrf": own})
    assert huge.status_code == 413
    # Nobody signed in: sent to sign in, nothing done.
    async with httpx2.AsyncClient(base_url=builtin.base) as anonymous:
        assert (await anonymous.get("/console/apps")).headers["location"] == "/console"
        forged = await anonymous.post(DISCONNECT, data={"client": assistant.client_id, "tenant": ta})
        assert forged.status_code == 303 and forged.headers["location"] == "/console"
    assert await held(db_settings, alice.username) == before
    assert ok_status(await refresh(builtin, assistant.client_id, assistant.tokens.refresh_token))

    # The page itself: the strict policy, no inline script or style, labelled buttons in a table.
    page = await a.get("/console/apps")
    assert (
        CSP in page.headers["content-security-policy"]
        and "unsafe-inline" not in page.headers["content-security-policy"]
    )
    assert "<script" not in page.text and "style=" not in page.text and "<style" not in page.text
    assert '<th scope="col">Tenant</th>' in page.text
    assert f'Disconnect<span class="visually-hidden"> Test Assistant from {ta}</span>' in page.text
    assert not [e for e in disconnect_events(builtin, alice.username) if e[0] == "ok"]
    assert ["not_found", assistant.client_id, ta, ""] in disconnect_events(builtin, bob.username)
    for browser in (a, b):
        await browser.http.aclose()


def ok_status(answer: httpx2.Response) -> bool:
    return answer.status_code == 200 and "access_token" in answer.json()


async def test_a_long_listing_is_bounded_and_says_so(builtin, db_settings):
    tenant = f"apps-{uuid.uuid4().hex[:10]}"
    person = person_on(builtin, tenant)
    browser = await console_sign_in(builtin, person, tenant)
    conn = await asyncpg.connect(db_settings.admin_dsn())
    try:  # 201 live grants of an application the server no longer knows
        await conn.execute(
            """WITH f AS (
                   INSERT INTO engram.oauth_families (client_id, user_id, tenant_key, scopes, resource)
                   SELECT 'gone-client', u.id, $2, ARRAY['memory:read'], $3
                     FROM engram.users u, generate_series(1, 201) WHERE u.username = $1 RETURNING id)
               INSERT INTO engram.oauth_refresh_tokens (token_hash, family_id, expires_at)
               SELECT sha256(convert_to(id::text, 'UTF8')), id, now() + interval '1 day' FROM f""",
            person.username,
            tenant,
            builtin.url,
        )
    finally:
        await conn.close()
    page = await browser.page("/console/apps")
    assert 'id="more"' in page and "more than 200" in page
    assert "gone-client" in page and "unknown (no longer registered)" in page
    # Disconnecting ends every grant of it on that tenant, shown or not.
    answer = await browser.post(DISCONNECT, {"client": "gone-client", "tenant": tenant, "csrf": browser.csrf(page)})
    assert answer.status_code == 200 and f"Disconnected gone-client from {tenant} (201 grants revoked)." in answer.text
    assert 'id="more"' not in answer.text and "gone-client" not in answer.text.split('id="apps"')[1]
    await browser.http.aclose()
