"""Export and import of a tenant's memory, with real parts only: `engram export` / `engram import`
as subprocesses, the server's /admin routes with real tokens, the reference server-memory (when
npm can install it) writing a file through its own tools, and PostgreSQL read as its owner to
check what was (not) written.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import httpx2
import orjson
import pytest

from app.auth.principal import ADMIN, READ, WRITE
from tests.support.client import ok, relate, upsert
from tests.support.server import ROOT, Server
from tests.support.transfer import export, lines_of, summary, write_lines

pytestmark = pytest.mark.timeout(600)


async def owner(server: Server) -> asyncpg.Connection:
    return await asyncpg.connect(server.settings.admin_dsn(), server_settings={"search_path": "ag_catalog, public"})


async def schema_of(conn: asyncpg.Connection, tenant: str) -> str | None:
    return await conn.fetchval("SELECT schema_name FROM engram.tenants WHERE key = $1", tenant)


async def counts(server: Server, tenant: str) -> dict[str, int]:
    """What the tenant holds, read as the owner: every table an import writes."""
    conn = await owner(server)
    try:
        s = await schema_of(conn, tenant)
        if s is None:
            return {}
        out = {}
        for table in ("entities", "observations", "history", "search_docs", '"REL"', '"Entity"', "imports"):
            out[table.strip('"')] = await conn.fetchval(f"SELECT count(*) FROM {s}.{table}")
        out["audit"] = await conn.fetchval(f"SELECT count(*) FROM {s}.audit")
        return out
    finally:
        await conn.close()


async def seed(server: Server, tenant: str) -> None:
    """A small memory written through the tools: every field, metadata, a rename, a deletion."""
    async with server.client(tenant) as c:
        await upsert(
            c,
            [
                {
                    "name": "Ada Lovelace",
                    "type": "person",
                    "description": "Wrote the first program.",
                    "observations": ["born 1815", "worked with Babbage", 'O\'Brien said $$ "hi"'],
                    "area": "history",
                    "topic": "computing",
                    "subtopic": "pioneers",
                    "certainty": 90,
                    "properties": {"born": 1815, "nested": {"list": [1, 2.5, None, True, "ü"]}},
                },
                {"name": "Analytical Engine", "type": "machine", "observations": ["never built"]},
                {"name": "Zoë 🚀", "type": "works at", "observations": ["  spaced  "]},
                {"name": "Gone", "type": "temp", "observations": ["to be deleted"]},
            ],
        )
        await relate(
            c,
            [
                {
                    "from": "Ada Lovelace",
                    "to": "Analytical Engine",
                    "type": "wrote programs for",
                    "strength": 0.75,
                    "notes": "1843",
                    "properties": {"source": "notes"},
                },
                {"from": "Zoë 🚀", "to": "Ada Lovelace", "type": "admires"},
                {"from": "Gone", "to": "Ada Lovelace", "type": "knew"},
            ],
        )
        ok(await c.call_tool("update_entity", {"name": "Analytical Engine", "changes": {"certainty": 40}}))
        ok(await c.call_tool("remove_entities", {"entities": ["Gone"]}))


# --- round trips ------------------------------------------------------------------------------


async def test_engram_round_trip_gives_the_same_file(server: Server, tenant: str, tmp_path: Path) -> None:
    await seed(server, tenant)
    first = export(server, tenant, tmp_path / "a.jsonl", "--include-deleted")
    rows = lines_of(first)
    assert rows[0] == {"type": "header", "format": "engram", "version": 1, "deleted": True, "history": False}
    assert rows[-1] == {"type": "end", "entities": 4, "relations": 3, "history": 0}
    ada = next(r for r in rows if r.get("name") == "Ada Lovelace")
    assert ada["properties"] == {"born": 1815, "nested": {"list": [1, 2.5, None, True, "ü"]}}
    assert [o["text"] for o in ada["observations"]] == ["born 1815", "worked with Babbage", 'O\'Brien said $$ "hi"']
    assert all(o["created_by"] == "dev-user" and o["created_at"] for o in ada["observations"])
    engine = next(r for r in rows if r.get("name") == "Analytical Engine")
    assert engine["version"] == 2 and engine["certainty"] == 40
    assert next(r for r in rows if r.get("name") == "Gone")["deleted_at"] is not None
    rel = next(r for r in rows if r.get("relation_type") == "wrote programs for")
    assert (rel["strength"], rel["notes"], rel["properties"]) == (0.75, "1843", {"source": "notes"})

    copy = tenant + "-copy"
    done = summary(server, copy, tmp_path / "a.jsonl")
    assert done["complete"] and done["refused_total"] == 0
    assert done["entities"]["created"] == 4 and done["relations"]["created"] == 3
    assert export(server, copy, tmp_path / "b.jsonl", "--include-deleted") == first

    # The import wrote history (by the importer), audit rows, and search documents (the entities' own
    # texts, their observations, and the relations as sentences).
    after = await counts(server, copy)
    assert after["history"] >= 4 + 3 and after["audit"] >= 1 and after["search_docs"] == 4 + 6 + 3
    conn = await owner(server)
    try:
        s = await schema_of(conn, copy)
        # (whether the session server's filler has embedded them yet is its business, not the import's)
        actors = {r[0] for r in await conn.fetch(f"SELECT DISTINCT actor FROM {s}.history")}
        assert actors == {f"import:{os.environ.get('USER') or 'root'}"} or all(a.startswith("import:") for a in actors)
        tools = {r[0] for r in await conn.fetch(f"SELECT DISTINCT tool FROM {s}.audit")}
        assert tools == {"import", "export:engram"}  # the second export was audited too
    finally:
        await conn.close()

    # The copy answers the tools like the original.
    async with server.client(copy) as c:
        got = ok(await c.call_tool("get_entity", {"name": "Ada Lovelace"}))
        assert got["id"] == ada["id"] and len(got["relations"]) == 2
        assert ok(await c.call_tool("entity_history", {"name": "Ada Lovelace"}))["entries"]

    # Again: nothing new, and with history the copy's history holds every original row.
    again = summary(server, copy, tmp_path / "a.jsonl")
    assert again["entities"]["unchanged"] == 4 and again["relations"]["unchanged"] == 3
    with_history = export(server, tenant, tmp_path / "h.jsonl", "--include-deleted", "--history")
    original = [r for r in lines_of(with_history) if r["type"] == "history"]
    assert original and summary(server, copy, tmp_path / "h.jsonl")["history"]["added"] == len(original)
    copied = [
        r
        for r in lines_of(export(server, copy, tmp_path / "h2.jsonl", "--include-deleted", "--history"))
        if r["type"] == "history"
    ]
    assert all(r in copied for r in original)
    assert summary(server, copy, tmp_path / "h.jsonl")["history"] == {
        "added": 0,
        "skipped": len(original),
        "refused": 0,
    }


@pytest.mark.parametrize("fmt", ["memory", "neo4j"])
async def test_dialect_round_trip_gives_the_same_file(server: Server, tenant: str, tmp_path: Path, fmt: str) -> None:
    await seed(server, tenant)
    first = export(server, tenant, tmp_path / "a", "--format", fmt)
    if fmt == "neo4j":
        document = json.loads(first)  # one JSON document, laid out one item per line
        assert {e["name"] for e in document["entities"]} == {"Ada Lovelace", "Analytical Engine", "Zoë 🚀"}
        assert len(document["relations"]) == 2  # the deleted entity's relation is not exported
    else:
        assert {r["type"] for r in lines_of(first)} == {"entity", "relation"}
    copy = tenant + "-" + fmt
    done = summary(server, copy, tmp_path / "a")  # the format is told by the file
    assert done["format"] == fmt and done["complete"] and done["entities"]["created"] == 3
    assert export(server, copy, tmp_path / "b", "--format", fmt) == first


async def test_a_neo4j_document_in_any_layout(server: Server, tenant: str, tmp_path: Path) -> None:
    graph = {
        "entities": [
            {"name": "A {[", "type": "t", "observations": ["x\\", 'quote " and }']},
            {"name": "B", "type": "t", "observations": []},
            {"name": "", "type": "t", "observations": []},
        ],
        "relations": [{"source": "A {[", "target": "B", "relationType": "LINKS"}],
    }
    (tmp_path / "pretty.json").write_text(json.dumps(graph, indent=2))
    done = summary(server, tenant, tmp_path / "pretty.json")
    assert done["entities"]["created"] == 2 and done["relations"]["created"] == 1
    assert [(r["line"], r["code"]) for r in done["refused"]] == [(16, "invalid")]  # the item's first line
    (tmp_path / "cut.json").write_text(json.dumps(graph)[:-30])
    cut = summary(server, tenant + "-cut", tmp_path / "cut.json")
    assert cut["entities"]["created"] == 2 and cut["refused"][-1]["reason"].startswith("the document ends")


async def test_memory_files_of_older_reference_versions(server: Server, tenant: str, tmp_path: Path) -> None:
    """Versions before 2025.9 wrote every field a client sent (`{type, ...entity}`); they stored
    dangling relations and duplicates, and the file has no final newline."""
    path = tmp_path / "memory.json"
    path.write_bytes(
        b'{"type":"entity","name":"Alice","entityType":"person","observations":["likes tea","likes tea"],'
        b'"extra":{"from":"a client"}}\n'
        b'{"type":"entity","name":"Alice","entityType":"person","observations":["reads"]}\n'
        b'{"type":"entity","name":"Bob","entityType":"person","observations":[]}\r\n'
        b'{"type":"relation","from":"Alice","to":"Bob","relationType":"knows"}\n'
        b'{"type":"relation","from":"Alice","to":"Bob","relationType":"knows"}\n'
        b'{"type":"relation","from":"Alice","to":"Carol","relationType":"knows","createdAt":"x"}'
    )
    done = summary(server, tenant, path, "--format", "memory")
    assert done["entities"] | {"refused": 0} == {"created": 2, "merged": 1, "unchanged": 0, "skipped": 0, "refused": 0}
    assert done["relations"]["created"] == 1 and done["relations"]["unchanged"] == 1
    assert done["refused"] == [{"line": 6, "code": "dangling", "reason": "no entity named 'Carol'"}]
    rows = lines_of(export(server, tenant, tmp_path / "out", "--format", "memory"))
    assert rows[0] == {
        "type": "entity",
        "name": "Alice",
        "entityType": "person",
        "observations": ["likes tea", "reads"],
    }


async def test_a_file_written_by_the_reference_server_through_its_tools(
    server: Server, tenant: str, tmp_path: Path
) -> None:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    from bench import reference

    if reason := reference.missing(install=True):
        pytest.skip(reason)
    memory = tmp_path / "memory.jsonl"
    params = StdioServerParameters(
        command="node", args=[str(reference.reference_script())], env={"MEMORY_FILE_PATH": str(memory)}
    )
    async with Client(params, mode="legacy") as c:
        entities = [
            {"name": "Ada", "entityType": "person", "observations": ["wrote notes", "O'Brien's \"friend\""]},
            {"name": "Engine", "entityType": "machine", "observations": []},
            {"name": "Zoë", "entityType": "person", "observations": ["emoji 🚀"]},
        ]
        await c.call_tool("create_entities", {"entities": entities})
        await c.call_tool(
            "create_relations",
            {
                "relations": [
                    {"from": "Ada", "to": "Engine", "relationType": "designed"},
                    {"from": "Zoë", "to": "Ada", "relationType": "admires"},
                ]
            },
        )
        await c.call_tool("add_observations", {"observations": [{"entityName": "Engine", "contents": ["steam"]}]})
        graph = (await c.call_tool("read_graph", {})).structured_content
    assert graph is not None
    done = summary(server, tenant, memory)
    assert done["format"] == "memory" and done["refused_total"] == 0
    rows = lines_of(export(server, tenant, tmp_path / "out.jsonl", "--format", "memory"))
    ours = {
        "entities": [r for r in rows if r["type"] == "entity"],
        "relations": [r for r in rows if r["type"] == "relation"],
    }
    key = lambda e: e.get("name") or (e["from"], e["to"])  # noqa: E731
    for kind in ("entities", "relations"):
        want = sorted(graph[kind], key=key)
        got = sorted(({k: v for k, v in r.items() if k != "type"} for r in ours[kind]), key=key)
        assert got == want, kind


# --- resuming ---------------------------------------------------------------------------------


async def test_an_import_killed_midway_resumes_where_it_stopped(server: Server, tenant: str, tmp_path: Path) -> None:
    n = 20_000
    rows: list[Any] = [
        {"type": "entity", "name": f"E{i}", "entityType": "thing", "observations": [f"fact {i}", f"more {i}"]}
        for i in range(n)
    ]
    rows += [
        {"type": "relation", "from": f"E{i}", "to": f"E{(i * 7 + 1) % n}", "relationType": "next"} for i in range(n)
    ]
    path = write_lines(tmp_path / "big.jsonl", rows)
    env = {**server.env, "ENGRAM_EMBEDDING_PROVIDER": "none"}
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "import", "--tenant", tenant, str(path), "--json"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    conn = await owner(server)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and process.poll() is None:
            s = await schema_of(conn, tenant)
            at = await conn.fetchrow(f"SELECT pass, line FROM {s}.imports") if s else None
            if at is not None and at["line"] > n // 4:  # part of the way: some batches committed
                break
            await asyncio.sleep(0.05)
        assert process.poll() is None, "the import finished before it could be interrupted"
        process.send_signal(signal.SIGKILL)
        process.wait()
        s = await schema_of(conn, tenant)
        stopped = await conn.fetchrow(f"SELECT pass, line, finished_at FROM {s}.imports")
        assert stopped["finished_at"] is None and stopped["line"] > 0
    finally:
        await conn.close()

    resumed = summary(server, tenant, path)
    assert resumed["complete"] and resumed["resumed_at_line"] and resumed["refused_total"] == 0
    # Counted over both runs: every entity and relation exactly once.
    assert resumed["entities"]["created"] == n and resumed["relations"]["created"] == n
    assert resumed["observations_added"] == 2 * n
    whole = tenant + "-whole"
    summary(server, whole, path)
    assert export(server, tenant, tmp_path / "x", "--format", "memory") == export(
        server, whole, tmp_path / "y", "--format", "memory"
    )
    done = await counts(server, tenant)
    assert done["entities"] == n and done["REL"] == n and done["observations"] == 2 * n


# --- refusals ---------------------------------------------------------------------------------


async def test_malformed_and_hostile_lines_are_refused_by_line(server: Server, tenant: str, tmp_path: Path) -> None:
    good = {"type": "entity", "name": "Good", "entityType": "t", "observations": ["fine"]}
    deep: Any = 1
    for _ in range(40):
        deep = [deep]
    lines: list[Any] = [
        good,  # 1
        b"not json",  # 2
        b"[1, 2]",  # 3
        {"type": "entity", "name": "nul\u0000", "entityType": "t", "observations": []},  # 4
        {"type": "entity", "name": "x" * 501, "entityType": "t", "observations": []},  # 5
        b'{"type":"entity","name":"\\ud800","entityType":"t","observations":[]}',  # 6 lone surrogate
        {"type": "entity", "name": "Obs", "entityType": "t", "observations": ["a" * 16_001]},  # 7
        {"type": "entity", "name": "Many", "entityType": "t", "observations": ["o"] * 10_001},  # 8
        {"type": "unknown"},  # 9
        {"type": "entity", "name": "NoType", "observations": []},  # 10
        {"type": "relation", "from": "Good", "to": "Missing", "relationType": "r"},  # 11
        {"type": "entity", "name": "Also good", "entityType": "t", "observations": ["ok"]},  # 12
        b"{" * 100_000,  # 13 nesting far past any bound
        b'{"type":"entity","name":"Big","entityType":"t","observations":["' + b"a" * (9 * 1024 * 1024) + b'"]}',  # 14
        {"type": "relation", "from": "Good", "to": "Also good", "relationType": "r"},  # 15
    ]
    path = write_lines(tmp_path / "bad.jsonl", lines)
    done = summary(server, tenant, path, "--format", "memory")
    refused = {r["line"]: (r["code"], r["reason"]) for r in done["refused"]}
    assert set(refused) == {2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14}
    assert refused[11][0] == "dangling" and all(code == "invalid" for line, (code, _) in refused.items() if line != 11)
    assert "NUL" in refused[4][1] and "500" in refused[5][1] and "16000" in refused[7][1] and "10000" in refused[8][1]
    assert done["entities"]["created"] == 2 and done["relations"]["created"] == 1 and done["invalid"] == 11

    # The engram format bounds every field as the tools do.
    base = {"type": "entity", "id": str(uuid.uuid4()), "name": "P", "entity_type": "t", "observations": []}
    engram = write_lines(
        tmp_path / "bad-engram.jsonl",
        [
            {"type": "header", "format": "engram", "version": 1},
            {**base, "properties": {"deep": deep}},
            {**base, "properties": {f"k{i}": i for i in range(51)}},
            b'{"type":"entity","id":"%s","name":"P","entity_type":"t","properties":{"n":18446744073709551616}}'
            % base["id"].encode(),
            {**base, "certainty": 101},
            {**base, "id": "NOT-AN-ID"},
            {**base, "created_at": "yesterday"},
            {**base, "created_at": "2026-01-01T00:00:00"},
            {**base, "version": 0},
            {**base, "surprise": 1},
            {"type": "relation", "from": "P", "to": "P", "relation_type": "r", "strength": 2},
            {
                "type": "history",
                "entity_id": base["id"],
                "action": "DROP TABLE",
                "changes": {},
                "actor": "a",
                "at": "2026-01-01T00:00:00+00:00",
            },
        ],
    )
    bad = summary(server, tenant + "-e", engram)
    assert sorted(r["line"] for r in bad["refused"]) == list(range(2, 13)) and bad["entities"]["created"] == 0
    assert "2^63" in bad["refused"][2]["reason"] or "64 bits" in bad["refused"][2]["reason"]


async def test_on_existing_skip_and_error(server: Server, tenant: str, tmp_path: Path) -> None:
    first = write_lines(
        tmp_path / "a.jsonl", [{"type": "entity", "name": "X", "entityType": "t", "observations": ["1"]}]
    )
    summary(server, tenant, first)
    second = write_lines(
        tmp_path / "b.jsonl", [{"type": "entity", "name": "X", "entityType": "u", "observations": ["2"]}]
    )
    skipped = summary(server, tenant, second, "--on-existing", "skip")
    assert skipped["entities"]["skipped"] == 1 and skipped["skipped_because"] == {"entities exist": 1}
    refused = summary(server, tenant, second, "--on-existing", "error")
    assert refused["refused"] == [{"line": 1, "code": "conflict", "reason": "entity 'X' exists"}]
    merged = summary(server, tenant, second)
    assert merged["entities"]["merged"] == 1
    row = lines_of(export(server, tenant, tmp_path / "c", "--format", "memory"))[0]
    assert row == {"type": "entity", "name": "X", "entityType": "u", "observations": ["1", "2"]}


async def test_a_dry_run_writes_nothing_and_counts_what_an_import_would(
    server: Server, tenant: str, tmp_path: Path
) -> None:
    await seed(server, tenant)
    path = tmp_path / "a.jsonl"
    export(server, tenant, path, "--include-deleted", "--history")
    with path.open("ab") as f:
        f.write(b'{"type":"relation","from":"Nobody","to":"Ada Lovelace","relation_type":"r"}\n')
    copy = tenant + "-dry"
    ok_ = summary(server, copy, tmp_path / "a.jsonl", "--dry-run")
    assert ok_["dry_run"] and ok_["complete"]
    before = await counts(server, copy)
    assert before["entities"] == before["REL"] == before["history"] == before["imports"] == before["audit"] == 0
    assert before["search_docs"] == before["Entity"] == before["observations"] == 0
    real = summary(server, copy, tmp_path / "a.jsonl")
    for key in ("entities", "relations", "observations_added", "refused_total", "invalid"):
        assert ok_[key] == real[key], key
    assert ok_["history"]["added"] + ok_["history"]["skipped"] == real["history"]["added"] + real["history"]["skipped"]
    assert real["refused"][0]["code"] == "dangling"


# --- isolation and HTTP -----------------------------------------------------------------------


async def test_export_and_import_never_touch_another_tenant(server: Server, tenant: str, tmp_path: Path) -> None:
    other = tenant + "-other"
    await seed(server, other)
    before = export(server, other, tmp_path / "o1", "--include-deleted", "--history")
    path = write_lines(
        tmp_path / "a.jsonl",
        [
            {"type": "entity", "name": "Ada Lovelace", "entityType": "impostor", "observations": ["not her"]},
            {"type": "relation", "from": "Ada Lovelace", "to": "Analytical Engine", "relationType": "r"},
        ],
    )
    done = summary(server, tenant, path)
    assert done["entities"]["created"] == 1 and done["refused"][0]["code"] == "dangling"
    assert export(server, other, tmp_path / "o2", "--include-deleted", "--history") == before
    mine = lines_of(export(server, tenant, tmp_path / "m", "--include-deleted"))
    assert [r["name"] for r in mine if r["type"] == "entity"] == ["Ada Lovelace"]
    # An engram file of the other tenant, ids included, lands as new rows here, never there.
    summary(server, tenant, tmp_path / "o1")
    assert export(server, other, tmp_path / "o3", "--include-deleted", "--history") == before


async def test_http_export_and_import_for_tenant_admins(server: Server, tenant: str, tmp_path: Path) -> None:
    other = tenant + "-b"
    await seed(server, tenant)
    await seed(server, other)
    admin = server.token(tenant, (READ, WRITE, ADMIN))
    base = server.base
    async with httpx2.AsyncClient(timeout=120) as http:
        got = await http.get(
            f"{base}/admin/export", params={"include_deleted": "true"}, headers={"Authorization": f"Bearer {admin}"}
        )
        assert got.status_code == 200 and got.headers["content-type"].startswith("application/x-ndjson")
        assert got.content == export(server, tenant, tmp_path / "cli.jsonl", "--include-deleted")

        # Into a fresh tenant over HTTP: the same summary as the CLI's, the same file back.
        fresh = tenant + "-fresh"
        fresh_admin = server.token(fresh, (READ, ADMIN))
        done = await http.post(
            f"{base}/admin/import", content=got.content, headers={"Authorization": f"Bearer {fresh_admin}"}
        )
        assert done.status_code == 200, done.text
        assert done.json()["entities"]["created"] == 4 and done.json()["complete"]
        assert export(server, fresh, tmp_path / "f.jsonl", "--include-deleted") == got.content
        dry = await http.post(
            f"{base}/admin/import",
            params={"dry_run": "true", "format": "engram"},
            content=got.content,
            headers={"Authorization": f"Bearer {fresh_admin}"},
        )
        assert dry.json()["dry_run"] and dry.json()["entities"]["unchanged"] == 4

        # Token for one tenant: the other tenant's data is out of reach either way.
        before = export(server, other, tmp_path / "b1", "--include-deleted", "--history")
        hostile = orjson.dumps({"type": "entity", "name": "Ada Lovelace", "entityType": "x", "observations": ["y"]})
        assert (
            await http.post(
                f"{base}/admin/import",
                content=hostile,
                params={"tenant": other},
                headers={"Authorization": f"Bearer {admin}", "X-Tenant": other},
            )
        ).status_code == 200
        assert export(server, other, tmp_path / "b2", "--include-deleted", "--history") == before
        mine = await http.get(
            f"{base}/admin/export", params={"format": "memory"}, headers={"Authorization": f"Bearer {admin}"}
        )
        assert b"impostor" not in mine.content and b"Ada Lovelace" in mine.content

        # Readers and writers are not administrators; no token, a bad one, or cookies alone: refused.
        for scopes in ((READ,), (READ, WRITE)):
            token = server.token(tenant, scopes)
            for method, path in (("GET", "/admin/export"), ("POST", "/admin/import")):
                r = await http.request(
                    method, base + path, content=hostile, headers={"Authorization": f"Bearer {token}"}
                )
                assert r.status_code == 403 and 'scope="memory:admin"' in r.headers["www-authenticate"]
        assert (await http.get(f"{base}/admin/export")).status_code == 401
        assert (await http.get(f"{base}/admin/export", headers={"Authorization": "Bearer nope"})).status_code == 401
        cookie = await http.post(f"{base}/admin/import", content=hostile, headers={"Cookie": "session=abc"})
        assert cookie.status_code == 401 and "cookies" in cookie.json()["error_description"]

        # Bounded body; bad parameters.
        big = await http.post(
            f"{base}/admin/import",
            content=b" " * (server.settings.transfer_max_bytes + 1),
            headers={"Authorization": f"Bearer {admin}"},
        )
        assert big.status_code == 413
        bad = await http.get(
            f"{base}/admin/export", params={"format": "csv"}, headers={"Authorization": f"Bearer {admin}"}
        )
        assert bad.status_code == 400
        before_bad = export(server, tenant, tmp_path / "before-bad.jsonl", "--include-deleted")
        for params in ({"on_existing": "replace"}, {"format": "csv"}, {"on_existing": "merge\x00"}):
            refused = await http.post(
                f"{base}/admin/import", content=hostile, params=params, headers={"Authorization": f"Bearer {admin}"}
            )
            assert refused.status_code == 400 and "one of" in refused.text, (params, refused.text)
        assert export(server, tenant, tmp_path / "after-bad.jsonl", "--include-deleted") == before_bad
        mixed = await http.get(
            f"{base}/admin/export",
            params={"format": "memory", "history": "true"},
            headers={"Authorization": f"Bearer {admin}"},
        )
        assert mixed.status_code == 400
        neo = await http.get(
            f"{base}/admin/export", params={"format": "neo4j"}, headers={"Authorization": f"Bearer {admin}"}
        )
        assert neo.status_code == 200 and len(json.loads(neo.content)["entities"]) == 3


# --- a server-memory file kept whole ------------------------------------------------------------

# Names the reference keeps apart, byte for byte: case, surrounding spaces, NFC and NFD, astral
# characters, a name longer than the native tools' bound; observations empty and long.
EDGE_NAMES = [
    "Dana Whitfield",
    " Dana Whitfield",
    "Dana Whitfield ",
    "dana whitfield",
    "Zo\u00eb",  # NFC
    "Zoe\u0308",  # NFD: another name
    "\U0001d538lpha \U0001f680",
    "N" * 203,
]


async def test_a_reference_file_with_edge_cases_comes_back_whole_through_the_drop_in_endpoint(
    server: Server, tenant: str, tmp_path: Path
) -> None:
    """A file written by the real `@modelcontextprotocol/server-memory`, imported, reads back through
    /mcp/memory as the reference answers: read_graph and open_nodes equal, except the documented
    differences (an empty observation is left out and reported; a dangling relation is reported
    and not stored)."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    from bench import reference

    if reason := reference.missing(install=True):
        pytest.skip(reason)
    memory = tmp_path / "memory.jsonl"
    params = StdioServerParameters(
        command="node", args=[str(reference.reference_script())], env={"MEMORY_FILE_PATH": str(memory)}
    )
    long_fact = "a fact of five thousand characters " + "x" * 4965
    entities = [
        {"name": name, "entityType": "person" if i % 2 else " person ", "observations": [f"fact {i}", f" spaced {i} "]}
        for i, name in enumerate(EDGE_NAMES)
    ]
    entities[0]["observations"] += ["", long_fact, "\U0001f9e0 astral"]
    relations = [
        {"from": a, "to": b, "relationType": t}
        for a, b, t in [
            (EDGE_NAMES[0], EDGE_NAMES[1], "differs from"),
            (EDGE_NAMES[1], EDGE_NAMES[2], "differs from"),
            (EDGE_NAMES[3], EDGE_NAMES[0], "lowercase of"),
            (EDGE_NAMES[4], EDGE_NAMES[5], "composed of"),
            (EDGE_NAMES[7], EDGE_NAMES[6], " knows "),
        ]
    ]
    async with Client(params, mode="legacy") as c:
        await c.call_tool("create_entities", {"entities": entities})
        await c.call_tool("create_relations", {"relations": relations})
        await c.call_tool(
            "add_observations", {"observations": [{"entityName": EDGE_NAMES[2], "contents": ["", "later"]}]}
        )
        wanted_graph = (await c.call_tool("read_graph", {})).structured_content
        wanted_open = (await c.call_tool("open_nodes", {"names": EDGE_NAMES[:3]})).structured_content
    # A dangling relation, as versions of the reference that stored them wrote it.
    with memory.open("ab") as f:
        f.write(b'\n{"type":"relation","from":"Dana Whitfield","to":"Nobody","relationType":"knows"}')
    assert wanted_graph is not None and wanted_open is not None

    done = summary(server, tenant, memory)
    assert done["entities"]["created"] == len(EDGE_NAMES) and done["entities"]["refused"] == 0
    assert done["relations"]["created"] == len(relations)
    assert done["skipped_because"]["empty observations"] == 2
    assert done["refused"] == [
        {"line": len(EDGE_NAMES) + len(relations) + 1, "code": "dangling", "reason": "no entity named 'Nobody'"}
    ]

    def kept(graph: dict[str, Any]) -> dict[str, Any]:
        """The reference's answer without what Engram leaves out: empty observations."""
        return {
            "entities": sorted(
                ({**e, "observations": [o for o in e["observations"] if o]} for e in graph["entities"]),
                key=lambda e: e["name"],
            ),
            "relations": sorted(graph["relations"], key=lambda r: (r["from"], r["to"], r["relationType"])),
        }

    async with server.at("memory").client(tenant) as c:
        graph = ok(await c.call_tool("read_graph", {}))
        opened = ok(await c.call_tool("open_nodes", {"names": EDGE_NAMES[:3]}))
    assert kept(graph) == kept(wanted_graph)
    assert kept(opened) == kept(wanted_open)


async def test_the_drop_in_tools_keep_names_as_given_and_the_native_tools_trim_them(
    server: Server, tenant: str
) -> None:
    """The drop-in endpoint keeps names, types and facts byte for byte (empty facts left out); the
    native tools trim surrounding spaces from names, so an untrimmed name is reached there by id."""
    async with server.at("memory").client(tenant) as c:
        made = ok(
            await c.call_tool(
                "create_entities",
                {
                    "entities": [
                        {"name": " Ada", "entityType": " person", "observations": ["", " x "]},
                        {"name": "Ada", "entityType": "person", "observations": []},
                        {"name": "N" * 500, "entityType": "t", "observations": ["y" * 16_000]},
                    ]
                },
            )
        )
        assert [e["name"] for e in made["entities"]] == [" Ada", "Ada", "N" * 500]
        assert made["entities"][0]["observations"] == [" x "]
        added = ok(await c.call_tool("add_observations", {"observations": [{"entityName": " Ada", "contents": [""]}]}))
        assert added == {"results": [{"entityName": " Ada", "addedObservations": []}]}
        too_long = await c.call_tool(
            "create_entities", {"entities": [{"name": "N" * 501, "entityType": "t", "observations": []}]}
        )
        assert too_long.is_error
        opened = ok(await c.call_tool("open_nodes", {"names": [" Ada"]}))
        assert opened["entities"] == [{"name": " Ada", "entityType": " person", "observations": [" x "]}]
    async with server.client(tenant) as c:
        native = await upsert(c, [{"name": "  Ada  ", "type": "person"}])
        assert native["results"][0]["name"] == "Ada" and native["results"][0]["status"] == "unchanged"
        found = ok(await c.call_tool("find_entities", {"name_contains": "Ada"}))
        spaced = next(e for e in found["entities"] if e["name"] == " Ada")
        assert ok(await c.call_tool("get_entity", {"id": spaced["id"]}))["name"] == " Ada"
