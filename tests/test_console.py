"""The console end to end: a real server (builtin auth mode), the real database, people signing in
through the built-in authorization server, and a real headless Chromium for the pages and the graph.

What is held: every action goes through the services as the signed-in person (history and audit
name them), the tenant is the token's only (no URL or form reaches another), a reader cannot
write, every form needs the session's CSRF token, every answer carries the strict policy, and
hostile input is refused without changing anything.
"""

from __future__ import annotations

import asyncio
import html
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

import asyncpg
import httpx2
import orjson
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from starlette.applications import Starlette

from app.config import Settings
from app.console import OFF_IN_OIDC_MODE, console_routes
from tests.support.auth import add_user
from tests.support.browser import ARTIFACTS, CHROMIUM, console_in_chromium, png_size
from tests.support.client import connect, mcp_headers, ok
from tests.support.console import CSP, Tenant, console_sign_in, seed, serve_console, sign_in_with_browser, table
from tests.support.oauth_agent import Person, hidden_fields, oauth_client
from tests.support.oidc_issuer import CLIENT_ID as UPSTREAM_CLIENT
from tests.support.oidc_issuer import StandInIssuer
from tests.support.server import Server, engram, serve, serve_builtin


@pytest.fixture(scope="module")
def builtin(db_settings: Settings) -> Iterator[Server]:
    with serve_console(db_settings) as running:
        yield running


async def mcp_call(server: Server, person: Person, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """A tool call as `person` (signed in through the SDK's OAuth client, on their tenant)."""
    http, _ = oauth_client(server.url, Person(person.username, person.password, tenant=person.tenant))
    async with Client(streamable_http_client(server.url, http_client=http), mode="legacy") as c:
        return ok(await c.call_tool(tool, args))


def main(page: str) -> str:
    """The page without its header (which names the signed-in person)."""
    return page.split("<main", 1)[1]


@pytest.fixture(scope="module")
async def acme(builtin: Server) -> Tenant:
    return await seed(
        builtin,
        [
            {
                "name": "Ada Lovelace",
                "type": "person",
                "description": "Mathematician",
                "observations": ["Wrote the first program"],
            },
            {"name": "Analytical Engine", "type": "machine", "observations": ["Never finished"]},
            {"name": "Charles Babbage", "type": "person", "observations": ["Designed calculating engines"]},
            {"name": "Difference Engine", "type": "machine"},
        ],
        [
            {"from": "Ada Lovelace", "to": "Analytical Engine", "type": "wrote about"},
            {"from": "Charles Babbage", "to": "Analytical Engine", "type": "designed"},
            {"from": "Charles Babbage", "to": "Difference Engine", "type": "designed"},
        ],
    )


@pytest.fixture(scope="module")
async def other(builtin: Server) -> Tenant:
    return await seed(
        builtin,
        [
            {"name": "Bob Secret", "type": "person", "observations": ["Only tenant B knows this"]},
            {"name": "Vault", "type": "place"},
        ],
        [{"from": "Bob Secret", "to": "Vault", "type": "guards"}],
    )


async def entity_state(server: Server, tenant: Tenant, name: str) -> dict[str, Any]:
    return await mcp_call(server, tenant.admin, "get_entity", {"name": name, "include_history": True})


# --- signing in --------------------------------------------------------------------------------


async def test_sign_in_keeps_the_token_on_the_server(builtin, acme, browse):
    anonymous = await httpx2.AsyncClient(base_url=builtin.base).get("/console")
    assert anonymous.status_code == 200 and 'id="sign-in"' in anonymous.text
    assert CSP in anonymous.headers["content-security-policy"]
    data = await httpx2.AsyncClient(base_url=builtin.base).get(f"/console/api/graph?entity={acme.ids['Ada Lovelace']}")
    assert data.status_code == 401 and "Ada" not in data.text
    browser = await browse(acme.admin, acme.id)
    cookies = {c.name: c for c in browser.http.cookies.jar}
    session = cookies["engram-console"]
    assert session.has_nonstandard_attr("HttpOnly") and session.get_nonstandard_attr("SameSite").lower() == "lax"
    assert session.value.count(".") == 0 and not session.value.startswith("ey")  # an opaque id, not a JWT
    page = await browser.page("/console/find")
    assert "eyJ" not in page  # no token in the page either
    assert 'id="role">admin<' in page and "Administer" in page
    # Signed out, the session is gone: the old cookie opens nothing.
    signed_out = await browser.post("/console/sign-out", {"csrf": browser.csrf(page)})
    assert signed_out.url.path == "/console"
    # ... and out of the authorization server: the next sign-in asks for the password again.
    assert 'name="password"' in (await browser.get("/console/sign-in")).text
    replay = httpx2.AsyncClient(base_url=builtin.base, cookies={"engram-console": session.value})
    assert (await replay.get("/console/find")).headers["location"] == "/console"


async def test_signing_in_through_an_upstream_provider_opens_the_console(db_settings):
    """With an external identity provider behind the built-in server, the console's sign-in is that
    provider's OpenID Connect login, then the same choice of memory."""
    with StandInIssuer() as issuer:
        corp = {"name": "corp", "label": "Corp SSO", "issuer": issuer.url, "client_id": UPSTREAM_CLIENT}
        upstream = orjson.dumps([{**corp, "client_secret": "upstream-secret"}]).decode()
        with serve_builtin(db_settings, ENGRAM_LOCAL_ACCOUNTS="false", ENGRAM_UPSTREAM_PROVIDERS=upstream) as server:
            async with httpx2.AsyncClient(base_url=server.base, follow_redirects=True, timeout=30) as http:
                page = await http.get("/console/sign-in")
                assert "Sign in with Corp SSO" in page.text and 'name="password"' not in page.text
                start = re.search(r'href="([^"]*/oauth/upstream/corp[^"]*)"', page.text)
                assert start is not None
                # The provider approves at once and sends the browser back to Engram's callback.
                consent = await http.get(urljoin(server.base, html.unescape(start[1])))
                assert 'Open <span class="client">Engram console</span> for which memory?' in consent.text
                personal = re.findall(r'name="tenant" id="[^"]+" value="([^"]+)"', consent.text)
                assert len(personal) == 1
                form = {**hidden_fields(consent.text), "decision": "allow", "tenant": personal[0]}
                landed = await http.post("/oauth/consent", data=form)
                assert landed.url.path == "/console/find", landed.text
                assert f'id="tenant">{personal[0]}<' in landed.text


async def test_a_forged_callback_or_a_replayed_code_signs_nobody_in(builtin):
    http = httpx2.AsyncClient(base_url=builtin.base)
    answer = await http.get("/console/callback", params={"code": "x", "state": "y", "iss": builtin.base})
    assert answer.status_code == 400 and "expired or was not started here" in answer.text
    assert "engram-console" not in answer.cookies


async def test_sessions_are_shared_by_replicas_and_each_refresh_token_is_spent_once(db_settings):
    """Sessions are kept in the database: a second process serving the same public URL (a replica
    behind one ingress, or the first one restarted) serves a session it never saw. Requests racing
    on both to refresh an ending access token (a minute here) spend its single-use refresh token
    once, and a revoked grant (`engram revoke --user`) ends the session on both."""
    short = {"ENGRAM_ACCESS_TOKEN_TTL_SECONDS": "60"}
    with (
        serve_builtin(db_settings, **short) as first,
        serve_builtin(db_settings, **short, ENGRAM_PUBLIC_URL=first.base) as second,
    ):
        tenant = f"console-{uuid.uuid4().hex[:10]}"
        person = add_user(first, tenant, "writer")
        browser = await console_sign_in(first, person, tenant)
        session = {"engram-console": browser.http.cookies["engram-console"]}
        replica = httpx2.AsyncClient(base_url=second.base, cookies=session)
        page = await replica.get("/console/find")
        assert page.status_code == 200 and f'id="tenant">{tenant}<' in page.text

        def refreshes() -> int:
            listed = engram(first.env, "audit", "auth", "--limit", "10000")
            assert listed.returncode == 0, listed.stderr
            return sum(
                1
                for line in listed.stdout.splitlines()
                if line.split("\t")[1:5] == ["refresh", "ok", person.username, "engram-console"]
            )

        assert refreshes() == 0
        await asyncio.sleep(31)  # past the point where the console refreshes a 60-second token
        racing = [client.get("/console/find", follow_redirects=False) for client in (browser.http, replica) * 4]
        answers = await asyncio.gather(*racing)
        assert [a.status_code for a in answers] == [200] * 8
        assert all(f'id="tenant">{tenant}<' in a.text for a in answers)
        assert refreshes() == 1  # a second spend would have revoked the grant
        assert (await replica.get("/console/find", follow_redirects=False)).status_code == 200
        revoked = engram(first.env, "revoke", "--user", person.username)
        assert revoked.returncode == 0, revoked.stderr
        for client in (browser.http, replica):
            for _ in range(60):  # replicas read the revoked grants every few seconds
                answer = await client.get("/console/find", follow_redirects=False)
                if answer.status_code == 303:
                    break
                await asyncio.sleep(0.5)
            assert answer.status_code == 303 and answer.headers["location"] == "/console"
        await browser.http.aclose()
        await replica.aclose()


# --- isolation --------------------------------------------------------------------------------


async def test_a_member_of_one_tenant_reaches_nothing_of_another(builtin, acme, other, browse):
    bob = await browse(other.admin, other.id)
    page = await bob.page("/console/find")
    csrf = bob.csrf(page)
    ada, ada_rel = acme.ids["Ada Lovelace"], acme.relations["Ada Lovelace|wrote about|Analytical Engine"]
    before = await entity_state(builtin, acme, "Ada Lovelace")

    # Reading by id, through every page and the graph JSON.
    for path in (f"/console/entity/{ada}", f"/console/graph?entity={ada}", f"/console/api/graph?entity={ada}"):
        answer = await bob.get(path)
        assert answer.status_code == 404, (path, answer.status_code)
        assert "Mathematician" not in answer.text and "first program" not in answer.text
    # By name: a search and a listing show only the own tenant.
    found = (await bob.page("/console/find?q=Ada+Lovelace")).split('id="results-heading"')[1]
    assert "Ada Lovelace" not in found and "0 results" in found
    assert "Ada Lovelace" not in main(await bob.page("/console/find"))
    # Forged posts with A's ids and names, with Bob's own valid CSRF token.
    vault = other.ids["Vault"]
    forged = [
        (f"/console/entity/{ada}/observations/add", {"observation": "planted by B"}),
        (f"/console/entity/{ada}/fields", {"name": "Hacked", "type": "person"}),
        (f"/console/entity/{ada}/delete", {}),
        (f"/console/entity/{ada}/restore", {}),
        (f"/console/entity/{ada}/connect", {"direction": "out", "type": "owns", "other": vault}),
        (f"/console/entity/{vault}/connect", {"direction": "out", "type": "owns", "other": ada}),
        (f"/console/entity/{vault}/connect", {"direction": "in", "type": "owns", "other": "Ada Lovelace"}),
        (f"/console/entity/{vault}/disconnect", {"relation": ada_rel}),
    ]
    for path, data in forged:
        answer = await bob.post(path, {**data, "csrf": csrf})
        assert answer.status_code == 404, (path, answer.status_code, answer.text)
    # A tenant switch to a tenant Bob is not a member of is refused by the authorization server.
    start = await bob.get("/console/sign-in")
    assert "Engram console" in start.text and acme.id not in start.text  # only his own tenants are offered
    refused = await bob.post("/oauth/consent", {**hidden_fields(start.text), "decision": "allow", "tenant": acme.id})
    assert refused.status_code == 403 and "not a member" in refused.text
    # A tenant named in the URL is ignored: the session's token decides.
    assert f'id="tenant">{other.id}<' in await bob.page(f"/console/find?tenant={acme.id}")

    after = await entity_state(builtin, acme, "Ada Lovelace")
    assert after["version"] == before["version"] and after["observations"] == before["observations"]
    assert [r["id"] for r in after["relations"]] == [r["id"] for r in before["relations"]]
    assert "Vault" not in orjson.dumps(after).decode()


async def test_a_reader_sees_no_forms_and_cannot_write(builtin, acme, browse):
    reader = add_user(builtin, acme.id, "reader")
    rita = await browse(reader, acme.id)
    ada = acme.ids["Ada Lovelace"]
    page = await rita.page(f"/console/entity/{ada}")
    assert "Ada Lovelace" in page and 'id="role">reader<' in page
    for form in ('id="add-observation"', 'id="connect"', 'id="edit"', 'id="delete"', "/disconnect", "/remove"):
        assert form not in page
    before = await entity_state(builtin, acme, "Ada Lovelace")
    csrf = rita.csrf(page)  # the sign-out form's: the session's token
    for path, data in (
        (f"/console/entity/{ada}/observations/add", {"observation": "a reader's note"}),
        (f"/console/entity/{ada}/fields", {"name": "Ada", "type": "person"}),
        (f"/console/entity/{ada}/delete", {}),
    ):
        answer = await rita.post(path, {**data, "csrf": csrf})
        assert answer.status_code == 403 and "does not allow" in answer.text
    assert (await rita.get("/console/admin")).status_code == 403
    assert (await rita.post("/console/admin/export", {"csrf": csrf})).status_code == 403
    assert (await entity_state(builtin, acme, "Ada Lovelace"))["version"] == before["version"]


# --- CSRF, headers, hostile input --------------------------------------------------------------


async def test_posts_need_the_sessions_csrf_token(builtin, acme, browse):
    alice = await browse(acme.admin, acme.id)
    engine = acme.ids["Analytical Engine"]
    before = await entity_state(builtin, acme, "Analytical Engine")
    for data in ({"observation": "no token"}, {"observation": "wrong token", "csrf": "x" * 43}):
        answer = await alice.post(f"/console/entity/{engine}/observations/add", data)
        assert answer.status_code == 403 and "did not come from this console" in answer.text
    # Another session's token is no better.
    second = await browse(acme.admin, acme.id)
    other_token = second.csrf(await second.page("/console/find"))
    answer = await alice.post(f"/console/entity/{engine}/observations/add", {"observation": "x", "csrf": other_token})
    assert answer.status_code == 403
    assert (await alice.post("/console/sign-out", {})).status_code == 403
    assert (await entity_state(builtin, acme, "Analytical Engine"))["version"] == before["version"]


async def test_every_answer_carries_the_policy(builtin, acme, browse):
    alice = await browse(acme.admin, acme.id)
    ada = acme.ids["Ada Lovelace"]
    find = await alice.page("/console/find")
    static = re.findall(r'href="(/console/static/[^"]+)"', find)
    assert len(static) == 2
    paths = [
        "/console",
        "/console/find",
        "/console/find?q=engine",
        f"/console/entity/{ada}",
        f"/console/entity/{ada}?as_of=2000-01-01T00:00",
        f"/console/entity/{ada}?ended=1",
        f"/console/graph?entity={ada}",
        f"/console/api/graph?entity={ada}",
        "/console/admin",
        "/console/admin/audit",
        "/console/apps",
        "/console/account",
        f"/console/entity/{uuid.uuid4()}",
        "/console/entity/not-an-id",
        *static,
    ]
    for path in paths:
        answer = await alice.get(path)
        policy = answer.headers.get("content-security-policy", "")
        assert CSP in policy and "script-src 'self'" in policy and "frame-ancestors 'none'" in policy, path
        assert "unsafe-inline" not in policy and answer.headers["x-frame-options"] == "DENY", path
    versioned = await alice.get(static[0])
    assert versioned.status_code == 200 and "immutable" in versioned.headers["cache-control"]
    assert (
        await alice.get(static[0].replace("/static/", "/static/0").rsplit("/", 2)[0] + "/x/console.css")
    ).status_code == 404
    # No inline script or style anywhere: the policy would block it, so none is written.
    for path in paths[:12]:
        text = (await alice.get(path)).text
        assert "<script>" not in text and "style=" not in text and "<style" not in text, path


async def test_hostile_input_is_refused_and_changes_nothing(builtin, acme, browse):
    alice = await browse(acme.admin, acme.id)
    babbage = acme.ids["Charles Babbage"]
    page = await alice.page(f"/console/entity/{babbage}")
    csrf = alice.csrf(page)
    before = await entity_state(builtin, acme, "Charles Babbage")
    cases = [
        ("observations/add", {"observation": "nul \x00 inside"}, 400, "NUL"),
        ("observations/add", {"observation": "x" * 4001}, 400, "at most 4000"),
        ("observations/add", {"observation": "   "}, 400, "invalid"),
        ("fields", {"name": "y" * 201, "type": "person"}, 400, "at most 200"),
        ("fields", {"name": "Charles\x00", "type": "person"}, 400, "NUL"),
        ("fields", {"name": "Charles Babbage", "type": "person", "certainty": "lots"}, 400, "certainty"),
        ("fields", {"name": "Charles Babbage", "type": "person", "version": "-1"}, 400, "version"),
        ("fields", {"name": "Ada Lovelace", "type": "person"}, 409, "already named"),
        ("connect", {"direction": "sideways", "type": "t", "other": "Ada Lovelace"}, 400, "direction"),
        ("connect", {"direction": "out", "type": "t" * 101, "other": "Ada Lovelace"}, 400, "at most 100"),
        ("connect", {"direction": "out", "type": "knows", "other": "Nobody At All"}, 404, "not_found"),
        ("disconnect", {"relation": "'; DROP TABLE x; --"}, 400, "relation"),
        ("disconnect", {"relation": str(uuid.uuid4())}, 404, "no such relation"),
    ]
    for action, data, status, words in cases:
        answer = await alice.post(f"/console/entity/{babbage}/{action}", {**data, "csrf": csrf})
        assert answer.status_code == status, (action, data, answer.status_code)
        assert words in answer.text, (action, words)
        assert CSP in answer.headers["content-security-policy"]
    huge = await alice.post(f"/console/entity/{babbage}/observations/add", {"observation": "z" * 200_000, "csrf": csrf})
    assert huge.status_code == 413
    for bad in (
        "/console/find?q=" + "q" * 1001,
        "/console/find?after=yesterday",
        "/console/graph?entity=" + babbage + "&depth=9",
    ):
        answer = await alice.get(bad)
        assert answer.status_code == 400 and "invalid" in answer.text, bad
    after = await entity_state(builtin, acme, "Charles Babbage")
    assert after["version"] == before["version"] and after["observations"] == before["observations"]
    assert len(after["relations"]) == len(before["relations"])


# --- edits through the services: history and audit name the person ---------------------------


async def test_every_edit_lands_in_history_and_audit_with_the_person(builtin, browse):
    t = await seed(builtin, [{"name": "Edited", "type": "note"}, {"name": "Linked", "type": "note"}], [])
    alice = await browse(t.admin, t.id)
    eid = t.ids["Edited"]
    csrf = alice.csrf(await alice.page(f"/console/entity/{eid}"))
    steps = [
        ("observations/add", {"observation": "first fact"}, "Observation added."),
        ("observations/remove", {"observation": "first fact"}, "Observation removed."),
        ("fields", {"name": "Edited", "type": "note", "description": "now described", "certainty": "70"}, "Saved."),
        ("connect", {"direction": "in", "type": "mentions", "other": "Linked"}, "Connected."),
        ("delete", {}, "Deleted."),
        ("restore", {}, "Restored."),
    ]
    for action, data, flash in steps:
        answer = await alice.post(f"/console/entity/{eid}/{action}", {**data, "csrf": csrf})
        assert answer.status_code == 200 and answer.url.path == f"/console/entity/{eid}", (action, answer.text)
        assert flash in answer.text, action
    relation = (await entity_state(builtin, t, "Edited"))["relations"][0]
    gone = await alice.post(f"/console/entity/{eid}/disconnect", {"relation": relation["id"], "csrf": csrf})
    assert "Disconnected." in gone.text

    history = await mcp_call(builtin, t.admin, "entity_history", {"id": eid, "limit": 20})
    actions = [e["action"] for e in history["entries"]]
    assert actions[:7] == [
        "unrelated",
        "restored",
        "deleted",
        "related",
        "updated",
        "observations_removed",
        "observations_added",
    ]
    assert {e["actor"] for e in history["entries"][:7]} == {t.subject}
    page = await alice.page(f"/console/entity/{eid}")
    assert "changed certainty from (empty) to 70; description from (empty) to now described" in page
    assert "connected Linked —mentions→ Edited" in page

    audit = await alice.page("/console/admin/audit")
    for tool in (
        "console:append_observations",
        "console:remove_observations",
        "console:update_entity",
        "console:connect",
        "console:remove_entities",
        "console:restore_entities",
        "console:disconnect",
    ):
        assert tool in audit, tool
    assert f"{t.subject} (you)" in audit and "engram-console" in audit
    filtered = (await alice.page("/console/admin/audit?tool=console:connect")).split('id="audit"')[1]
    assert "console:connect" in filtered and "console:update_entity" not in filtered
    theirs = table(await alice.page(f"/console/admin/audit?subject={uuid.uuid4()}"), "audit")
    assert "No entries." in theirs
    mine = table(await alice.page(f"/console/admin/audit?subject={t.subject}&tool=console:disconnect"), "audit")
    assert mine.count("console:disconnect") == 1


async def test_a_stale_form_is_a_conflict(builtin, browse):
    t = await seed(builtin, [{"name": "Contested", "type": "note"}], [])
    alice = await browse(t.admin, t.id)
    eid = t.ids["Contested"]
    page = await alice.page(f"/console/entity/{eid}")
    version = hidden_fields(page)["version"]
    await mcp_call(builtin, t.admin, "update_entity", {"id": eid, "changes": {"description": "changed elsewhere"}})
    answer = await alice.post(
        f"/console/entity/{eid}/fields",
        {"name": "Contested", "type": "note", "version": version, "csrf": alice.csrf(page)},
    )
    assert answer.status_code == 409 and "read it again" in answer.text


# --- the graph JSON, and the bound on large neighbourhoods ---------------------------------------


async def test_a_large_neighbourhood_is_bounded_with_a_count(builtin, browse):
    spokes = [{"name": f"Spoke {i:02d}", "type": "spoke"} for i in range(60)]
    t = await seed(
        builtin,
        [{"name": "Hub", "type": "hub"}, *spokes],
        [{"from": "Hub", "to": s["name"], "type": "has"} for s in spokes],
    )
    alice = await browse(t.admin, t.id)
    data = (await alice.get(f"/console/api/graph?entity={t.ids['Hub']}")).json()
    assert len(data["nodes"]) == 40 and data["more"] == 21 and not data["more_plus"]
    drawn = {n["id"] for n in data["nodes"]}
    assert all(e["from"] in drawn and e["to"] in drawn for e in data["edges"])
    page = await alice.page(f"/console/graph?entity={t.ids['Hub']}")
    assert "21 more" in page
    only_hub = (await alice.get(f"/console/api/graph?entity={t.ids['Hub']}&type=hub")).json()
    assert [n["name"] for n in only_hub["nodes"]] == ["Hub"] and only_hub["hidden_by_type"] == 39


# --- tenant administration ------------------------------------------------------------------------


async def test_admin_exports_imports_and_manages_members(builtin, browse):
    t = await seed(builtin, [{"name": "Exported", "type": "note", "observations": ["goes out"]}], [])
    elsewhere = f"console-{uuid.uuid4().hex[:10]}"
    for tenant, name in ((t.id, "nightly report"), (elsewhere, "not ours")):
        made = engram(builtin.env, "apikey", "create", "--tenant", tenant, "--scope", "memory:read", "--name", name)
        assert made.returncode == 0, made.stderr
    alice = await browse(t.admin, t.id)
    page = await alice.page("/console/admin")
    csrf = alice.csrf(page)
    assert t.admin.username in page and ">1</dd>" in page  # one entity
    keys = table(page, "keys")
    assert "nightly report" in keys and "memory:read" in keys and "not ours" not in keys and "egk_" not in keys
    exported = await alice.post("/console/admin/export", {"format": "engram", "csrf": csrf})
    assert exported.status_code == 200 and "attachment" in exported.headers["content-disposition"]
    assert "goes out" in exported.text
    assert (await alice.post("/console/admin/export", {"format": "engram"})).status_code == 403

    line = orjson.dumps({"type": "entity", "name": "Imported here", "entityType": "note", "observations": ["came in"]})
    files = {"file": ("memory.jsonl", line + b"\n", "application/x-ndjson")}
    imported = await alice.http.post("/console/admin/import", data={"csrf": csrf, "format": "memory"}, files=files)
    assert imported.status_code == 200 and "Imported" in imported.text, imported.text
    assert "Imported here" in await alice.page("/console/find")
    forged = await alice.http.post("/console/admin/import", data={"format": "memory"}, files=files)
    assert forged.status_code == 403

    newcomer = add_user(builtin, f"elsewhere-{uuid.uuid4().hex[:6]}", "reader")
    added = await alice.post("/console/admin/members", {"username": newcomer.username, "role": "writer", "csrf": csrf})
    assert f"{newcomer.username} is now writer." in added.text
    removed = await alice.post("/console/admin/members", {"username": newcomer.username, "op": "remove", "csrf": csrf})
    assert "is no longer a member" in removed.text and newcomer.username not in removed.text.split("Members")[1]
    own = await alice.post("/console/admin/members", {"username": t.admin.username, "role": "reader", "csrf": csrf})
    assert own.status_code == 400


# --- API keys ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyState:
    """A tenant's API keys and their audit rows, read by the owner (not through the console)."""

    keys: dict[str, tuple[str, list[str], bool]]  # id -> (name, scopes, revoked)
    audit: int  # audit rows about API keys


async def key_state(settings: Settings, tenant: str) -> KeyState:
    conn = await asyncpg.connect(settings.admin_dsn())
    try:
        tenant_id, s = await conn.fetchrow("SELECT id, schema_name FROM engram.tenants WHERE key = $1", tenant)
        rows = await conn.fetch(
            "SELECT id, name, scopes, revoked_at FROM engram.api_keys WHERE tenant_id = $1", tenant_id
        )
        audit = await conn.fetchval(f"SELECT count(*) FROM {s}.audit WHERE affected[1] LIKE 'api-key:%'")
    finally:
        await conn.close()
    return KeyState({r["id"]: (r["name"], list(r["scopes"]), r["revoked_at"] is not None) for r in rows}, audit)


def mcp_status(server: Server, key: str) -> int:
    """The HTTP status /mcp answers a request carrying `key` (401: refused before any tool runs)."""
    answer = httpx2.post(
        server.url,
        headers=mcp_headers(key),
        content=orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        timeout=10,
    )
    return answer.status_code


async def test_only_an_admin_makes_or_revokes_keys(builtin, db_settings, browse):
    t = await seed(builtin, [{"name": "Kept", "type": "note"}], [])
    made = engram(builtin.env, "apikey", "create", "--tenant", t.id, "--scope", "memory:read", "--name", "bot")
    key_id = made.stdout.strip().split("_")[1]
    before = await key_state(db_settings, t.id)
    for role in ("reader", "writer"):
        person = await browse(add_user(builtin, t.id, role), t.id)
        csrf = person.csrf(await person.page("/console/find"))
        answer = await person.post("/console/admin/keys/create", {"name": "mine", "scope": "memory:read", "csrf": csrf})
        assert answer.status_code == 403 and "does not allow" in answer.text and "egk_" not in answer.text
        for confirm in ("", "true"):
            answer = await person.post(
                "/console/admin/keys/revoke", {"key_id": key_id, "confirm": confirm, "csrf": csrf}
            )
            assert answer.status_code == 403, role
    alice = await browse(t.admin, t.id)
    page = await alice.page("/console/admin")
    assert "egk_" not in page
    without_csrf = await alice.post("/console/admin/keys/create", {"name": "x", "scope": "memory:read"})
    assert without_csrf.status_code == 403
    without_csrf = await alice.post("/console/admin/keys/revoke", {"key_id": key_id, "confirm": "true"})
    assert without_csrf.status_code == 403
    assert await key_state(db_settings, t.id) == before


async def test_a_forged_revoke_of_another_tenants_key_changes_nothing(builtin, db_settings, acme, other, browse):
    made = engram(builtin.env, "apikey", "create", "--tenant", other.id, "--scope", "memory:read", "--name", "theirs")
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    key_id = key.split("_")[1]
    before = await key_state(db_settings, other.id)
    alice = await browse(acme.admin, acme.id)
    csrf = alice.csrf(await alice.page("/console/admin"))
    for confirm in ("", "true"):
        answer = await alice.post("/console/admin/keys/revoke", {"key_id": key_id, "confirm": confirm, "csrf": csrf})
        assert answer.status_code == 404 and "no unrevoked API key" in answer.text
    assert await key_state(db_settings, other.id) == before
    assert before.keys[key_id][2] is False
    async with connect(builtin.url, key) as bot:  # still works for its own tenant
        assert ok(await bot.call_tool("get_entity", {"name": "Vault"}))["name"] == "Vault"


async def test_hostile_key_forms_are_refused_and_write_nothing(builtin, db_settings, browse):
    t = await seed(builtin, [{"name": "Kept", "type": "note"}], [])
    alice = await browse(t.admin, t.id)
    csrf = alice.csrf(await alice.page("/console/admin"))
    before = await key_state(db_settings, t.id)
    read = {"scope": "memory:read"}
    cases: list[tuple[dict[str, Any], int]] = [
        ({"name": "nul\x00name", **read}, 400),
        ({"name": "line\nbreak", **read}, 400),
        ({"name": "n" * 201, **read}, 400),
        ({"name": "no scope"}, 400),
        ({"name": "bad scope", "scope": "memory:root"}, 400),
        ({"name": "bad scope", "scope": "memory:read\x00"}, 400),
        ({"name": "past", **read, "expires_days": "0"}, 400),
        ({"name": "past", **read, "expires_days": "-1"}, 400),
        ({"name": "far", **read, "expires_days": "3651"}, 400),
        ({"name": "huge", **read, "expires_days": "9" * 40}, 400),
        ({"name": "word", **read, "expires_days": "soon"}, 400),
    ]
    for data, status in cases:
        answer = await alice.post("/console/admin/keys/create", {**data, "csrf": csrf})
        assert answer.status_code == status, (data, answer.text)
        assert "egk_" not in answer.text
    repeated = await alice.http.post(
        "/console/admin/keys/create",
        content=b"csrf=" + csrf.encode() + b"&name=twice&scope=memory:read&scope=memory:read",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert repeated.status_code == 400
    for key_id in ("", "short", "A" * 12, "a" * 11 + "\x00", "a" * 13, "../../admin"):
        answer = await alice.post("/console/admin/keys/revoke", {"key_id": key_id, "confirm": "true", "csrf": csrf})
        assert answer.status_code == 400, key_id
    assert await key_state(db_settings, t.id) == before


async def test_dev_mode_signs_the_dev_user_in_at_once(db_settings):
    with serve(db_settings, ENGRAM_AUTH_MODE="dev", ENGRAM_EMBEDDING_PROVIDER="none") as dev:
        async with httpx2.AsyncClient(base_url=dev.base, follow_redirects=True, timeout=30) as http:
            consent = await http.get("/console/sign-in")
            assert 'name="password"' not in consent.text and 'value="demo"' in consent.text
            fields = {**hidden_fields(consent.text), "decision": "allow", "tenant": "demo"}
            landed = await http.post("/oauth/consent", data=fields)
            assert landed.url.path == "/console/find" and 'id="tenant">demo<' in landed.text
            assert 'id="role">admin<' in landed.text


# --- switched off -------------------------------------------------------------------------------


async def test_the_console_can_be_off_and_says_why_in_oidc_mode():
    settings = Settings(console=False, auth_mode="oidc", oidc_issuer="https://idp.example")
    assert console_routes(settings, None, None, None) == []  # type: ignore[arg-type]
    routes = console_routes(settings.model_copy(update={"console": True}), None, None, None)  # type: ignore[arg-type]
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=Starlette(routes=routes)), base_url="http://t")
    for path in ("/console", "/console/find"):
        answer = await http.get(path)
        assert answer.status_code == 404 and answer.text == OFF_IN_OIDC_MODE
        assert CSP in answer.headers["content-security-policy"]


# --- in a real browser ------------------------------------------------------------------------------


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (scripts/system-deps.sh)")
async def test_a_person_tends_memory_in_chromium(builtin, acme):
    from playwright.async_api import expect

    blocked: list[str] = []
    async with console_in_chromium(blocked) as page:
        await sign_in_with_browser(page, builtin, acme)
        assert await page.locator("#tenant").inner_text() == acme.id
        counts = await page.locator("#counts").inner_text()
        assert "4 entities" in counts and "3 relations" in counts
        await page.screenshot(path=ARTIFACTS / "find.png", full_page=True)

        await page.get_by_label("Search").fill("Lovelace")
        await page.get_by_role("button", name="Find").click()
        hit = page.locator("#hits tbody tr").first
        assert "Ada Lovelace" in await hit.inner_text()
        assert float(await hit.locator(".fused").inner_text()) > 0
        await page.screenshot(path=ARTIFACTS / "search.png", full_page=True)

        await hit.get_by_role("link", name="Ada Lovelace").click()
        await page.wait_for_url(f"**/console/entity/{acme.ids['Ada Lovelace']}")
        assert await page.locator("#entity-name").inner_text() == "Ada Lovelace"
        assert not await page.get_by_label("New observation").is_visible()  # forms wait behind "Edit" controls
        await page.get_by_text("Add an observation").click()
        await page.get_by_label("New observation").fill("Translated Menabrea's paper")
        await page.get_by_role("button", name="Add observation").click()
        assert await page.locator("#flash").inner_text() == "Observation added."
        assert "Translated Menabrea's paper" in await page.locator("#observations").inner_text()
        assert "added by you" in await page.locator("#observations").inner_text()
        await page.get_by_text("Edit fields").click()
        await page.get_by_label("Description").fill("Mathematician and writer")
        await page.get_by_role("button", name="Save changes").click()
        assert await page.locator("#flash").inner_text() == "Saved."
        assert await page.locator("#description").inner_text() == "Mathematician and writer"
        await page.get_by_text("Connect to another entity").click()
        await page.get_by_label("Relation", exact=True).fill("corresponded with")
        await page.get_by_label("Other entity (name or id)").fill("Charles Babbage")
        await page.get_by_role("button", name="Connect", exact=True).click()
        assert await page.locator("#flash").inner_text() == "Connected."
        outgoing = await page.locator("#outgoing").inner_text()
        assert "corresponded with → Charles Babbage" in outgoing and "wrote about → Analytical Engine" in outgoing
        history = await page.locator("#history").inner_text()
        assert "you connected Ada Lovelace —corresponded with→ Charles Babbage" in history
        assert "you added 1 observation: Translated Menabrea's paper" in history
        await page.screenshot(path=ARTIFACTS / "entity.png", full_page=True)

        await page.get_by_role("link", name="Graph view").click()
        await page.wait_for_url("**/console/graph?**")
        nodes = page.locator("svg#graph g.node")
        await expect(nodes).to_have_count(3)
        names = sorted(await nodes.locator("text").all_text_contents())
        assert names == ["Ada Lovelace", "Analytical Engine", "Charles Babbage"]
        assert await page.locator("svg#graph line.edge").count() == 3  # Babbage designed the Engine too
        await page.locator(f"svg#graph g.node[data-id='{acme.ids['Charles Babbage']}']").click()
        assert "Charles Babbage" in await page.locator("#selected").inner_text()
        await page.get_by_role("button", name="Expand selected").click()
        await expect(nodes).to_have_count(4)
        assert "Difference Engine" in await nodes.locator("text").all_text_contents()
        await page.get_by_role("button", name="Zoom in").click()
        await page.wait_for_timeout(600)  # let the layout settle for the picture (not an assertion)
        await page.screenshot(path=ARTIFACTS / "graph.png", full_page=True)
        await page.locator(f"svg#graph g.node[data-id='{acme.ids['Difference Engine']}']").focus()
        await page.keyboard.press("o")
        await page.wait_for_url(f"**/console/entity/{acme.ids['Difference Engine']}")

        await page.get_by_role("link", name="Administer").click()
        assert acme.admin.username in await page.locator("#members").inner_text()
        await page.screenshot(path=ARTIFACTS / "admin.png", full_page=True)

    assert not blocked, blocked  # the policy blocked nothing the pages use
    for name in ("find", "search", "entity", "graph", "admin"):
        width, height = png_size(ARTIFACTS / f"{name}.png")
        assert width == 1200 and height >= 600


async def test_find_filters_by_type_and_time_and_marks_matches(builtin, acme, browse):
    alice = await browse(acme.admin, acme.id)
    machines = table(await alice.page("/console/find?type=machine"), "listing")
    assert "Analytical Engine" in machines and "Difference Engine" in machines and "Ada Lovelace" not in machines
    assert "2 entities of type machine" in await alice.page("/console/find?type=machine")
    future = await alice.page("/console/find?after=2999-01-01")
    assert "0 entities" in future
    today = await alice.page("/console/find?before=2999-01-01&after=2000-01-01&type=person")
    assert "Ada Lovelace" in table(today, "listing")
    hits = table(await alice.page("/console/find?q=first+program"), "hits")
    assert "Ada Lovelace" in hits and "<mark>" in hits and "**" not in hits
    typed = table(await alice.page("/console/find?q=engine&type=person"), "hits")
    assert "Analytical Engine" not in typed
    recent = (await alice.page("/console/find?q=zzz")).split('id="recent"')[1]
    assert "Ada Lovelace</a>" in recent  # named even when no listing shows it


async def test_find_filters_by_area_and_topic(builtin, browse):
    t = await seed(
        builtin,
        [
            {"name": "Calculus notes", "type": "note", "area": "maths", "topic": "analysis", "observations": ["lim"]},
            {"name": "Algebra notes", "type": "note", "area": "maths", "topic": "algebra", "observations": ["lim"]},
            {"name": "Opera notes", "type": "note", "area": "music", "observations": ["lim of range"]},
        ],
        [],
    )
    alice = await browse(t.admin, t.id)
    maths = table(await alice.page("/console/find?area=maths"), "listing")
    assert "Calculus notes" in maths and "Algebra notes" in maths and "Opera notes" not in maths
    analysis = table(await alice.page("/console/find?area=maths&topic=analysis"), "listing")
    assert "Calculus notes" in analysis and "Algebra notes" not in analysis
    hits = table(await alice.page("/console/find?q=lim&mode=keyword&area=music"), "hits")
    assert "Opera notes" in hits and "Calculus notes" not in hits
    refused = await alice.http.get("/console/find?area=" + "x" * 101)
    assert refused.status_code == 400 and "area" in refused.text


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (scripts/system-deps.sh)")
async def test_an_admin_makes_a_key_uses_it_and_revokes_it_in_chromium(builtin, db_settings):
    t = await seed(builtin, [{"name": "Report source", "type": "note", "observations": ["for the bot"]}], [])
    blocked: list[str] = []
    async with console_in_chromium(blocked) as page:
        await sign_in_with_browser(page, builtin, t)
        await page.get_by_role("link", name="Administer").click()

        await page.get_by_label("Key name").fill("nightly report")
        await page.get_by_label("memory:write").check()
        await page.get_by_label("Expires after (days, empty: never)").fill("30")
        async with page.expect_response("**/console/admin/keys/create") as answered:
            await page.get_by_role("button", name="Make API key").click()
        created = await answered.value
        assert created.status == 200 and created.headers["cache-control"] == "no-store"
        key = await page.locator("#new-key").input_value()
        assert re.fullmatch(r"egk_[a-z0-9]{12}_[A-Za-z0-9_-]{43}", key)
        key_id = key.split("_")[1]
        facts = await page.locator("#new-key-facts").inner_text()
        assert "nightly report" in facts and "memory:read memory:write" in facts
        await page.screenshot(path=ARTIFACTS / "key-made.png", full_page=True)

        # Shown once: the administration page (and its source) lists the key without its secret.
        await page.get_by_role("link", name="Back to administration").click()
        assert key_id in await page.locator("#keys").inner_text()
        assert key.split("_", 2)[2] not in await page.content()
        stored = await key_state(db_settings, t.id)
        assert stored.keys[key_id] == ("nightly report", ["memory:read", "memory:write"], False) and stored.audit == 1

        # The key works against /mcp with a real MCP client, with the scopes it was given.
        async with connect(builtin.url, key) as bot:
            assert ok(await bot.call_tool("get_entity", {"name": "Report source"}))["name"] == "Report source"
            ok(await bot.call_tool("upsert_entities", {"entities": [{"name": "Written by the bot", "type": "note"}]}))

        await page.get_by_role("button", name=f"Revoke {key_id}").click()
        assert "This cannot be undone" in await page.locator("main").inner_text()
        assert (await key_state(db_settings, t.id)).keys[key_id][2] is False  # asking changed nothing
        await page.get_by_role("button", name=f"Revoke key {key_id}").click()
        assert await page.locator("#flash").inner_text() == f"API key {key_id} revoked."
        assert "revoked" in await page.locator("#keys").inner_text()
        await page.screenshot(path=ARTIFACTS / "key-revoked.png", full_page=True)

        await page.get_by_role("link", name="Audit log").click()
        audit = await page.locator("main").inner_text()
        assert "console:create_api_key" in audit and "console:revoke_api_key" in audit

    assert not blocked, blocked
    assert mcp_status(builtin, key) == 401
    after = await key_state(db_settings, t.id)
    assert after.keys[key_id][2] is True and after.audit == 2


# --- merges, aliases and the end of facts ----------------------------------------------------------


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (scripts/system-deps.sh)")
async def test_a_person_merges_duplicates_and_ends_a_fact_in_chromium(builtin):
    t = await seed(
        builtin,
        [
            {"name": "Grace Hopper", "type": "person", "observations": ["Rear admiral", "Lives in Arlington"]},
            {"name": "Grace Hoper", "type": "person", "observations": ["Wrote the first compiler"]},
            {"name": "Navy", "type": "organization"},
        ],
        [{"from": "Grace Hoper", "to": "Navy", "type": "served in"}],
    )
    survivor, duplicate = t.ids["Grace Hopper"], t.ids["Grace Hoper"]
    blocked: list[str] = []
    async with console_in_chromium(blocked) as page:
        await sign_in_with_browser(page, builtin, t)
        await page.goto(f"{builtin.base}/console/entity/{survivor}")
        assert "No aliases." in await page.locator("#aliases").inner_text()

        # Proposed by find_duplicates, reviewed, confirmed.
        await page.get_by_role("link", name="Merge duplicates into this entity…").click()
        await page.wait_for_url(f"**/console/entity/{survivor}/merge")
        await page.get_by_role("link", name="Review merging Grace Hoper").click()
        confirm = await page.locator("#confirm").inner_text()
        assert "Merge Grace Hoper into Grace Hopper?" in confirm and "Wrote the first compiler" in confirm
        assert (await mcp_call(builtin, t.admin, "get_entity", {"id": duplicate}))[
            "id"
        ] == duplicate  # asking merged nothing
        await page.screenshot(path=ARTIFACTS / "merge-confirm.png", full_page=True)
        await page.get_by_role("button", name="Merge Grace Hoper into Grace Hopper").click()
        await page.wait_for_url(f"**/console/entity/{survivor}")
        flash = await page.locator("#flash").inner_text()
        assert "Merged Grace Hoper into this entity." in flash and "Aliases gained: Grace Hoper." in flash
        assert "Grace Hoper" in await page.locator("#aliases").inner_text()
        assert "Wrote the first compiler" in await page.locator("#observations").inner_text()
        assert "served in → Navy" in await page.locator("#outgoing").inner_text()
        assert (
            "you merged Grace Hoper into it; aliases gained: Grace Hoper" in await page.locator("#history").inner_text()
        )

        # The neighbour's history tells where its relation went.
        await page.goto(f"{builtin.base}/console/entity/{t.ids['Navy']}")
        assert (
            "you moved Grace Hoper —served in→ Navy to Grace Hopper, as Grace Hoper was merged into it"
            in await page.locator("#history").inner_text()
        )

        # The duplicate's page leads to the survivor.
        await page.goto(f"{builtin.base}/console/entity/{duplicate}")
        await page.wait_for_url(f"**/console/entity/{survivor}")
        assert await page.locator("#entity-name").inner_text() == "Grace Hopper"

        # Another alias, by hand.
        await page.get_by_text("Add an alias").click()
        await page.get_by_label("New alias").fill("Amazing Grace")
        await page.get_by_role("button", name="Add alias").click()
        assert await page.locator("#flash").inner_text() == "Alias Amazing Grace added."
        assert "Amazing Grace" in await page.locator("#aliases").inner_text()

        # A fact that stopped being true: ended with a reason, gone from the default view.
        await page.get_by_label("Edit observation: Lives in Arlington").click()  # its forms open
        await page.get_by_label("Why it ended: Lives in Arlington").fill("moved away")
        await page.get_by_role("button", name="End observation: Lives in Arlington").click()
        assert await page.locator("#flash").inner_text() == "Observation ended."
        observations = await page.locator("#observations").inner_text()
        assert "Lives in Arlington" not in observations and "Rear admiral" in observations
        history = await page.locator("#history").inner_text()
        assert "you ended 1 observation: Lives in Arlington, because moved away" in history
        await page.screenshot(path=ARTIFACTS / "merged.png", full_page=True)

        # The page as of a moment before that end: the fact held then, and nothing can be edited.
        await page.get_by_text("Another moment…").click()
        await page.get_by_label("As of (UTC)").fill("2000-01-01T00:00")
        await page.get_by_role("button", name="Show as of").click()
        await page.wait_for_url(re.compile(r"as_of=2000-01-01T00"))
        assert "As of 2000-01-01 00:00:00 UTC" in await page.locator("#view-banner").inner_text()
        assert "Lives in Arlington" in await page.locator("#observations").inner_text()
        assert await page.locator("main form[method=post]").count() == 0
        await page.screenshot(path=ARTIFACTS / "as-of.png", full_page=True)
        await page.get_by_role("link", name="Show ended facts").click()
        ended = await page.locator("#ended-observations").inner_text()
        assert "Lives in Arlington" in ended and "ended because moved away" in ended
        await page.get_by_role("link", name="Back to now").click()
        assert await page.locator("#view-banner").count() == 0
        await page.goto(f"{builtin.base}/console/admin/audit")
        audit = await page.locator("main").inner_text()
        for action in ("console:merge_entities", "console:add_aliases", "console:invalidate_observations"):
            assert action in audit, action

    assert not blocked, blocked
    width, height = png_size(ARTIFACTS / "as-of.png")
    assert width == 1200 and height >= 600
    stored = await mcp_call(builtin, t.admin, "get_entity", {"id": survivor, "include_invalid": True})
    ended = {r["text"]: r["valid_until"] for r in stored["observation_records"]}
    assert ended["Lives in Arlington"] is not None and ended["Rear admiral"] is None
    assert sorted(stored["aliases"]) == ["Amazing Grace", "Grace Hoper"]
    history = await mcp_call(builtin, t.admin, "entity_history", {"id": survivor, "limit": 20})
    merged = next(e for e in history["entries"] if e["action"] == "merged")
    assert merged["actor"] == t.subject
    gone = await mcp_call(builtin, t.admin, "entity_history", {"id": duplicate, "limit": 5})
    assert gone["entries"][0]["action"] == "merged_into" and gone["entries"][0]["actor"] == t.subject


async def merge_state(server: Server, tenant: Tenant, *names: str) -> list[tuple[Any, ...]]:
    """What a refused merge, alias or end must leave alone: each entity's version, aliases, facts, relations."""
    out = []
    for name in names:
        e = await mcp_call(server, tenant.admin, "get_entity", {"id": tenant.ids[name], "include_invalid": True})
        records = [(r["text"], r["valid_until"]) for r in e["observation_records"]]
        relations = [(r["id"], r["valid_until"]) for r in e["relations"]]
        out.append((e["id"], e["version"], sorted(e["aliases"]), records, relations))
    return out


async def test_readers_and_forged_posts_cannot_merge_alias_or_end(builtin, acme, other, browse):
    t = await seed(
        builtin,
        [{"name": "Kept", "type": "note", "observations": ["a fact"]}, {"name": "Kep", "type": "note"}],
        [{"from": "Kept", "to": "Kep", "type": "near"}],
    )
    kept, kep, near = t.ids["Kept"], t.ids["Kep"], t.relations["Kept|near|Kep"]
    await mcp_call(builtin, t.admin, "add_aliases", {"id": kept, "aliases": ["Keeper"]})
    before = await merge_state(builtin, t, "Kept", "Kep")
    posts = [
        (f"/console/entity/{kept}/merge", {"merge": kep}),
        (f"/console/entity/{kept}/aliases/add", {"alias": "Another"}),
        (f"/console/entity/{kept}/aliases/remove", {"alias": "Keeper"}),
        (f"/console/entity/{kept}/observations/end", {"observation": "a fact", "reason": "r"}),
        (f"/console/entity/{kept}/relations/end", {"relation": near}),
    ]

    # A reader: no forms, and each post is refused.
    rita = await browse(add_user(builtin, t.id, "reader"), t.id)
    page = await rita.page(f"/console/entity/{kept}")
    assert "Keeper" in page and "a fact" in page
    for form in ('id="add-alias"', 'id="merge-link"', "/aliases/remove", "/observations/end", "/relations/end"):
        assert form not in page, form
    csrf = rita.csrf(page)
    for path, data in posts:
        answer = await rita.post(path, {**data, "csrf": csrf})
        assert answer.status_code == 403 and "does not allow" in answer.text, path
    assert (await rita.get(f"/console/entity/{kept}/merge?other={kep}")).status_code == 403

    # A writer without the session's token.
    alice = await browse(t.admin, t.id)
    for path, data in posts:
        assert (await alice.post(path, {**data, "csrf": "x" * 43})).status_code == 403, path

    # Another tenant's member, with their own valid token: the ids are not found, either way round.
    bob = await browse(other.admin, other.id)
    bob_csrf = bob.csrf(await bob.page("/console/find"))
    vault = other.ids["Vault"]
    forged = [
        *posts,
        (f"/console/entity/{vault}/merge", {"merge": kept}),
        (f"/console/entity/{vault}/relations/end", {"relation": near}),
    ]
    for path, data in forged:
        answer = await bob.post(path, {**data, "csrf": bob_csrf})
        assert answer.status_code == 404, (path, answer.status_code, answer.text)
    for path in (f"/console/entity/{kept}/merge", f"/console/entity/{vault}/merge?other={kept}"):
        assert (await bob.get(path)).status_code == 404, path
    # ... and a merge of the own tenant's entity with another tenant's is impossible too.
    alice_csrf = alice.csrf(await alice.page(f"/console/entity/{kept}"))
    across = await alice.post(f"/console/entity/{kept}/merge", {"merge": vault, "csrf": alice_csrf})
    assert across.status_code == 404
    assert (await alice.get(f"/console/entity/{kept}/merge?other={vault}")).status_code == 404

    assert await merge_state(builtin, t, "Kept", "Kep") == before
    assert (await mcp_call(builtin, other.admin, "get_entity", {"id": vault}))["aliases"] == []


async def test_hostile_merge_alias_and_end_forms_are_refused(builtin, browse):
    t = await seed(
        builtin,
        [{"name": "Target", "type": "note", "observations": ["held"]}, {"name": "Twin", "type": "place"}],
        [{"from": "Target", "to": "Twin", "type": "near"}],
    )
    target, twin = t.ids["Target"], t.ids["Twin"]
    alice = await browse(t.admin, t.id)
    csrf = alice.csrf(await alice.page(f"/console/entity/{target}"))
    before = await merge_state(builtin, t, "Target", "Twin")
    cases = [
        ("aliases/add", {"alias": "nul \x00 alias"}, 400, "NUL"),
        ("aliases/add", {"alias": "a" * 201}, 400, "at most 200"),
        ("aliases/add", {"alias": "  "}, 400, "invalid"),
        ("aliases/add", {"alias": "Twin"}, 409, "already name"),
        ("aliases/remove", {"alias": "b" * 201}, 400, "at most 200"),
        ("merge", {"merge": "m" * 201}, 400, "at most 200"),
        ("merge", {"merge": "Twin\x00"}, 400, "NUL"),
        ("merge", {"merge": twin, "version": "abc"}, 400, "version"),
        ("merge", {"merge": twin, "version": "1" * 30}, 400, "version"),
        ("merge", {"merge": target}, 400, "into itself"),
        ("merge", {"merge": twin}, 400, "not of type"),  # a place into a note: only when allowed
        ("merge", {"merge": "Nobody At All"}, 404, "not_found"),
        ("merge", {"merge": twin, "allow_type_mismatch": "yes", "version": "99"}, 409, "read it again"),
        ("observations/end", {"observation": "held", "reason": "r" * 1001}, 400, "at most 1000"),
        ("observations/end", {"observation": "held", "reason": "why\x00"}, 400, "NUL"),
        ("observations/end", {"observation": "x" * 4001}, 400, "at most 4000"),
        ("relations/end", {"relation": "'; DROP TABLE x; --"}, 400, "relation"),
        ("relations/end", {"relation": str(uuid.uuid4())}, 404, "no such relation"),
    ]
    for action, data, status, words in cases:
        answer = await alice.post(f"/console/entity/{target}/{action}", {**data, "csrf": csrf})
        assert answer.status_code == status, (action, data, answer.status_code, answer.text[-400:])
        assert words in answer.text, (action, words)
    for bad in (
        f"/console/entity/{target}/merge?other=" + "o" * 201,
        f"/console/entity/{target}/merge?other=%00",
        "/console/find?q=x&source=%00",
        "/console/find?source=" + "s" * 201,
        "/console/find?since=yesterday",
        "/console/find?q=x&since=2024-02-01&until=2024-01-01",
    ):
        answer = await alice.get(bad)
        assert answer.status_code == 400 and "invalid" in answer.text, bad
    assert await merge_state(builtin, t, "Target", "Twin") == before
    # The ends that change nothing say so: a fact not held, and (after the end) one ended already.
    noop = await alice.post(f"/console/entity/{target}/observations/end", {"observation": "never said", "csrf": csrf})
    assert "That observation was not valid now." in noop.text
    near = t.relations["Target|near|Twin"]
    ended = await alice.post(
        f"/console/entity/{target}/relations/end", {"relation": near, "reason": "drifted apart", "csrf": csrf}
    )
    assert ended.status_code == 200 and "Relation ended." in ended.text
    assert "Twin</a>" not in ended.text.split('id="outgoing"')[1].split("</ul>")[0]
    assert "</strong> ended Target —near→ Twin, because drifted apart" in ended.text
    again = await alice.post(f"/console/entity/{target}/relations/end", {"relation": near, "csrf": csrf})
    assert again.status_code == 404 and "no such relation valid now" in again.text


async def test_find_filters_facts_by_source_and_write_time(builtin, browse):
    t = await seed(builtin, [{"name": "Sourced", "type": "note"}, {"name": "Unsourced", "type": "note"}], [])
    await mcp_call(
        builtin,
        t.admin,
        "append_observations",
        {"items": [{"entity": "Sourced", "observations": ["orbital mechanics notes"], "source": "lab-notebook"}]},
    )
    await mcp_call(
        builtin, t.admin, "append_observations", {"items": [{"entity": "Unsourced", "observations": ["orbital tea"]}]}
    )
    alice = await browse(t.admin, t.id)
    everything = table(await alice.page("/console/find?q=orbital"), "hits")
    assert (
        "Sourced" in everything
        and "Unsourced" in everything
        and 'source <span class="source">lab-notebook</span>' in everything
    )
    assert "written <time" in everything
    sourced = table(await alice.page("/console/find?q=orbital&source=lab-notebook"), "hits")
    assert "Sourced</a>" in sourced and "Unsourced" not in sourced
    listed = table(await alice.page("/console/find?source=lab-notebook"), "listing")
    assert "Sourced</a>" in listed and "Unsourced" not in listed
    assert "Nothing matched." in table(await alice.page("/console/find?q=orbital&since=2999-01-01"), "hits")
    assert "Sourced" in table(await alice.page("/console/find?q=orbital&since=2000-01-01&until=2999-01-01"), "hits")


# --- validity: reading as of a moment, the ended facts, ends and intervals through the forms ------


def section(page: str, id: str) -> str:
    """The list with this id (observations, relations, ended facts)."""
    return page.split(f'id="{id}"', 1)[1].split("</ul>", 1)[0]


def post_forms(page: str) -> int:
    """How many forms on the page post (the header's sign-out is one)."""
    return page.count('method="post"')


async def test_as_of_shows_a_fact_before_its_end_and_hides_it_after(builtin, browse):
    t = await seed(
        builtin,
        [
            {"name": "Marie Curie", "type": "person", "observations": ["Lives in Paris"]},
            {"name": "Sorbonne", "type": "org"},
        ],
        [{"from": "Marie Curie", "to": "Sorbonne", "type": "teaches at"}],
    )
    marie, teaches = t.ids["Marie Curie"], t.relations["Marie Curie|teaches at|Sorbonne"]
    end = {"at": "2023-06-01T12:00:00Z"}
    items = [{"entity": "Marie Curie", "observations": ["Lives in Paris"]}]
    await mcp_call(builtin, t.admin, "invalidate_observations", {"items": items, **end, "reason": "moved to Warsaw"})
    await mcp_call(builtin, t.admin, "invalidate_relations", {"ids": [teaches], **end, "reason": "retired"})
    alice = await browse(t.admin, t.id)
    here = f"/console/entity/{marie}"

    before = await alice.page(f"{here}?as_of=2023-06-01T11:59:59")
    assert "Lives in Paris" in section(before, "observations") and "Sorbonne</a>" in section(before, "outgoing")
    banner = before.split('id="view-banner"', 1)[1].split("</p>", 1)[0]
    assert "As of" in banner and "2023-06-01 11:59:59 UTC" in banner and f'<a href="{here}">Back to now</a>' in banner
    assert 'value="2023-06-01T11:59:59"' in before  # the input keeps the moment shown
    at_end = await alice.page(f"{here}?as_of=2023-06-01T12:00")  # an interval's end is not in it
    assert "Lives in Paris" not in section(at_end, "observations") and "Sorbonne</a>" not in section(at_end, "outgoing")
    now = await alice.page(here)
    assert "Lives in Paris" not in section(now, "observations") and 'id="view-banner"' not in now
    assert 'id="ended-observations"' not in now

    ended = await alice.page(f"{here}?ended=1")
    assert "With the ended facts" in ended and "Lives in Paris" not in section(ended, "observations")
    gone = section(ended, "ended-observations")
    assert "Lives in Paris" in gone and "until <time" in gone and "2023-06-01 12:00:00 UTC" in gone
    assert 'ended because <span class="reason">moved to Warsaw</span>' in gone and " from <time" not in gone
    gone = section(ended, "ended-relations")
    assert "teaches at" in gone and "Sorbonne</a>" in gone and "2023-06-01 12:00:00 UTC" in gone and "retired" in gone
    # The other end's page lists the ended relation too, with the reason its history recorded.
    assert "retired" in section(await alice.page(f"/console/entity/{t.ids['Sorbonne']}?ended=1"), "ended-relations")

    # The views are read-only, for a writer as for a reader; the reader still chooses the view.
    reader = await browse(add_user(builtin, t.id, "reader"), t.id)
    rita = [await reader.page(f"{here}{view}") for view in ("", "?ended=1", "?as_of=2023-01-01T00:00")]
    for page in (before, ended, *rita):
        assert post_forms(page) == 1 and 'name="at"' not in page and 'name="valid_from"' not in page
        assert 'id="view"' in page and 'name="as_of"' in page
    assert post_forms(now) > 1  # the present is where a writer edits
    both = await alice.get(f"{here}?as_of=2023-01-01T00:00&ended=1")
    assert both.status_code == 400 and "not both" in both.text and f'href="{here}"' in both.text


async def test_ending_a_fact_at_a_past_moment_agrees_with_as_of_reads(builtin, browse):
    t = await seed(
        builtin,
        [
            {"name": "Chair", "type": "person", "observations": ["Chairs the committee"]},
            {"name": "Board", "type": "org"},
        ],
        [{"from": "Chair", "to": "Board", "type": "sits on"}],
    )
    chair, sits = t.ids["Chair"], t.relations["Chair|sits on|Board"]
    alice = await browse(t.admin, t.id)
    here = f"/console/entity/{chair}"
    csrf = alice.csrf(await alice.page(here))
    data = {"observation": "Chairs the committee", "at": "2022-03-04T05:06:07", "reason": "stepped down"}
    ended = await alice.post(f"{here}/observations/end", {**data, "csrf": csrf})
    assert ended.status_code == 200 and ended.url.path == here
    assert "Observation ended as of 2022-03-04 05:06:07 UTC." in ended.text
    assert "Chairs the committee" not in section(ended.text, "observations")
    ended = await alice.post(f"{here}/relations/end", {"relation": sits, "at": "2022-03-04T05:06", "csrf": csrf})
    assert "Relation ended as of 2022-03-04 05:06:00 UTC." in ended.text
    # Ended by then: nothing more to end, and the page says so.
    again = await alice.post(f"{here}/observations/end", {**data, "at": "2023-01-01T00:00", "csrf": csrf})
    assert "That observation was not valid then." in again.text
    again = await alice.post(f"{here}/relations/end", {"relation": sits, "at": "2023-01-01T00:00", "csrf": csrf})
    assert again.status_code == 404 and "no such relation valid at that moment" in again.text

    # The console's as-of pages and the tool agree, on both sides of each end.
    for moment, held in (("2022-03-04T05:06:06", True), ("2022-03-04T05:06:07", False)):
        page = await alice.page(f"{here}?as_of={moment}")
        read = await mcp_call(builtin, t.admin, "get_entity", {"id": chair, "as_of": moment})
        assert ("Chairs the committee" in section(page, "observations")) is held, moment
        assert ("Chairs the committee" in read["observations"]) is held, moment
    for moment, held in (("2022-03-04T05:05:59", True), ("2022-03-04T05:06:00", False)):
        page = await alice.page(f"{here}?as_of={moment}")
        read = await mcp_call(builtin, t.admin, "get_entity", {"id": chair, "as_of": moment})
        assert ("Board</a>" in section(page, "outgoing")) is held, moment
        assert bool(read["relations"]) is held, moment
    stored = await mcp_call(builtin, t.admin, "get_entity", {"id": chair, "include_invalid": True})
    assert stored["observation_records"][0]["valid_until"].startswith("2022-03-04T05:06:07")
    assert stored["relations"][0]["valid_until"].startswith("2022-03-04T05:06:00")
    page = await alice.page(f"{here}?ended=1")
    assert "stepped down" in section(page, "ended-observations") and "2022-03-04 05:06:07 UTC" in page
    history = page.split('id="history"', 1)[1]
    assert (
        "</strong> ended 1 observation: Chairs the committee (until 2022-03-04T05:06:07+00:00), because stepped down"
        in (history)
    )


async def test_an_observation_written_with_its_source_and_interval(builtin, browse):
    t = await seed(builtin, [{"name": "Explorer", "type": "person"}], [])
    eid = t.ids["Explorer"]
    alice = await browse(t.admin, t.id)
    here = f"/console/entity/{eid}"
    csrf = alice.csrf(await alice.page(here))
    current = {"observation": "Keeps a diary", "source": "  field diary  ", "valid_from": "1911-10-01T00:00"}
    added = await alice.post(f"{here}/observations/add", {**current, "valid_until": "2999-01-01T00:00", "csrf": csrf})
    assert added.status_code == 200 and "Observation added." in added.text
    shown = section(added.text, "observations")
    assert 'source <span class="source">field diary</span>' in shown
    assert "valid from 1911-10-01 00:00 until 2999-01-01 00:00" in shown
    past = {"observation": "Reached the pole", "valid_from": "1911-12-14T15:00:00", "valid_until": "1912-01-17"}
    added = await alice.post(f"{here}/observations/add", {**past, "source": "", "csrf": csrf})
    assert "Observation added." in added.text and "Reached the pole" not in section(added.text, "observations")
    then = section(await alice.page(f"{here}?as_of=1911-12-24T00:00"), "observations")
    assert (
        "Reached the pole" in then and "Keeps a diary" in then and 'source <span class="source">engram-console' in then
    )
    ended = section(await alice.page(f"{here}?ended=1"), "ended-observations")
    assert "Reached the pole" in ended and "from <time" in ended and "1912-01-17 00:00:00 UTC" in ended

    records = (await mcp_call(builtin, t.admin, "get_entity", {"id": eid, "include_invalid": True}))[
        "observation_records"
    ]
    got = {r["text"]: (r["source"], r["valid_from"][:19], r["valid_until"][:19], r["created_by"]) for r in records}
    assert got == {
        "Keeps a diary": ("field diary", "1911-10-01T00:00:00", "2999-01-01T00:00:00", t.subject),
        "Reached the pole": ("engram-console", "1911-12-14T15:00:00", "1912-01-17T00:00:00", t.subject),
    }
    audit = table(await alice.page("/console/admin/audit?tool=console:append_observations"), "audit")
    assert audit.count("console:append_observations") == 2


async def test_hostile_validity_input_is_refused_and_changes_nothing(builtin, other, browse):
    t = await seed(builtin, [{"name": "Target", "type": "note"}, {"name": "Twin", "type": "note"}], [])
    target = t.ids["Target"]
    since = {"valid_from": "2020-01-01T00:00:00Z"}
    items = [{"entity": "Target", "observations": ["held"], **since}]
    await mcp_call(builtin, t.admin, "append_observations", {"items": items})
    made = await mcp_call(
        builtin, t.admin, "connect_entities", {"relations": [{"from": "Target", "to": "Twin", "type": "near", **since}]}
    )
    near = made["results"][0]["relation"]["id"]
    alice = await browse(t.admin, t.id)
    here = f"/console/entity/{target}"
    csrf = alice.csrf(await alice.page(here))
    before = await merge_state(builtin, t, "Target", "Twin")
    add = {"observation": "planted"}
    end = {"observation": "held"}
    cases = [
        ("observations/add", {**add, "valid_from": "yesterday"}, 400, "valid_from"),
        ("observations/add", {**add, "valid_until": "2024-02-30T00:00"}, 400, "valid_until"),
        (
            "observations/add",
            {**add, "valid_from": "2024-02-01T00:00", "valid_until": "2024-01-01T00:00"},
            400,
            "before",
        ),
        (
            "observations/add",
            {**add, "valid_from": "2024-01-01T00:00", "valid_until": "2024-01-01T00:00"},
            400,
            "before",
        ),
        ("observations/add", {**add, "valid_from": "2024-01-01\x00T00:00"}, 400, "valid_from"),
        ("observations/add", {**add, "valid_until": "2024-01-01" + "0" * 5000}, 400, "valid_until"),
        ("observations/add", {**add, "valid_from": "1700000000"}, 400, "ISO 8601"),
        ("observations/add", {**add, "source": "s" * 201}, 400, "at most 200"),
        ("observations/add", {**add, "source": "diary\x00"}, 400, "NUL"),
        ("observations/end", {**end, "at": "soon"}, 400, "at:"),
        ("observations/end", {**end, "at": "2024-01-01T00:00\x00"}, 400, "at:"),
        ("observations/end", {**end, "at": "2024-01-01" + "9" * 5000}, 400, "at:"),
        ("observations/end", {**end, "at": "2019-06-01T00:00"}, 400, "cannot end then"),
        ("observations/end", {**end, "at": "2020-01-01T00:00:00"}, 400, "cannot end then"),
        ("observations/end", {**end, "at": "2024-01-01T00:00", "reason": "r" * 1001}, 400, "at most 1000"),
        ("relations/end", {"relation": near, "at": "2019-06-01T00:00"}, 400, "cannot end then"),
        ("relations/end", {"relation": near, "at": "31/12/2024"}, 400, "at:"),
        ("relations/end", {"relation": near, "at": "2024-01-01T00:00", "reason": "why\x00"}, 400, "NUL"),
    ]
    for action, data, status, words in cases:
        answer = await alice.post(f"{here}/{action}", {**data, "csrf": csrf})
        assert answer.status_code == status, (action, data.keys(), answer.status_code, answer.text[-400:])
        assert words in answer.text and "invalid" in answer.text, (action, words)
        assert f'<a href="{here}">Back</a>' in answer.text
    for query in (
        "as_of=yesterday",
        "as_of=%00",
        "as_of=2024-01-01T00:00%00",
        "as_of=" + "2" * 5000,
        "as_of=2024-01-01T25:00",
        "ended=maybe",
        "as_of=2024-01-01T00:00&ended=1",
    ):
        answer = await alice.get(f"{here}?{query}")
        assert answer.status_code == 400 and "invalid" in answer.text and "held" not in answer.text, query
    # A forged token, with the new fields.
    forged = [
        ("observations/add", {**add, "source": "forged", "valid_from": "2021-01-01T00:00"}),
        ("observations/end", {**end, "at": "2024-01-01T00:00", "reason": "forged"}),
        ("relations/end", {"relation": near, "at": "2024-01-01T00:00"}),
    ]
    for action, data in forged:
        answer = await alice.post(f"{here}/{action}", {**data, "csrf": "x" * 43})
        assert answer.status_code == 403 and "did not come from this console" in answer.text, action
    # Another tenant's member, with their own valid token: nothing of Target is found, or read as of a moment.
    bob = await browse(other.admin, other.id)
    bob_csrf = bob.csrf(await bob.page("/console/find"))
    for action, data in forged:
        answer = await bob.post(f"{here}/{action}", {**data, "csrf": bob_csrf})
        assert answer.status_code == 404, (action, answer.status_code)
    vault = other.ids["Vault"]
    answer = await bob.post(
        f"/console/entity/{vault}/relations/end", {"relation": near, "at": "2024-01-01T00:00", "csrf": bob_csrf}
    )
    assert answer.status_code == 404
    for query in ("as_of=2024-01-01T00:00", "ended=1"):
        answer = await bob.get(f"{here}?{query}")
        assert answer.status_code == 404 and "held" not in answer.text, query
    assert await merge_state(builtin, t, "Target", "Twin") == before


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (scripts/system-deps.sh)")
async def test_an_entity_page_shows_its_episodes(builtin, browse):
    t = await seed(builtin, [{"name": "Caroline", "type": "person"}, {"name": "Melanie", "type": "person"}], [])
    said = "I went to the <b>support group</b> yesterday, Melanie"
    written = await mcp_call(
        builtin,
        t.admin,
        "add_episodes",
        {
            "episodes": [
                {"text": said, "at": "2023-05-08T13:56:00Z", "source": "D1:3", "speakers": ["Caroline"]},
                {"text": "An old note that was wrong", "at": "2022-01-01T00:00:00Z", "speakers": ["Caroline"]},
            ]
        },
    )
    wrong = written["episodes"][1]["id"]
    await mcp_call(
        builtin, t.admin, "invalidate_episodes", {"ids": [wrong], "at": "2023-01-01T00:00:00Z", "reason": "misheard"}
    )
    alice = await browse(t.admin, t.id)
    here = f"/console/entity/{t.ids['Caroline']}"
    now = section(await alice.page(here), "episodes")
    assert "I went to the &lt;b&gt;support group&lt;/b&gt; yesterday, Melanie" in now  # escaped, never markup
    assert "2023-05-08 13:56:00 UTC" in now and "D1:3" in now and "Caroline: speaker" in now
    assert f'mentioned <a href="/console/entity/{t.ids["Melanie"]}">Melanie</a>' in now
    assert "An old note" not in now
    then = section(await alice.page(f"{here}?as_of=2022-06-01T00:00"), "episodes")
    assert "An old note" in then and "support group" in then  # no interval: it holds at every moment
    ended = section(await alice.page(f"{here}?ended=1"), "episodes")
    assert "An old note" in ended and "ended 2023-01-01 00:00:00 UTC (misheard)" in ended
    melanie = section(await alice.page(f"/console/entity/{t.ids['Melanie']}"), "episodes")
    assert "support group" in melanie and "Melanie: mentioned" in melanie and "speaker <a" in melanie
    blocked: list[str] = []
    async with console_in_chromium(blocked) as page:
        await sign_in_with_browser(page, builtin, t)
        await page.goto(f"{builtin.base}{here}")
        assert "support group" in await page.locator("#episodes").inner_text()
        await page.screenshot(path=ARTIFACTS / "entity-episodes.png", full_page=True)
    assert not blocked, blocked
    assert png_size(ARTIFACTS / "entity-episodes.png")[0] == 1200
