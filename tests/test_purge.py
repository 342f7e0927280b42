"""Forgetting for good: a subject written with a marker everywhere it can reach, purged (after its
preview and a confirm naming the count), is then found in no table of the tenant's schema (every
column of every row, as text) and in no answer of any read tool; the audit log says a purge
happened, by whom and how many rows, never what; the operator's command and the retention sweep
do the same."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from typing import Any

import asyncpg
import pytest

from app.auth.principal import ADMIN, READ, WRITE
from tests.support.client import connect, error_code, ok
from tests.support.server import ROOT, serve

MARK = "zqxjmark"
SUBJECT = f"Ada {MARK}"


async def _write_everywhere(c: Any) -> None:
    """The subject, and the marker in every place a write can put it about the subject."""
    ok(
        await c.call_tool(
            "upsert_entities",
            {
                "entities": [
                    {
                        "name": SUBJECT,
                        "type": "person",
                        "description": f"described as {MARK}",
                        "observations": [f"{MARK} likes tea", f"lives at {MARK} street"],
                        "area": "people",
                        "properties": {"note": f"{MARK} property", "nested": {"deep": MARK}},
                    },
                    {"name": f"{SUBJECT} twin", "type": "person", "observations": [f"twin of {MARK}"]},
                    {"name": "Charles Babbage", "type": "person", "observations": ["designed the engine"]},
                    {"name": "Analytical Engine", "type": "machine"},
                ]
            },
        )
    )
    ok(await c.call_tool("add_aliases", {"name": SUBJECT, "aliases": [f"{MARK} alias", "The Countess"]}))
    relations = [
        {"from": SUBJECT, "type": "worked with", "to": "Charles Babbage", "notes": f"notes about {MARK}"},
        {"from": "Analytical Engine", "type": f"programmed by {MARK}", "to": SUBJECT},
    ]
    ok(await c.call_tool("connect_entities", {"relations": relations}))
    # History: a change of fields, a relation changed, a merge (the twin's record and name go with it).
    ok(await c.call_tool("update_entity", {"name": SUBJECT, "changes": {"description": f"now {MARK} again"}}))
    ok(await c.call_tool("merge_entities", {"into": SUBJECT, "merge": [f"{SUBJECT} twin"]}))
    ok(
        await c.call_tool(
            "disconnect_entities", {"relations": [{"from": SUBJECT, "type": "worked with", "to": "Charles Babbage"}]}
        )
    )
    ok(await c.call_tool("connect_entities", {"relations": [relations[0]]}))
    episodes = [{"text": f"{SUBJECT} met Charles Babbage about {MARK}", "speakers": [SUBJECT]}]
    ok(await c.call_tool("add_episodes", {"episodes": episodes}))
    ok(await c.call_tool("add_episodes", {"episodes": [{"text": "Babbage alone", "speakers": ["Charles Babbage"]}]}))


async def _schema(db_settings: Any, tenant: str) -> str:
    conn = await asyncpg.connect(db_settings.admin_dsn())
    try:
        return await conn.fetchval("SELECT schema_name FROM engram.tenants WHERE key = $1", tenant)
    finally:
        await conn.close()


async def _marked(db_settings: Any, tenant: str, marker: str = MARK) -> dict[str, int]:
    """Rows holding `marker` in any column, per table of the tenant's schema (every table, every
    column, as text: jsonb, agtype and arrays included)."""
    schema = await _schema(db_settings, tenant)
    conn = await asyncpg.connect(db_settings.admin_dsn())
    try:
        await conn.execute("LOAD 'age'")
        tables = await conn.fetch(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'm')",
            schema,
        )
        found = {}
        for (table,) in tables:
            n = await conn.fetchval(
                f'SELECT count(*) FROM "{schema}"."{table}" t WHERE strpos(lower(t::text), $1) > 0', marker
            )
            if n:
                found[table] = n
        return found
    finally:
        await conn.close()


READS: list[tuple[str, dict[str, Any]]] = [
    ("search", {"query": MARK}),
    ("search", {"query": "tea"}),
    ("recall", {"query": f"what about {MARK}"}),
    ("find_entities", {"name_contains": MARK}),
    ("find_entities", {}),
    ("read_graph", {}),
    ("query_graph", {"query": "MATCH (n) OPTIONAL MATCH (n)-[r]-(m) RETURN n, r, m"}),
    ("list_episodes", {}),
    ("entity_history", {"name": "Charles Babbage"}),
    ("entity_history", {"name": "Analytical Engine"}),
    ("neighbors", {"entity": "Charles Babbage"}),
    ("get_entity", {"name": "Charles Babbage"}),
    ("audit_log", {}),
    ("find_duplicates", {}),
]


# The read tools of the other endpoints, each with what would find the subject.
DIALECT_READS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "/mcp/memory": [("read_graph", {}), ("search_nodes", {"query": MARK}), ("open_nodes", {"names": [SUBJECT]})],
    "/mcp/neo4j": [
        ("read_graph", {}),
        ("search_memories", {"query": MARK}),
        ("find_memories_by_name", {"names": [SUBJECT]}),
    ],
    "/mcp/chatgpt": [("search", {"query": MARK}), ("search", {"query": "Babbage"})],
}


async def _read_everything(c: Any, reads: list[tuple[str, dict[str, Any]]]) -> list[str]:
    known = {t.name for t in (await c.list_tools()).tools}
    texts = []
    for name, args in reads:
        if name in known:
            result = await c.call_tool(name, args)
            texts.append(str(result.content) + str(result.structured_content))
    return texts


async def _answers(server: Any, tenant: str, c: Any) -> list[str]:
    """What every endpoint's read tools answer (the native ones through `c`)."""
    texts = await _read_everything(c, READS)
    token = server.token(tenant, (READ, WRITE, ADMIN))
    for path, reads in DIALECT_READS.items():
        async with connect(server.base + path, token) as other:
            texts += await _read_everything(other, reads)
    assert len(texts) >= len(READS) + 6
    return texts


@pytest.fixture(scope="module")
def purging(db_settings: Any) -> Any:
    with serve(
        db_settings, ENGRAM_EMBEDDING_PROVIDER="none", ENGRAM_DELETED_RETENTION_DAYS="0.00002",
        ENGRAM_RETENTION_SWEEP_SECONDS="1",
    ) as server:  # fmt: skip
        yield server


async def test_a_purged_subject_is_found_nowhere(purging, db_settings):
    tenant = f"test-purge-{uuid.uuid4().hex[:10]}"
    async with purging.client(tenant, (READ, WRITE, ADMIN)) as c:
        await _write_everywhere(c)
        before = await _marked(db_settings, tenant)
        seen = [a for a in await _answers(purging, tenant, c) if MARK in a.lower()]
        assert len(seen) >= 8, len(seen)  # the reads do find the subject before the purge
        assert {"entities", "observations", "aliases", "history", "episodes", "REL", "Entity"} <= set(before), before
        # A preview erases nothing and says how much; a confirm of another count is refused.
        preview = ok(await c.call_tool("purge_entities", {"entities": [SUBJECT], "episodes": "remove"}))
        assert preview["erased"] is False and preview["counts"]["entities"] == 2, preview  # with the merged twin
        assert preview["counts"]["relations"] == 2 and preview["counts"]["episodes"] == 1, preview
        assert await _marked(db_settings, tenant) == before
        wrong = await c.call_tool("purge_entities", {"entities": [SUBJECT], "confirm": 1, "episodes": "remove"})
        assert error_code(wrong) == "conflict"
        assert await _marked(db_settings, tenant) == before
        done = ok(await c.call_tool("purge_entities", {"entities": [SUBJECT], "confirm": 2, "episodes": "remove"}))
        assert done["erased"] is True and done["names"] == [] and MARK not in str(done)
        assert await _marked(db_settings, tenant) == {}
        for answer in await _answers(purging, tenant, c):
            assert MARK not in answer.lower(), answer[:500]
        # The rest of the graph stays; the audit row tells that a purge happened, by whom, how many rows.
        babbage = ok(await c.call_tool("get_entity", {"name": "Charles Babbage"}))
        assert "designed the engine" in str(babbage)
        audit = ok(await c.call_tool("audit_log", {"tool_name": "purge_entities"}))
        (row,) = audit["entries"] if "entries" in audit else audit["calls"]
        assert row["subject"] == "dev-user" and row["affected"][0] == "purge: 2 entities", row
        # Gone means gone: a second purge finds nothing.
        again = await c.call_tool("purge_entities", {"entities": [SUBJECT]})
        assert error_code(again) == "not_found"


async def test_kept_episodes_lose_only_their_link(purging, db_settings):
    tenant = f"test-purge-{uuid.uuid4().hex[:10]}"
    async with purging.client(tenant, (READ, WRITE, ADMIN)) as c:
        await _write_everywhere(c)
        ok(await c.call_tool("purge_entities", {"entities": [SUBJECT], "confirm": 2}))
        # The episode's own text stays (the caller chose to keep it) with its search document; nothing
        # else holds the marker.
        assert await _marked(db_settings, tenant) == {"episodes": 1, "search_docs": 1}
        episodes = ok(await c.call_tool("list_episodes", {}))
        assert len(str(episodes)) > 0


async def test_purge_needs_admin_and_bounds_its_input(purging):
    tenant = f"test-purge-{uuid.uuid4().hex[:10]}"
    async with purging.client(tenant, (READ, WRITE)) as c:
        assert "purge_entities" not in {t.name for t in (await c.list_tools()).tools} or error_code(
            await c.call_tool("purge_entities", {"entities": ["x"]})
        ) in ("forbidden", "invalid")
    async with purging.client(tenant, (READ, WRITE, ADMIN)) as c:
        for args in (
            {"entities": []},
            {"entities": ["x"], "confirm": -1},
            {"entities": ["x"], "episodes": "all"},
            {"entities": ["a\x00b"]},
            {"entities": ["x" * 201]},
            {"entities": ["x"] * 101},
        ):
            assert error_code(await c.call_tool("purge_entities", args)) in ("invalid", "limit"), args
        assert error_code(await c.call_tool("purge_entities", {"entities": ["nobody"]})) == "not_found"


async def test_the_operator_purges_from_the_command_line(purging, db_settings):
    tenant = f"test-purge-{uuid.uuid4().hex[:10]}"
    async with purging.client(tenant, (READ, WRITE, ADMIN)) as c:
        await _write_everywhere(c)
    env = {**os.environ, **{k: v for k, v in purging.env.items() if k.startswith("ENGRAM_")}}

    def engram(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "app.cli", "purge", "--tenant", tenant, *args],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    shown = engram("--match", SUBJECT, "--episodes", "remove")
    assert shown.returncode == 0 and "Would erase 2 entities" in shown.stdout, shown.stdout + shown.stderr
    assert await _marked(db_settings, tenant) != {}
    done = engram("--match", SUBJECT, "--episodes", "remove", "--confirm", "2")
    assert done.returncode == 0 and "Erased for good: 2 entities" in done.stdout, done.stdout + done.stderr
    assert await _marked(db_settings, tenant) == {}
    missing = engram("--match", "nobody")
    assert missing.returncode != 0 and "not_found" in missing.stderr


async def _moved_away(db_settings: Any, tenant: str) -> None:
    """What a tenant that moved to another cell leaves on `main`: its directory row naming that
    cell, its tables and role gone (as a finished move's clean-up leaves it)."""
    schema = await _schema(db_settings, tenant)
    conn = await asyncpg.connect(db_settings.admin_dsn())
    try:
        await conn.execute("INSERT INTO engram.cells (name, state) VALUES ('gone', 'draining') ON CONFLICT DO NOTHING")
        await conn.execute("SELECT ag_catalog.drop_graph($1, true)", schema)
        await conn.execute("UPDATE engram.tenants SET cell = 'gone' WHERE key = $1", tenant)
        await conn.execute(f"DROP ROLE IF EXISTS {schema}")
    finally:
        await conn.close()


async def _forget(db_settings: Any, tenant: str) -> None:
    conn = await asyncpg.connect(db_settings.admin_dsn())
    try:
        await conn.execute("DELETE FROM engram.tenants WHERE key = $1", tenant)
        await conn.execute("DELETE FROM engram.cells WHERE name = 'gone'")
    finally:
        await conn.close()


async def test_deleted_entities_past_their_retention_are_purged(purging, db_settings):
    tenant = f"test-purge-{uuid.uuid4().hex[:10]}"
    # A tenant sorted first whose tables are elsewhere: the sweep goes past it to every other one.
    gone = f"test-purge-0-{uuid.uuid4().hex[:10]}"
    async with purging.client(gone, (READ, WRITE, ADMIN)) as c:
        ok(await c.call_tool("upsert_entities", {"entities": [{"name": "Gone", "type": "x"}]}))
        ok(await c.call_tool("remove_entities", {"entities": ["Gone"]}))
    await _moved_away(db_settings, gone)
    try:
        await _swept(purging, db_settings, tenant)
    finally:
        await _forget(db_settings, gone)


async def _swept(purging: Any, db_settings: Any, tenant: str) -> None:
    async with purging.client(tenant, (READ, WRITE, ADMIN)) as c:
        await _write_everywhere(c)
        ok(await c.call_tool("remove_entities", {"entities": [SUBJECT]}))
        # The sweep runs every second here and keeps deleted entities about two seconds; a pass walks
        # every tenant of the suite's database, so on a loaded machine it may take a while (a bound on
        # waiting, not a timing assertion).
        for _ in range(360):
            if "entities" not in await _marked(db_settings, tenant):
                break
            await asyncio.sleep(0.5)
        left = await _marked(db_settings, tenant)
        assert "entities" not in left and "observations" not in left and "REL" not in left, left
        audit = ok(await c.call_tool("audit_log", {"tool_name": "purge"}))
        assert str(audit).count("purge: 2 entities") == 1, audit


async def _episodes_left(db_settings: Any, tenant: str) -> list[str]:
    schema = await _schema(db_settings, tenant)
    conn = await asyncpg.connect(db_settings.admin_dsn())
    try:
        return [r[0] for r in await conn.fetch(f'SELECT content FROM "{schema}".episodes ORDER BY id')]
    finally:
        await conn.close()


# Written before the subject existed, so not linked to it: two name it (by name, by an alias), one
# has its words but not as its name, one is about someone else.
EARLY = [
    f"Notes: {SUBJECT} wrote the first program",
    "The Countess corresponded with Babbage",
    f"Ada met the {MARK} team",
    "Menabrea translated the paper",
]


async def test_the_preview_names_kept_episodes_that_still_name_the_subject(purging, db_settings):
    """Mentions are read from the text too, not only from links: a preview that keeps episodes says
    how many still name the subject and the option that erases them; that option erases exactly
    those (and the linked ones), not an episode that only shares a word."""
    tenants = [f"test-purge-{uuid.uuid4().hex[:10]}" for _ in range(2)]  # one keeps its episodes, one not
    for tenant in tenants:
        async with purging.client(tenant, (READ, WRITE, ADMIN)) as c:
            ok(await c.call_tool("add_episodes", {"episodes": [{"text": t} for t in EARLY]}))
            await _write_everywhere(c)  # adds the alias "The Countess" and an episode spoken by the subject
            ok(await c.call_tool("add_episodes", {"episodes": [{"text": "Hello there", "speakers": [SUBJECT]}]}))
    keeping, removing = tenants
    async with purging.client(keeping, (READ, WRITE, ADMIN)) as c:
        preview = await c.call_tool("purge_entities", {"entities": [SUBJECT]})
        counts = ok(preview)["counts"]
        assert (counts["episodes_kept_mentioning"], counts["episodes"]) == (3, 0), counts
        said = preview.content[0].text  # type: ignore[union-attr]
        assert "3 kept episodes still name them (episodes=remove erases those too)" in said, said
        assert len(said.splitlines()) <= 2, said
        removal = ok(await c.call_tool("purge_entities", {"entities": [SUBJECT], "episodes": "remove"}))
        counts = removal["counts"]  # linked (the two it spoke) or naming it (two early ones)
        assert (counts["episodes"], counts["episodes_kept_mentioning"]) == (4, 0), counts
        assert "kept episode" not in removal["summary"]
        done = ok(await c.call_tool("purge_entities", {"entities": [SUBJECT], "confirm": 2}))
        assert done["summary"].endswith(" 3 kept episodes still name them."), done["summary"]
    assert len(await _episodes_left(db_settings, keeping)) == len(EARLY) + 3
    # The kept episodes the subject spoke no longer carry its name in their search documents ("Hello
    # there" did): the marker stays only where the episodes' own text, kept as asked, holds it.
    assert await _marked(db_settings, keeping) == {"episodes": 3, "search_docs": 3}
    async with purging.client(removing, (READ, WRITE, ADMIN)) as c:
        ok(await c.call_tool("purge_entities", {"entities": [SUBJECT], "confirm": 2, "episodes": "remove"}))
    assert await _episodes_left(db_settings, removing) == [EARLY[2], EARLY[3], "Babbage alone"]
