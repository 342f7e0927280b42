"""`engram backup` and `engram restore`, for real: tenants with entities, relations, episodes,
embeddings and history, written by a real server; a whole-cell backup and a one-tenant backup made
by the `engram` command; both restored into a fresh local cluster; then every table's row count and
digest compared on both sides (computed here, not taken from the restore's own check), the graphs'
labels and the sequences too, and the answers of `neighbors`, `recall` and `query_graph` from a
server on the source and on the restored cell compared (docs/operations.md, "Backups")."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from app.config import Settings
from app.devdb import localcells, provision
from app.errors import EngramError
from app.services import backup
from app.store import backup as store
from app.store import connect, migrate
from tests.support.client import ok
from tests.support.server import ROOT, TEST_DB, Server, serve

PORT = 55444  # the restore's own local cluster, made afresh for each run and dropped after it
SOURCE_DB = f"{TEST_DB}_backup"
CELL_DB = f"{TEST_DB}_restored"
TENANT_DB = f"{TEST_DB}_tenant_restored"
TENANTS = ("backup-acme", "backup-globex")


def _on(settings: Settings, runtime: str, owner: str) -> Settings:
    return settings.model_copy(update={"database_url": SecretStr(runtime), "admin_database_url": SecretStr(owner)})


@pytest.fixture(scope="module")
def source(db_settings: Settings) -> Iterator[Settings]:
    """A database of its own on the development cluster, migrated: the cell that is backed up."""
    if os.environ.get("ENGRAM_DATABASE_URL"):
        pytest.skip("the backup tests make databases and a cluster of their own beside the local one")
    admin = provision.with_local_database(Settings()).admin_dsn()
    runtime = provision.with_local_database(Settings()).runtime_dsn()
    asyncio.run(provision.recreate_database(admin, SOURCE_DB))
    owner = provision.on_database(admin, SOURCE_DB)
    asyncio.run(migrate.migrate(owner, db_settings.migrations_dir))
    yield _on(db_settings, provision.on_database(runtime, SOURCE_DB), owner)
    asyncio.run(provision.drop_database(admin, SOURCE_DB))


@pytest.fixture(scope="module")
def restored_cluster() -> Iterator[localcells.Cluster]:
    try:
        localcells.drop("backup")
        cluster = localcells.cluster("backup", port=PORT)
    except provision.ProvisionError as exc:
        pytest.skip(str(exc))
    yield cluster
    localcells.drop("backup")


def _fresh(cluster: localcells.Cluster, name: str, settings: Settings) -> Settings:
    asyncio.run(provision.recreate_database(cluster.url(admin=True), name))
    owner = cluster.url(admin=True, database=name)
    asyncio.run(migrate.migrate(owner, settings.migrations_dir))
    return _on(settings, cluster.url(database=name), owner)


async def _fill(server: Server, tenant: str, n: int) -> None:
    """Entities with observations (embedded), relations, episodes, and history of several kinds."""
    async with server.client(tenant) as c:
        people = [
            {"name": f"Person {i}", "type": "person", "description": f"Engineer number {i} of {tenant}",
             "observations": [f"Person {i} likes {fruit}" for fruit in ("apples", "tea", "chess")[: 1 + i % 3]],
             "properties": {"level": i, "remote": i % 2 == 0}}
            for i in range(n)
        ]  # fmt: skip
        ok(await c.call_tool("upsert_entities", {"entities": [*people, {"name": "Acme", "type": "company"}]}))
        relations = [{"from": f"Person {i}", "to": "Acme", "type": "works at", "strength": 0.5} for i in range(n)]
        relations += [{"from": f"Person {i}", "to": f"Person {i + 1}", "type": "mentors"} for i in range(n - 1)]
        ok(await c.call_tool("connect_entities", {"relations": relations}))
        ok(await c.call_tool("update_entity", {"name": "Person 1", "changes": {"description": "Team lead"}}))
        ok(
            await c.call_tool(
                "invalidate_observations",
                {"items": [{"entity": "Person 0", "observations": ["Person 0 likes apples"]}]},
            )
        )
        ok(await c.call_tool("remove_entities", {"entities": [f"Person {n - 1}"]}))
        episodes = [
            {"text": f"Person 1 met Person 2 about the roadmap, day {d}", "source": f"chat-{d}"} for d in range(3)
        ]
        ok(await c.call_tool("add_episodes", {"episodes": episodes}))


async def _analyze(owner: str) -> None:
    """Planner statistics made from every row, as a restore leaves them: search ranks with them."""
    async with connect.owner(owner) as conn:
        await conn.execute("ANALYZE")


async def _answers(server: Server, tenant: str) -> list[Any]:
    """What the tools answer, less the listings' cursors (signed with the time they were issued)."""
    async with server.client(tenant) as c:
        return [
            {k: v for k, v in answer.items() if k != "next_cursor"}
            for answer in [
                ok(await c.call_tool("neighbors", {"entity": "Person 1", "depth": 2})),
                ok(await c.call_tool("recall", {"query": "who likes tea?", "limit": 20})),
                ok(await c.call_tool("recall", {"query": "roadmap meeting", "mode": "keyword", "limit": 20})),
                ok(
                    await c.call_tool(
                        "query_graph",
                        {"query": "MATCH (a)-[r]->(b) RETURN a.name, type(r), b.name ORDER BY a.name, b.name"},
                    )
                ),
            ]
        ]


async def _state(owner: str, keys: tuple[str, ...] | None) -> dict[str, Any]:
    """Every table's (row count, digest), the labels and the sequences: of the whole database, or of
    the tenants `keys` (their schemas and their own rows of the control tables)."""
    found: dict[str, Any] = {}
    async with connect.owner(owner) as conn:
        await store.start_snapshot(conn)
        try:
            tenants = [t for t in await store.tenants_here(conn) if keys is None or t.key in keys]
            tables = await store.tables(conn, store.CONTROL) if keys is None else []
            for t in tenants:
                if keys is not None:
                    tables += await store.tables(conn, store.CONTROL, tenant_id=t.id)
                tables += await store.tables(conn, t.schema)
                found[f"labels {t.key}"] = await store.labels(conn, t.schema)
                found[f"sequences {t.key}"] = await store.sequences(conn, t.schema)
            for table in tables:
                found[f"{table.schema}.{table.name} {table.tenant_id}"] = await store.digest(conn, table)
        finally:
            await store.rollback(conn)
    return found


def _engram(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "ENGRAM_DATABASE_URL": settings.runtime_dsn(),
        "ENGRAM_ADMIN_DATABASE_URL": settings.admin_dsn(),
    }
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_backup_and_restore_a_cell_and_a_tenant(
    source: Settings, restored_cluster: localcells.Cluster, tmp_path: Path
) -> None:
    with serve(source) as server:
        for n, tenant in enumerate(TENANTS):
            asyncio.run(_fill(server, tenant, 6 + 3 * n))
    # Search weighs words by the table's row count as the statistics keep it, which a writer's
    # backend reports some seconds late: with the writers gone, ANALYZE settles it, as a restore does.
    asyncio.run(_analyze(source.admin_dsn()))
    with serve(source) as server:
        before = {tenant: asyncio.run(_answers(server, tenant)) for tenant in TENANTS}
        assert before[TENANTS[0]][0]["neighbors"] and before[TENANTS[0]][1]["facts"]  # not vacuous
    # (the server stopped: its usage counts are flushed, and the source changes no more)
    cell_file, tenant_file = tmp_path / "cell.backup", tmp_path / "tenant.backup"
    made = _engram(source, "backup", str(cell_file))
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith(f"wrote {cell_file} with a cell of 2 tenant(s): ")
    made = _engram(source, "backup", str(tenant_file), "--tenant", TENANTS[1])
    assert made.returncode == 0, made.stderr
    assert oct(cell_file.stat().st_mode & 0o777) == "0o600"  # it holds signing keys and secrets
    again = _engram(source, "backup", str(cell_file))
    assert again.returncode == 1 and "exists" in again.stderr

    source_all = asyncio.run(_state(source.admin_dsn(), None))
    source_tenant = asyncio.run(_state(source.admin_dsn(), (TENANTS[1],)))
    assert any(rows for rows, _ in (v for k, v in source_all.items() if ".search_docs " in k))  # embeddings
    assert any(rows for rows, _ in (v for k, v in source_all.items() if ".history " in k))

    # The whole cell into a fresh cluster.
    cell = _fresh(restored_cluster, CELL_DB, source)
    loaded = _engram(cell, "restore", str(cell_file))
    assert loaded.returncode == 0, loaded.stderr
    assert "every table's rows and digest match the backup" in loaded.stdout
    print(f"\n{made.stdout}{loaded.stdout}", end="")  # the figures of docs/benchmarks.md
    assert asyncio.run(_state(cell.admin_dsn(), None)) == source_all
    twice = _engram(cell, "restore", str(cell_file))
    assert twice.returncode == 1 and "holds no tenant yet" in twice.stderr

    # One tenant into another fresh database of that cluster that already holds a tenant.
    single = _fresh(restored_cluster, TENANT_DB, source)
    assert _engram(single, "tenant", "create", "already-here").returncode == 0
    loaded = _engram(single, "restore", str(tenant_file))
    assert loaded.returncode == 0, loaded.stderr
    assert asyncio.run(_state(single.admin_dsn(), (TENANTS[1],))) == source_tenant

    with serve(cell) as restored:
        for tenant in TENANTS:
            assert asyncio.run(_answers(restored, tenant)) == before[tenant]

        async def write_after(server: Server) -> None:  # the sequences go on where they were
            async with server.client(TENANTS[0]) as c:
                ok(await c.call_tool("upsert_entities", {"entities": [{"name": "Newcomer", "type": "person"}]}))
                ok(
                    await c.call_tool(
                        "connect_entities", {"relations": [{"from": "Newcomer", "to": "Acme", "type": "works at"}]}
                    )
                )

        asyncio.run(write_after(restored))
    # (the tenant's answers there are those of the cell's copy: the same rows, digest for digest)


def test_restore_refuses_a_database_at_other_migrations(
    source: Settings, restored_cluster: localcells.Cluster, tmp_path: Path
) -> None:
    backup_file = tmp_path / "cell.backup"
    assert _engram(source, "backup", str(backup_file)).returncode == 0
    older = restored_cluster.url(admin=True, database=f"{TEST_DB}_older")
    asyncio.run(provision.recreate_database(restored_cluster.url(admin=True), f"{TEST_DB}_older"))
    trimmed = tmp_path / "migrations"
    trimmed.mkdir()
    for sql in sorted(source.migrations_dir.glob("*.sql"))[:-1]:
        (trimmed / sql.name).write_text(sql.read_text())
    asyncio.run(migrate.migrate(older, trimmed))
    target = _on(source, restored_cluster.url(database=f"{TEST_DB}_older"), older)
    refused = _engram(target, "restore", str(backup_file))
    assert refused.returncode == 1 and "migrate it with the same Engram version" in refused.stderr
    missing = _engram(source, "backup", str(tmp_path / "none.backup"), "--tenant", "no-such-tenant")
    assert missing.returncode == 1 and "not_found: no tenant 'no-such-tenant'" in missing.stderr
    assert not (tmp_path / "none.backup").exists() and not (tmp_path / "none.backup.partial").exists()
    not_a_backup = tmp_path / "junk"
    not_a_backup.write_bytes(b"\0" * 1000)
    assert "is not an Engram backup" in _engram(target, "restore", str(not_a_backup)).stderr


def _rewritten(original: Path, out: Path, change: Any) -> Path:
    """A copy of the backup `original` whose manifest `change(manifest)` edited."""
    import io
    import json
    import tarfile

    with tarfile.open(original) as source, tarfile.open(out, "w") as copy:
        for member in source.getmembers():
            data = source.extractfile(member).read()  # type: ignore[union-attr]
            if member.name == "manifest.json":
                manifest = json.loads(data)
                change(manifest)
                data = json.dumps(manifest).encode()
            member.size = len(data)
            copy.addfile(member, io.BytesIO(data))
    return out


def test_restore_refuses_a_manifest_that_reaches_beyond_its_tenant(
    source: Settings, restored_cluster: localcells.Cluster, tmp_path: Path
) -> None:
    """A backup file is data: whatever its manifest says, a tenant's restore empties only that
    tenant's schema and loads only its rows; an edited manifest is refused and nothing changes."""
    assert _engram(source, "tenant", "create", "backup-hostile").returncode == 0
    original = tmp_path / "tenant.backup"

    async def steps_version(value: str | None) -> str:
        async with connect.owner(source.admin_dsn()) as conn:
            sql = (
                "UPDATE engram.tenants SET steps_version = coalesce($2, steps_version)"
                " WHERE key = $1 RETURNING steps_version"
            )
            return await conn.fetchval(sql, "backup-hostile", value)

    current = asyncio.run(steps_version(None))
    asyncio.run(steps_version(""))  # as a tenant still waiting for `engram migrate`
    with pytest.raises(EngramError, match="run `engram migrate` first") as waiting:
        asyncio.run(backup.backup(source.admin_dsn(), original, "backup-hostile"))
    assert waiting.value.code == "unavailable" and not original.exists()
    asyncio.run(steps_version(current))
    asyncio.run(backup.backup(source.admin_dsn(), original, "backup-hostile"))
    target = _fresh(restored_cluster, f"{TEST_DB}_hostile", source)
    before = asyncio.run(_state(target.admin_dsn(), None))

    def users_table(m: dict[str, Any]) -> None:  # would empty the cell's accounts
        m["tables"].append({**m["tables"][0], "schema": "engram", "name": "users", "tenant_id": None})

    def other_schema(m: dict[str, Any]) -> None:  # a schema that is not the tenant's id's
        m["tenants"][0]["schema"] = "engram"

    def path_out(m: dict[str, Any]) -> None:
        m["tables"][0]["file"] = "../../etc/passwd"

    def odd_name(m: dict[str, Any]) -> None:
        m["tables"][0]["columns"] = ['id"; DROP TABLE engram.users; --']

    for n, change in enumerate((users_table, other_schema, path_out, odd_name)):
        edited = _rewritten(original, tmp_path / f"edited-{n}.backup", change)
        with pytest.raises(EngramError, match="its manifest is damaged") as refused:
            asyncio.run(backup.restore(target.admin_dsn(), edited))
        assert refused.value.code == "invalid", change.__name__
    assert asyncio.run(_state(target.admin_dsn(), None)) == before
    # The file itself, unedited, restores.
    assert asyncio.run(backup.restore(target.admin_dsn(), original)).tenants == 1


def _repacked(original: Path, out: Path, edit: Any) -> Path:
    """A copy of the backup `original` as someone holding the file could make it: `edit(files,
    manifest)` changes the data files (unpacked) and the manifest in place, and returns members to
    add (links, FIFOs, odd paths)."""
    import gzip
    import io
    import json
    import tarfile

    with tarfile.open(original) as source:
        files = {m.name: source.extractfile(m).read() for m in source.getmembers()}  # type: ignore[union-attr]
    manifest = json.loads(files.pop("manifest.json"))
    files = {name: gzip.decompress(data) for name, data in files.items()}
    extra = edit(files, manifest)
    with tarfile.open(out, "w") as copy:
        for name, data in [
            *((n, gzip.compress(d)) for n, d in files.items()),
            ("manifest.json", json.dumps(manifest).encode()),
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            copy.addfile(info, io.BytesIO(data))
        for info in extra or ():
            copy.addfile(info)
    return out


def _entry(manifest: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in manifest["tables"] if t["schema"] == "engram" and t["name"] == name)


async def _digest_of(owner: str, entry: dict[str, Any], data: bytes) -> tuple[int, str]:
    """The count and digest a manifest would need for `data`, computed as anyone with a PostgreSQL
    can: rows loaded into a table like the control table, then digested."""
    async with connect.owner(owner) as conn:
        await store.begin_restore(conn)
        try:
            staged = await store.stage(conn, store.Table("engram", entry["name"], tuple(entry["columns"])), 0)

            async def rows() -> Any:
                yield data

            await store.copy_in(conn, staged, rows())
            return await store.digest(conn, staged)
        finally:
            await store.rollback(conn)


def test_restore_refuses_rows_of_other_tenants_and_members_that_are_not_files(
    source: Settings, restored_cluster: localcells.Cluster, tmp_path: Path
) -> None:
    """Whatever the file holds, a tenant's restore writes only that tenant's rows: an API key row
    naming another tenant is refused (the manifest and its digest edited to match, or not), and so
    are a link, a FIFO and paths out of the archive, with a clear error; nothing changes anywhere."""
    import tarfile

    assert _engram(source, "tenant", "create", "backup-keys").returncode == 0
    assert _engram(source, "apikey", "create", "--tenant", "backup-keys", "--name", "ci").returncode == 0
    original = tmp_path / "keys.backup"
    asyncio.run(backup.backup(source.admin_dsn(), original, "backup-keys"))
    target = _fresh(restored_cluster, f"{TEST_DB}_planted", source)
    assert _engram(target, "tenant", "create", "victim").returncode == 0
    assert _engram(target, "apikey", "create", "--tenant", "victim").returncode == 0

    async def victim_id() -> str:
        async with connect.owner(target.admin_dsn()) as conn:
            return str(await conn.fetchval("SELECT id::text FROM engram.tenants WHERE key = 'victim'"))

    victim = asyncio.run(victim_id())
    before = asyncio.run(_state(target.admin_dsn(), None))

    def foreign_key(files: dict[str, bytes], manifest: dict[str, Any], consistent: bool) -> None:
        entry = _entry(manifest, "api_keys")
        own = files[entry["file"]].splitlines()[0].split(b"\t")
        planted = dict(zip(entry["columns"], own, strict=True)) | {"id": b"planted00key", "tenant_id": victim.encode()}
        data = b"\t".join(planted[c] for c in entry["columns"]) + b"\n"
        files[entry["file"]] += data
        if consistent:  # the manifest's count and digest made to match the file's rows
            entry["rows"], entry["digest"] = asyncio.run(_digest_of(source.admin_dsn(), entry, files[entry["file"]]))

    def other_schema(files: dict[str, bytes], manifest: dict[str, Any]) -> None:  # the tenant's row, repointed
        entry = _entry(manifest, "tenants")
        schema = manifest["tenants"][0]["schema"].encode()
        files[entry["file"]] = files[entry["file"]].replace(schema, b"t_" + victim.replace("-", "").encode())
        entry["rows"], entry["digest"] = asyncio.run(_digest_of(source.admin_dsn(), entry, files[entry["file"]]))

    def member(name: str, kind: bytes, link: str = "") -> Any:
        def add(files: dict[str, bytes], manifest: dict[str, Any]) -> list[tarfile.TarInfo]:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, link
            files.pop(name, None)  # in place of a data file of that name, if there is one
            return [info]

        return add

    data_file = _entry(json_manifest(original), "api_keys")["file"]
    cases = {
        "planted key": (lambda f, m: foreign_key(f, m, False), "1 name a tenant this backup does not hold (tenant_id)"),
        "planted key, manifest to match": (lambda f, m: foreign_key(f, m, True), "does not hold (tenant_id)"),
        "tenant row repointed": (other_schema, "are not the tenants its manifest lists"),
        "symbolic link": (member(data_file, tarfile.SYMTYPE, "/etc/passwd"), "is a symbolic link"),
        "hard link": (member(data_file, tarfile.LNKTYPE, "manifest.json"), "is a hard link"),
        "FIFO": (member("data/99999.copy.gz", tarfile.FIFOTYPE), "is a FIFO"),
        "parent path": (member("../outside", tarfile.REGTYPE), "points outside the archive"),
        "absolute path": (member("/tmp/outside", tarfile.REGTYPE), "points outside the archive"),
        "unlisted file": (member("data/99999.copy.gz", tarfile.REGTYPE), "not the ones its manifest names"),
    }
    for n, (label, (edit, said)) in enumerate(cases.items()):
        edited = _repacked(original, tmp_path / f"hostile-{n}.backup", edit)
        with pytest.raises(EngramError) as refused:
            asyncio.run(backup.restore(target.admin_dsn(), edited))
        assert refused.value.code == "invalid" and said in str(refused.value), (label, str(refused.value))
        if label in ("planted key", "symbolic link"):  # as the operator sees it: a line, no traceback
            said_there = _engram(target, "restore", str(edited))
            assert said_there.returncode == 1 and said_there.stderr.startswith("restore error: invalid: ")
            assert "Traceback" not in said_there.stderr, said_there.stderr
    assert asyncio.run(_state(target.admin_dsn(), None)) == before  # no tenant's rows changed

    # The file restores, with its own key only, and the other tenant's rows as they were; an embedding
    # model its manifest lists but none of its vectors carries stays out of the cell's shared table.
    def extra_model(files: dict[str, bytes], manifest: dict[str, Any]) -> None:
        manifest["models"].append({"id": 77, "name": "planted-model", "dimensions": 3})

    victim_before = asyncio.run(_state(target.admin_dsn(), ("victim",)))
    models_before = asyncio.run(_models(target.admin_dsn()))
    with_model = _repacked(original, tmp_path / "with-model.backup", extra_model)
    assert asyncio.run(backup.restore(target.admin_dsn(), with_model)).tenants == 1
    assert asyncio.run(_state(target.admin_dsn(), ("victim",))) == victim_before
    assert asyncio.run(_models(target.admin_dsn())) == models_before

    async def keys_of(tenant: str) -> int:
        async with connect.owner(target.admin_dsn()) as conn:
            sql = "SELECT count(*) FROM engram.api_keys k JOIN engram.tenants t ON t.id = k.tenant_id WHERE t.key = $1"
            return int(await conn.fetchval(sql, tenant))

    assert (asyncio.run(keys_of("backup-keys")), asyncio.run(keys_of("victim"))) == (1, 1)


async def _models(owner: str) -> list[store.Model]:
    async with connect.owner(owner) as conn:
        return await store.models(conn)


def json_manifest(path: Path) -> dict[str, Any]:
    import json
    import tarfile

    with tarfile.open(path) as tar:
        return json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
