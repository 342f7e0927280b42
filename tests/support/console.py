"""The console's tests share: its server, a tenant seeded through MCP, signing in at /console (by
plain HTTP or in Chromium), and the `browse` fixture, which signs people in at the `builtin` server
of the module that asks for it (registered in tests/conftest.py)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from app.config import Settings
from tests.support.auth import PASSWORD, add_user, jwt_part
from tests.support.browser import Browser
from tests.support.client import ok
from tests.support.oauth_agent import Person, hidden_fields, oauth_client
from tests.support.server import Server, serve_builtin

CSP = "default-src 'none'"


def serve_console(db_settings: Settings, **extra: str) -> AbstractContextManager[Server]:
    """The server the console's tests share: builtin auth, limits raised for many sign-ins (`extra`
    overrides any setting)."""
    settings = {
        "ENGRAM_TOKEN_PER_MINUTE": "10000",
        "ENGRAM_AUTHORIZE_PER_MINUTE": "10000",
        "ENGRAM_SIGN_IN_PER_MINUTE": "10000",
        "ENGRAM_API_KEY_CACHE_SECONDS": "0",  # a revoked key is refused at once (docs/auth.md)
    }
    return serve_builtin(db_settings, **(settings | extra))


@dataclass
class Tenant:
    """A tenant with its people and what was put in it through MCP."""

    id: str
    admin: Person
    ids: dict[str, str]  # entity name -> id
    relations: dict[str, str]  # "from|type|to" -> relation id
    subject: str  # the admin's user id, as tokens and history name them


async def seed(server: Server, entities: list[dict[str, Any]], relations: list[dict[str, str]]) -> Tenant:
    tenant = f"console-{uuid.uuid4().hex[:10]}"
    admin = add_user(server, tenant, "admin")
    admin.tenant = tenant
    http, storage = oauth_client(server.url, Person(admin.username, PASSWORD, tenant=tenant))
    async with Client(streamable_http_client(server.url, http_client=http), mode="legacy") as c:
        made = ok(await c.call_tool("upsert_entities", {"entities": entities}))
        rels = ok(await c.call_tool("connect_entities", {"relations": relations})) if relations else {"results": []}
    assert storage.tokens is not None
    claims = jwt_part(storage.tokens.access_token, 1)
    return Tenant(
        tenant,
        admin,
        {r["name"]: r["id"] for r in made["results"]},
        {
            f"{r['relation']['from']}|{r['relation']['type']}|{r['relation']['to']}": r["relation"]["id"]
            for r in rels["results"]
        },
        claims["sub"],
    )


def table(page: str, id: str) -> str:
    return page.split(f'id="{id}"', 1)[1].split("</table>", 1)[0]


async def console_sign_in(server: Server, person: Person, tenant: str) -> Browser:
    """Sign in at /console as `person`, picking `tenant` on the authorization server's page."""
    http = httpx2.AsyncClient(base_url=server.base, follow_redirects=True, timeout=30)
    page = await http.get("/console/sign-in")
    assert 'name="password"' in page.text
    consent = await http.post(
        "/oauth/sign-in", data={**hidden_fields(page.text), "username": person.username, "password": PASSWORD}
    )
    assert 'Open <span class="client">Engram console</span> for which memory?' in consent.text
    assert 'name="remember"' not in consent.text  # the console's tenant page is shown at every sign-in
    landed = await http.post(
        "/oauth/consent", data={**hidden_fields(consent.text), "decision": "allow", "tenant": tenant}
    )
    assert landed.url.path == "/console/find", landed.text
    assert f'id="tenant">{tenant}<' in landed.text
    return Browser(http)


@pytest.fixture
async def browse(builtin: Server) -> AsyncIterator[Any]:
    opened: list[Browser] = []

    async def sign_in(person: Person, tenant: str) -> Browser:
        opened.append(await console_sign_in(builtin, person, tenant))
        return opened[-1]

    yield sign_in
    for browser in opened:
        await browser.http.aclose()


async def sign_in_with_browser(page: Any, server: Server, tenant: Tenant) -> None:
    """Through the console's sign-in: the authorization server's page, then the tenant's choice."""
    await page.goto(f"{server.base}/console")
    await page.get_by_role("link", name="Sign in").click()
    await page.get_by_label("Username").fill(tenant.admin.username)
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Sign in").click()
    await page.get_by_label(tenant.id, exact=False).check()
    await page.get_by_role("button", name="Open").click()
    await page.wait_for_url("**/console/find")
