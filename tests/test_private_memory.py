"""Private and shared memory inside one tenant (docs/private-memory.md), against a real server and
database with real tokens for several principals of the same tenant: what one principal keeps
privately — through add_episodes or its assistant's hooks — is found by no other principal of the
tenant, administrators included, through any read path: every read tool of every endpoint asked
with the private text's own words, the hooks' briefs, the tenant administrator's export; its owner
finds it everywhere; an administrator may erase it without reading it; the operator's export
holds it (backups are whole-tenant)."""

from __future__ import annotations

import asyncio
import random
import shutil
import string
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import asyncpg
import httpx2
import orjson
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult

from app.auth.principal import ADMIN, READ, WRITE, principal_key
from app.config import ENDPOINT_PATHS, Settings
from app.devdb import provision
from app.store import migrate
from app.store.database import NOBODY
from tests.support.auth import add_user
from tests.support.client import connect, error_code, ok, record
from tests.support.console import seed as console_seed
from tests.support.console import serve_console
from tests.support.hooks import common, context, engram, new_tenant, post, session
from tests.support.listing import SCOPES, seed
from tests.support.oauth_agent import oauth_client
from tests.support.server import TEST_DB, Server, open_database

ALL = (READ, WRITE, ADMIN)


def word() -> str:
    """A word no memory holds: letters only, so that full-text search keeps it whole."""
    return "".join(random.choice(string.ascii_lowercase) for _ in range(14))


def as_(server: Server, tenant: str, subject: str, tool_set: str = "native") -> AbstractAsyncContextManager[Client]:
    token = server.token(tenant, ALL, subject=subject)
    return connect(f"{server.base}{ENDPOINT_PATHS[tool_set]}", token)


def seen(result: CallToolResult) -> str:
    """Everything a caller is given by one call: its texts and its structured content."""
    texts = [c.text for c in result.content if c.type == "text"]
    return "\n".join(texts) + orjson.dumps(result.structured_content).decode()


async def until(check: Any, seconds: float = 60) -> Any:
    """`check()` once it is truthy (a hook's capture may end after its answer on a loaded machine)."""
    deadline = time.monotonic() + seconds
    while True:
        found = await check()
        if found or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.3)


def variants(arguments: dict[str, Any], schema: dict[str, Any], marker: str) -> list[dict[str, Any]]:
    """A call's arguments as a model fills them in, then with each of its texts (a string, or a list
    of strings) asked with the marker instead, and the whole record (`detail="full"`)."""
    out = [arguments]
    for name, prop in schema.get("properties", {}).items():
        kinds = [prop, *prop.get("anyOf", [])]
        if any(k.get("type") == "string" and "enum" not in k and "format" not in k for k in kinds):
            out.append({**arguments, name: marker})
        elif any(k.get("type") == "array" and k.get("items", {}).get("type") == "string" for k in kinds):
            out.append({**arguments, name: [marker]})
    if "detail" in schema.get("properties", {}):
        out += [{**a, "detail": "full"} for a in list(out)]
    return out


async def walk(server: Server, tenant: str, subject: str, marker: str) -> str:
    """What `subject` is given by every read tool of every endpoint asked with `marker`."""
    async with as_(server, tenant, subject) as native:
        values = await seed(native)
    given = []
    for tool_set in SCOPES:
        async with as_(server, tenant, subject, tool_set) as c:
            for tool in (await c.list_tools()).tools:
                if not (tool.annotations and tool.annotations.read_only_hint):
                    continue
                base = values.for_tool(tool.input_schema, tool.description)
                for arguments in variants(base, tool.input_schema, marker):
                    given.append(seen(await c.call_tool(tool.name, arguments)))
            if tool_set == "native":  # the whole graph in Cypher, as a reader would ask it
                for query in ("MATCH (n) RETURN n LIMIT 500", "MATCH (a)-[r]->(b) RETURN a, r, b LIMIT 500"):
                    given.append(seen(await c.call_tool("query_graph", {"query": query, "detail": "full"})))
    return "\n".join(given)


@pytest.fixture(scope="module")
async def kept(server: Server) -> dict[str, Any]:
    """A tenant where alice keeps a note and a hook-captured prompt privately, and a shared note."""
    tenant = new_tenant(server)
    marker, note, turn, shared = word(), word(), word(), word()
    async with as_(server, tenant, "alice") as a:
        ok(await a.call_tool("upsert_entities", {"entities": [{"name": "Vault Project", "type": "project"}]}))
        written = ok(
            await a.call_tool(
                "add_episodes",
                {
                    "episodes": [
                        {"text": f"Vault Project: the {marker} vault opens with {note}.", "private": True},
                        {"text": f"Vault Project: the {marker} review is on {shared}day."},
                    ]
                },
            )
        )
    private_id, shared_id = (e["id"] for e in written["episodes"])
    assert [e["private"] for e in written["episodes"]] == [True, False]
    token = server.token(tenant, (READ, WRITE), subject="alice")
    asked = common(session(), "UserPromptSubmit", prompt=f"Remember that the {marker} alarm code is {turn}.")
    assert (await post(server, token, asked)).status_code == 200

    async def captured() -> bool:
        async with as_(server, tenant, "alice") as a:
            page = record(await a.call_tool("list_episodes", {"limit": 50, "detail": "full"}))
        return any(turn in e["text"] and e["private"] for e in page["episodes"])

    assert await until(captured), "alice's prompt was not kept privately"
    return {
        "tenant": tenant, "marker": marker, "secrets": (note, turn), "shared": shared,
        "private_id": private_id, "shared_id": shared_id,
    }  # fmt: skip


async def test_the_owner_finds_her_private_memory_everywhere(server, kept):
    note, turn = kept["secrets"]
    async with as_(server, kept["tenant"], "alice") as a:
        recalled = seen(await a.call_tool("recall", {"query": kept["marker"], "detail": "full"}))
        listed = record(await a.call_tool("list_episodes", {"entity": "Vault Project", "detail": "full"}))
    assert note in recalled and turn in recalled and kept["shared"] in recalled
    assert '"private":true' in recalled
    assert {e["id"]: e["private"] for e in listed["episodes"]} == {kept["private_id"]: True, kept["shared_id"]: False}
    # Her assistant's next session is briefed with it; her prompts are given it.
    token = server.token(kept["tenant"], (READ, WRITE), subject="alice")
    brief = context(await post(server, token, common(session(), "SessionStart", source="startup")))
    assert brief is not None and (note in brief or turn in brief)


@pytest.mark.parametrize("subject", ["bob", "carol-admin"])
async def test_no_other_principal_finds_it_through_any_read_path(server, kept, subject):
    """Every read tool of every endpoint with the private text's words (the admin too), then the
    hooks' brief and prompt injection: 0 leaks. The shared note is found (the walk can find)."""
    tenant, marker = kept["tenant"], kept["marker"]
    given = await walk(server, tenant, subject, marker)
    for secret in kept["secrets"]:
        assert secret not in given, f"{subject} was given {secret!r}"
    assert kept["shared"] in given
    token = server.token(tenant, (READ, WRITE), subject=subject)
    sid = session()
    start = common(sid, "SessionStart", source="startup", cwd=f"/home/{subject}/{marker}")
    asked = common(sid, "UserPromptSubmit", prompt=f"What opens the {marker} vault, and the alarm code?")
    for event in (start, asked):
        said = context(await post(server, token, event)) or ""
        assert not any(s in said for s in kept["secrets"]), (event["hook_event_name"], said)
    # Its ids are no handle either: nothing to end or delete.
    async with as_(server, tenant, subject) as c:
        for tool in ("invalidate_episodes", "remove_episodes"):
            changed = ok(await c.call_tool(tool, {"ids": [kept["private_id"]]}))
            assert changed == {"ids": [], "unchanged": [kept["private_id"]]}, tool


async def test_the_tenant_export_holds_the_callers_memory_and_the_operators_all_of_it(server, kept):
    tenant = kept["tenant"]
    note, turn = kept["secrets"]
    for subject, sees in (("carol-admin", False), ("alice", True)):
        token = server.token(tenant, ALL, subject=subject)
        async with httpx2.AsyncClient(timeout=60) as http:
            r = await http.get(f"{server.base}/admin/export", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200 and kept["shared"] in r.text
        assert (note in r.text, turn in r.text) == (sees, sees), subject
    whole = engram(server, "export", "--tenant", tenant)  # the operator's: every principal's, with its owner
    lines = [orjson.loads(line) for line in whole.splitlines()]
    private = [x for x in lines if x.get("type") == "episode" and "owner" in x]
    hers = [x for x in private if note in x["text"] or turn in x["text"]]
    assert len(hers) == 2 and len({x["owner"] for x in hers}) == 1  # alice's note and prompt
    assert not any(kept["shared"] in x["text"] for x in private)


async def test_an_administrator_erases_a_private_memory_without_reading_it(server):
    tenant = new_tenant(server)
    secret = word()
    notes = [{"text": f"dave's {secret} {i}", "private": True} for i in range(3)] + [{"text": "team lunch"}]
    async with as_(server, tenant, "dave") as d:
        ok(await d.call_tool("add_episodes", {"episodes": notes}))
    async with as_(server, tenant, "carol-admin") as admin:
        preview = ok(await admin.call_tool("erase_private_memory", {"subject": "dave"}))
        assert preview["erased"] is False and preview["episodes"] == 3 and secret not in orjson.dumps(preview).decode()
        refused = await admin.call_tool("erase_private_memory", {"subject": "dave", "confirm": 2})
        assert error_code(refused) == "conflict"
        done = ok(await admin.call_tool("erase_private_memory", {"subject": "dave", "confirm": 3}))
        assert done["erased"] is True and done["episodes"] == 3
    async with as_(server, tenant, "dave") as d:
        left = record(await d.call_tool("list_episodes", {"detail": "full"}))
    assert [e["text"] for e in left["episodes"]] == ["team lunch"]
    token = server.token(tenant, (READ, WRITE), subject="dave")  # not an administrator: refused
    async with connect(server.url, token) as d:
        with pytest.raises(MCPError):  # the scope it lacks, as for any tool its token does not reach
            await d.call_tool("erase_private_memory", {"subject": "carol-admin"})


async def test_a_tenant_may_share_its_hooks_turns(server):
    tenant = new_tenant(server)
    engram(server, "hooks", "set", tenant, "--private", "off")
    said = word()
    token = server.token(tenant, (READ, WRITE), subject="erin")
    prompt = f"The release train {said} leaves on Thursdays."
    assert (await post(server, token, common(session(), "UserPromptSubmit", prompt=prompt))).status_code == 200

    async def shared() -> list[Any]:
        async with as_(server, tenant, "frank") as f:
            page = record(await f.call_tool("list_episodes", {"detail": "full"}))
        return [e for e in page["episodes"] if said in e["text"]]

    found = await until(shared)
    assert found and found[0]["private"] is False


@pytest.mark.parametrize("value", ["yes", 1, 0, None, "true", {"on": True}, [True]])
async def test_a_private_flag_that_is_no_boolean_is_refused_and_stores_nothing(server, tenant, value):
    async with as_(server, tenant, "alice") as a:
        refused = await a.call_tool("add_episodes", {"episodes": [{"text": "not kept", "private": value}]})
        assert error_code(refused) == "invalid" and "private" in refused.content[0].text  # type: ignore[union-attr]
        assert record(await a.call_tool("list_episodes", {"detail": "full"}))["episodes"] == []


@pytest.fixture
async def before_private(db_settings: Settings, tmp_path: Path) -> AsyncIterator[tuple[str, str]]:
    """A database of its own migrated up to the step before private memory: (owner URL, app URL);
    dropped afterwards with the tenant roles made in it."""
    name = f"{TEST_DB}_private_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(provision.on_database(db_settings.admin_dsn(), "postgres"))
    await admin.execute(f'CREATE DATABASE "{name}"')
    owner = provision.on_database(db_settings.admin_dsn(), name)
    earlier = tmp_path / "migrations"
    earlier.mkdir()
    for f in sorted(db_settings.migrations_dir.glob("*.sql")):
        if f.name < "0035":
            shutil.copy(f, earlier)
    await migrate.migrate(owner, earlier)
    try:
        yield owner, provision.on_database(db_settings.runtime_dsn(), name)
    finally:
        conn = await asyncpg.connect(owner)
        roles = [r[0] for r in await conn.fetch("SELECT schema_name FROM engram.tenants")]
        await conn.close()
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        for role in roles:
            await admin.execute(f"DROP ROLE IF EXISTS {role}")
        await admin.close()


async def test_the_upgrade_keeps_every_episode_shared(db_settings: Settings, before_private: tuple[str, str]):
    owner, app = before_private
    async with open_database(app) as db:
        tenant = await db.tenant("before-private")
        async with db.transaction(tenant) as tx:  # as the previous version wrote them
            ids = [
                await tx.fetchval(
                    "INSERT INTO {s}.episodes (content, at, created_by) VALUES ($1, now(), 'ann') RETURNING id", text
                )
                for text in ("kept before, by ann", "kept before, by bo")
            ]
            await tx.execute(
                "INSERT INTO {s}.search_docs (episode_id, body, body_hash)"
                " SELECT id, content, '\\x00' FROM {s}.episodes"
            )
        await migrate.migrate(owner, db_settings.migrations_dir)
        for viewer in (principal_key("iss", "ann"), principal_key("iss", "someone else"), NOBODY):
            async with db.transaction(tenant, readonly=True, viewer=viewer) as tx:
                rows = await tx.fetch("SELECT id, owner FROM {s}.episodes ORDER BY id")
                docs = await tx.fetch("SELECT episode_id, owner FROM {s}.search_docs ORDER BY episode_id")
            assert [tuple(r) for r in rows] == [(i, None) for i in ids] == [tuple(d) for d in docs], viewer


@pytest.fixture(scope="module")
def builtin(db_settings: Settings) -> Iterator[Server]:
    with serve_console(db_settings) as running:
        yield running


async def test_the_console_shows_a_private_memory_to_its_owner_only(builtin, browse):
    """The console's pages as the tenant's administrator (find, the entity's page, the graph, hooks,
    the query page, the admin pages, the export) never show a member's private episode; its owner's
    entity page does."""
    lab = await console_seed(builtin, [{"name": "Vault Project", "type": "project"}], [])
    alice = add_user(builtin, lab.id, "writer")
    alice.tenant = lab.id
    marker, note = word(), word()
    http, _ = oauth_client(builtin.url, alice)
    async with Client(streamable_http_client(builtin.url, http_client=http), mode="legacy") as c:
        mine = {"text": f"Vault Project: the {marker} vault opens with {note}.", "private": True}
        ok(await c.call_tool("add_episodes", {"episodes": [mine]}))
    entity = f"/console/entity/{lab.ids['Vault Project']}"
    admin = await browse(lab.admin, lab.id)
    graph = f"graph?entity={lab.ids['Vault Project']}&depth=2"
    for path in (f"/console/find?q={marker}", entity, f"/console/{graph}", f"/console/api/{graph}",
                 "/console/hooks", "/console/admin", "/console/admin/audit", "/console/query"):  # fmt: skip
        shown = await admin.get(path)
        assert shown.status_code == 200 and note not in shown.text, path
    csrf = admin.csrf(await admin.page("/console/query"))
    rows = await admin.post("/console/query", {"query": "MATCH (n) RETURN n", "csrf": csrf})
    assert rows.status_code == 200 and "Vault Project" in rows.text and note not in rows.text
    exported = await admin.post("/console/admin/export", {"format": "engram", "csrf": csrf})
    assert exported.status_code == 200 and "Vault Project" in exported.text and note not in exported.text
    owner = await browse(alice, lab.id)
    assert note in await owner.page(entity)
