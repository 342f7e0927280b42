"""A person's own account page: changing their password at /console/account.

What is held: the change needs the current password, checked as at sign-in and throttled with it
(a wrong one counts; once throttled even the right one is refused); it signs out every other
device (browser sessions at the authorization server, other grants such as an assistant's refresh
token) while the session it was made in keeps working; every bad form is refused and changes
nothing; an account without a password has nothing to change; every outcome is an event.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import asyncpg
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from app.config import Settings
from tests.support.auth import PASSWORD, add_user, until_refused
from tests.support.browser import Browser
from tests.support.client import ok
from tests.support.console import console_sign_in, serve_console
from tests.support.oauth_agent import Person, hidden_fields, oauth_client
from tests.support.server import Server

NEW = "a brand new and longer passphrase"
PATH = "/console/account/password"


@pytest.fixture(scope="module")
def builtin(db_settings: Settings) -> Iterator[Server]:
    with serve_console(db_settings, ENGRAM_SIGN_IN_MAX_FAILURES="3") as running:
        yield running


@pytest.fixture
def tenant() -> str:
    return f"acct-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class AccountState:
    """What the owner sees of an account: its password hash, live grants, sessions and events."""

    password_hash: str | None
    live_grants: int
    sessions: int
    events: list[tuple[str, str]]  # password_change (outcome, detail), oldest first


async def account_state(settings: Settings, username: str) -> AccountState:
    conn = await asyncpg.connect(settings.admin_dsn())
    try:
        user = await conn.fetchrow("SELECT id, password_hash FROM engram.users WHERE username = $1", username)
        grants = await conn.fetchval(
            "SELECT count(*) FROM engram.oauth_families WHERE user_id = $1 AND revoked_at IS NULL", user["id"]
        )
        sessions = await conn.fetchval("SELECT count(*) FROM engram.web_sessions WHERE user_id = $1", user["id"])
        events = await conn.fetch(
            "SELECT outcome, detail FROM engram.auth_events WHERE user_id = $1 AND event = 'password_change'"
            " ORDER BY id",
            user["id"],
        )
    finally:
        await conn.close()
    return AccountState(user["password_hash"], grants, sessions, [(e["outcome"], e["detail"]) for e in events])


async def sign_in_status(server: Server, person: Person, password: str) -> int:
    """The authorization server's answer to a sign-in with `password` (303: signed in)."""
    async with httpx2.AsyncClient(base_url=server.base, timeout=30) as http:
        page = await http.get("/console/sign-in", follow_redirects=True)
        fields = {**hidden_fields(page.text), "username": person.username, "password": password}
        return (await http.post("/oauth/sign-in", data=fields)).status_code


async def change(browser: Browser, **fields: str) -> httpx2.Response:
    page = await browser.page("/console/account")
    return await browser.post(PATH, {"csrf": browser.csrf(page), **fields})


async def test_a_change_signs_out_other_devices_and_keeps_this_session(builtin, db_settings, tenant):
    person = add_user(builtin, tenant)
    # An assistant connected through the SDK's OAuth client: it holds a refresh token.
    http, storage = oauth_client(builtin.url, person)
    async with Client(streamable_http_client(builtin.url, http_client=http), mode="legacy") as c:
        ok(await c.call_tool("upsert_entities", {"entities": [{"name": "Before the change", "type": "t"}]}))
    assert storage.tokens is not None and storage.tokens.refresh_token and storage.client_info is not None
    elsewhere = await console_sign_in(builtin, person, tenant)  # another device
    here = await console_sign_in(builtin, person, tenant)

    page = await here.page("/console/account")
    assert f'id="username">{person.username}<' in page and 'id="display-name">Ada Lovelace<' in page
    for field in ("pw-current", "pw-new", "pw-repeat"):
        assert f'<label for="{field}">' in page and f'id="{field}"' in page
    assert 'href="/console/account"' in await here.page("/console/find")  # in the header
    assert (await account_state(db_settings, person.username)).live_grants == 3

    done = await change(here, current=PASSWORD, new=NEW, repeat=NEW)
    assert done.url.path == "/console/account" and "Password changed" in done.text, done.text
    assert "2 other browser sessions ended, 2 other grants revoked" in done.text

    # This session goes on; the assistant's grant and the other console session are revoked.
    assert 'id="heading"' in await here.page("/console/find")
    assert await until_refused(builtin, storage.tokens.access_token)
    async with httpx2.AsyncClient() as raw:
        refreshed = await raw.post(
            f"{builtin.base}/token",
            data={
                "grant_type": "refresh_token",
                "refresh_token": storage.tokens.refresh_token,
                "client_id": storage.client_info.client_id,
            },
        )
    assert refreshed.status_code == 400
    assert (await elsewhere.get("/console/find")).url.path == "/console"
    # The other browser signs in again with a password; this browser's own sign-in stays.
    assert 'name="password"' in (await elsewhere.get("/console/sign-in")).text
    assert 'name="password"' not in (await here.get("/console/sign-in")).text

    assert await sign_in_status(builtin, person, PASSWORD) == 401  # the old password is refused
    assert await sign_in_status(builtin, person, NEW) == 303  # the new one signs in
    state = await account_state(db_settings, person.username)
    assert state.password_hash and state.password_hash.startswith("$argon2id$")
    assert state.events == [("ok", "2 sessions, 2 grants")]
    await asyncio.gather(here.http.aclose(), elsewhere.http.aclose(), http.aclose())


async def test_wrong_current_passwords_count_and_are_throttled(builtin, db_settings, tenant):
    person = add_user(builtin, tenant)
    browser = await console_sign_in(builtin, person, tenant)
    before = await account_state(db_settings, person.username)
    statuses = [(await change(browser, current="not my password", new=NEW, repeat=NEW)).status_code for _ in range(3)]
    assert statuses == [403, 403, 403]  # max failures is 3 here
    throttled = await change(browser, current=PASSWORD, new=NEW, repeat=NEW)
    assert throttled.status_code == 429 and "too many wrong passwords" in throttled.text
    assert await sign_in_status(builtin, person, PASSWORD) == 429  # the same throttle as sign-in
    after = await account_state(db_settings, person.username)
    assert after.password_hash == before.password_hash and after.live_grants == before.live_grants == 1
    assert after.events == [("refused", "wrong_password")] * 3 + [("refused", "throttled")]
    await browser.http.aclose()


async def test_bad_forms_are_refused_and_change_nothing(builtin, db_settings, tenant):
    person = add_user(builtin, tenant)
    browser = await console_sign_in(builtin, person, tenant)
    before = await account_state(db_settings, person.username)
    cases = [
        ({"current": PASSWORD, "new": NEW, "repeat": NEW + "x"}, 400, "differ", "mismatch"),
        ({"current": PASSWORD, "new": "short", "repeat": "short"}, 400, "12 to 1000", "rule"),
        ({"current": PASSWORD, "new": "x" * 1001, "repeat": "x" * 1001}, 400, "12 to 1000", "rule"),
        ({"current": PASSWORD, "new": NEW + "\x00", "repeat": NEW + "\x00"}, 400, "no NUL", "bounds"),
        ({"current": "x" * 1025, "new": NEW, "repeat": NEW}, 400, "at most 1024", "bounds"),
        ({"current": PASSWORD, "new": PASSWORD, "repeat": PASSWORD}, 400, "is the current one", "unchanged"),
        ({"new": NEW, "repeat": NEW}, 403, "current password is wrong", "wrong_password"),
    ]
    for fields, status, message, _ in cases:
        answer = await change(browser, **fields)
        assert answer.status_code == status and message in answer.text, (fields.keys(), answer.text)
        assert 'href="/console/account"' in answer.text  # the refusal links back to the page
    for csrf in ({}, {"csrf": "x" * 43}):
        forged = await browser.post(PATH, {**csrf, "current": PASSWORD, "new": NEW, "repeat": NEW})
        assert forged.status_code == 403 and "did not come from this console" in forged.text
    after = await account_state(db_settings, person.username)
    assert after.password_hash == before.password_hash and after.live_grants == 1
    assert after.events == [("refused", why) for *_, why in cases]  # no event without the CSRF token
    assert 'id="heading"' in await browser.page("/console/find")  # still signed in
    await browser.http.aclose()


async def test_an_account_without_a_password_has_nothing_to_change(builtin, db_settings, tenant):
    """An account linked to an upstream provider holds no password (made so here by the owner)."""
    person = add_user(builtin, tenant)
    browser = await console_sign_in(builtin, person, tenant)
    conn = await asyncpg.connect(db_settings.admin_dsn())
    try:
        await conn.execute("UPDATE engram.users SET password_hash = NULL WHERE username = $1", person.username)
    finally:
        await conn.close()
    page = await browser.page("/console/account")
    assert 'id="no-password"' in page and 'name="current"' not in page and PATH not in page
    forged = await change(browser, current="", new=NEW, repeat=NEW)
    assert forged.status_code == 400 and "external provider" in forged.text
    after = await account_state(db_settings, person.username)
    assert after.password_hash is None and after.live_grants == 1
    assert after.events == [("refused", "no_password")]
    await browser.http.aclose()
