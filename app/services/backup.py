"""`engram backup` and `engram restore`: a whole cell's database, or one tenant, to one file and
back, checked (docs/operations.md, "Backups").

The file is a tar archive: one gzip-compressed COPY text file per table (a tenant's own rows, for
the control tables of a tenant backup), then `manifest.json`, which names each file's table,
columns, row count and digest, the sequences' values, the tenants and their graphs' labels, the
embedding models, and the migrations the database had. Everything is read in one repeatable-read
snapshot, so the file is consistent without stopping the service.

A restore goes into a database migrated to the same migrations (`engram migrate` of the same
Engram version): for a cell, one that holds no tenant yet; for a tenant, one that does not hold
it. In one transaction it makes each tenant's role, graph and tables by the tenant steps, copies
the rows in, sets the sequences, then compares every table's row count and digest with the
manifest's; any difference rolls the whole restore back, so a restore either is exact or changes
nothing. Then it analyzes the restored tables (search ranks with their statistics).

The file is input, not the operator's word: its members must be the regular files a backup writes,
and every restored row that names a tenant must name one it restores (docs/operations.md, "What a
restore checks in the file"); the digests catch damage, not edits.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import tarfile
import tempfile
import time
import uuid
import zlib
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from app.errors import EngramError
from app.store import backup as store
from app.store.connect import OwnerConnection, owner
from app.version import VERSION

FORMAT = "engram-backup"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
_CHUNK = 1 << 20
# Told after each table written or loaded: (what is done, tables so far, tables in all).
Progress = Callable[[str, int, int], None]


def _quiet(stage: str, done: int, total: int) -> None:
    """No one to tell."""


@dataclass(frozen=True, slots=True)
class Report:
    """What a backup wrote or a restore loaded."""

    kind: str  # "cell" or "tenant"
    tenants: int
    tables: int
    rows: int
    bytes: int
    seconds: float


async def backup(owner_url: str, path: Path, tenant: str | None = None, progress: Progress = _quiet) -> Report:
    """Write the cell's database (or tenant `tenant`) to `path`, which must not exist yet;
    `progress` hears of each table written."""
    if _exists(path):
        raise EngramError("conflict", f"{path} exists: give a new file name")
    started = time.monotonic()
    partial = path.with_name(path.name + ".partial")
    async with owner(owner_url) as conn:
        await store.start_snapshot(conn)
        try:
            tenants = await store.tenants_here(conn, tenant)
            if tenant is not None and not tenants:
                raise EngramError("not_found", f"no tenant {tenant!r} in this database")
            if waiting := await store.behind(conn, tenants):
                raise EngramError(
                    "unavailable",
                    f"run `engram migrate` first: {len(waiting)} tenant(s) wait for steps, {waiting[0]!r} first",
                )
            tables = await store.tables(conn, store.CONTROL, tenant_id=tenants[0].id if tenant else None)
            sequences = [] if tenant else await store.sequences(conn, store.CONTROL)
            labels = {}
            for row in tenants:
                tables += await store.tables(conn, row.schema)
                sequences += await store.sequences(conn, row.schema)
                labels[row.schema] = await store.labels(conn, row.schema)
            manifest: dict[str, Any] = {
                "format": FORMAT,
                "format_version": FORMAT_VERSION,
                "kind": "tenant" if tenant else "cell",
                "engram": VERSION,
                "created_at": datetime.now(UTC).isoformat(),
                "server": await store.server(conn),
                "migrations": await store.migrations(conn),
                "tenants": [asdict(t) for t in tenants],
                "labels": labels,
                "models": [asdict(m) for m in await store.models(conn)],
                "sequences": [asdict(s) for s in sequences],
                "tables": [],
            }
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds keys and secrets
            with os.fdopen(fd, "wb") as out, tarfile.open(fileobj=out, mode="w") as tar:
                for number, table in enumerate(tables):
                    name = f"data/{number:05d}.copy.gz"
                    rows, digest = await store.digest(conn, table)
                    await _add_table(conn, tar, table, name)
                    manifest["tables"].append({**asdict(table), "file": name, "rows": rows, "digest": digest})
                    progress("tables written", number + 1, len(tables))
                _add_bytes(tar, MANIFEST, json.dumps(manifest, indent=1).encode())
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        finally:
            await store.rollback(conn)  # ends the read-only snapshot
    _finish(partial, path)
    return _report(manifest, _size(path), started)


async def _add_table(conn: OwnerConnection, tar: tarfile.TarFile, table: store.Table, name: str) -> None:
    with tempfile.TemporaryFile() as spool:
        with gzip.GzipFile(fileobj=spool, mode="wb", compresslevel=6, mtime=0) as packed:

            async def sink(chunk: bytes) -> None:
                packed.write(chunk)

            await store.copy_out(conn, table, sink)
        size = spool.tell()
        spool.seek(0)
        tar.addfile(_member(name, size), spool)


def _member(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o600, int(time.time())
    return info


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    with tempfile.TemporaryFile() as spool:
        spool.write(data)
        spool.seek(0)
        tar.addfile(_member(name, len(data)), spool)


def _members(tar: tarfile.TarFile, path: Path) -> dict[str, tarfile.TarInfo]:
    """The archive's members by name, each one a backup writes: a regular file named
    `manifest.json` or `data/NNNNN.copy.gz`, once. Links, devices, FIFOs, directories, absolute
    paths and `..` are refused here, before anything is read from them or written anywhere."""
    found: dict[str, tarfile.TarInfo] = {}
    for member in tar.getmembers():
        name = member.name
        if not member.isreg():
            kind = _KINDS.get(member.type, "not a regular file")
            raise EngramError("invalid", f"{path}: {name!r} is {kind}; a backup holds regular files only")
        if name.startswith("/") or ".." in PurePosixPath(name).parts:
            raise EngramError("invalid", f"{path}: {name!r} points outside the archive")
        if name != MANIFEST and not _FILE.fullmatch(name):
            raise EngramError("invalid", f"{path}: {name!r} is not a file a backup writes")
        if name in found:
            raise EngramError("invalid", f"{path}: {name!r} is in the archive twice")
        found[name] = member
    return found


_KINDS = {
    tarfile.SYMTYPE: "a symbolic link",
    tarfile.LNKTYPE: "a hard link",
    tarfile.FIFOTYPE: "a FIFO",
    tarfile.CHRTYPE: "a character device",
    tarfile.BLKTYPE: "a block device",
    tarfile.DIRTYPE: "a directory",
}


def read_archive(tar: tarfile.TarFile, path: Path) -> tuple[dict[str, Any], dict[str, tarfile.TarInfo]]:
    """The archive's manifest, checked to be one this version reads and to reach no further than a
    backup can, and its data files by name: each one a table of the manifest names, and no other."""
    members = _members(tar, path)
    try:
        member = tar.extractfile(members[MANIFEST])
        assert member is not None
        manifest: dict[str, Any] = json.loads(member.read())
    except (OSError, KeyError, tarfile.TarError, ValueError) as exc:
        raise EngramError("invalid", f"{path} is not an Engram backup: {exc}") from None
    if not isinstance(manifest, dict) or (manifest.get("format"), manifest.get("format_version")) != (
        FORMAT,
        FORMAT_VERSION,
    ):
        raise EngramError("invalid", f"{path} is not an Engram backup of format {FORMAT_VERSION}")
    try:
        _check_manifest(manifest)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise EngramError("invalid", f"{path}: its manifest is damaged ({type(exc).__name__}: {exc})") from None
    named = [t["file"] for t in manifest["tables"]]
    if sorted(named) != sorted(set(members) - {MANIFEST}):
        raise EngramError("invalid", f"{path}: its data files are not the ones its manifest names")
    return manifest, members


_SCHEMA = re.compile(r"t_[0-9a-f]{32}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_FILE = re.compile(r"data/\d{5}\.copy\.gz")


def _check_manifest(manifest: dict[str, Any]) -> None:
    """What a restore will touch stays what a backup can hold, whatever the file says: each tenant's
    schema is the one its id gives; tables are the control schema's or a listed tenant's; a tenant
    backup empties only its tenant's schema and loads only that tenant's rows of the control tables."""
    kind = manifest["kind"]
    if kind not in ("cell", "tenant"):
        raise ValueError(f"kind {kind!r}")
    tenants = [store.TenantRow(**t) for t in manifest["tenants"]]
    schemas = set()
    for tenant in tenants:
        if tenant.id != str(uuid.UUID(tenant.id)):
            raise ValueError(f"tenant {tenant.key!r}: id {tenant.id!r} is not written as a backup writes it")
        if tenant.schema != "t_" + tenant.id.replace("-", "") or not _SCHEMA.fullmatch(tenant.schema):
            raise ValueError(f"tenant {tenant.key!r}: schema {tenant.schema!r} is not its id's")
        schemas.add(tenant.schema)
    if kind == "tenant" and len(tenants) != 1:
        raise ValueError("a tenant backup holds one tenant")
    if len({t.id for t in tenants}) != len(tenants):
        raise ValueError("a tenant listed twice")
    seen = set()
    for t in manifest["tables"]:
        schema, name, columns, tenant_id = t["schema"], t["name"], t["columns"], t["tenant_id"]
        if (schema, name) in seen or (kind == "cell" and tenant_id is not None):
            raise ValueError(f"table {schema}.{name}: listed twice, or a tenant's rows in a cell's backup")
        seen.add((schema, name))
        if not (_NAME.fullmatch(name) and columns and all(_NAME.fullmatch(c) for c in columns)):
            raise ValueError(f"table {schema}.{name!r}")
        if schema not in schemas and schema != store.CONTROL:
            raise ValueError(f"table {schema}.{name}: not a listed tenant's")
        if (
            kind == "tenant"
            and schema == store.CONTROL
            and (tenant_id != tenants[0].id or name not in store.TENANT_ROWS)
        ):
            raise ValueError(f"table {schema}.{name}: not the tenant's own rows")
        if not _FILE.fullmatch(t["file"]):
            raise ValueError(f"file {t['file']!r}")
    for seq in manifest["sequences"]:
        if seq["schema"] not in schemas | {store.CONTROL} or not _NAME.fullmatch(seq["name"]):
            raise ValueError(f"sequence {seq['schema']}.{seq['name']}")
        if kind == "tenant" and seq["schema"] == store.CONTROL:
            raise ValueError("a tenant backup sets no control sequence")


async def restore(owner_url: str, path: Path, progress: Progress = _quiet) -> Report:
    """Load the backup at `path` into the database at `owner_url` (see the module's docstring).
    The archive is read through one open file, checked before the database is touched;
    `progress` hears of each table loaded."""
    started = time.monotonic()
    try:
        tar = tarfile.open(path, mode="r:")  # noqa: SIM115 (closed by the `with` below)
    except (OSError, tarfile.TarError) as exc:
        raise EngramError("invalid", f"{path} is not an Engram backup: {exc}") from None
    with tar:
        manifest, members = read_archive(tar, path)
        tenants = [store.TenantRow(**t) for t in manifest["tenants"]]
        tables = [store.Table(t["schema"], t["name"], tuple(t["columns"]), t["tenant_id"]) for t in manifest["tables"]]
        async with owner(owner_url) as conn:
            await _check_target(conn, manifest, tenants)
            await store.begin_restore(conn)
            try:
                await _make_tenants(conn, manifest, tenants)
                await _load(conn, manifest, tenants, tables, lambda name: _chunks(tar, members[name], name), progress)
                if manifest["kind"] == "tenant":
                    await _register_models(conn, manifest, tenants[0])
                await store.set_sequences(conn, [store.Sequence(**s) for s in manifest["sequences"]])
                if missing := await store.cells_missing(conn):
                    raise EngramError("conflict", f"the restored tenants name cells this database lacks: {missing}")
                await store.commit(conn)
            except BaseException:
                await store.rollback(conn)
                raise
            await store.analyze(conn, tables)
    return _report(manifest, _size(path), started)


async def _make_tenants(conn: OwnerConnection, manifest: dict[str, Any], tenants: list[store.TenantRow]) -> None:
    """Each tenant's row, role, graph and tables, by the tenant steps."""
    for tenant in tenants:
        await store.make_tenant(conn, tenant)
        made = [list(label) for label in await store.labels(conn, tenant.schema)]
        if made != manifest["labels"][tenant.schema]:
            raise EngramError("conflict", f"tenant {tenant.key}'s graph labels are made differently here")


async def _register_models(conn: OwnerConnection, manifest: dict[str, Any], tenant: store.TenantRow) -> None:
    """The embedding models the restored vectors name, under the same ids (the cell's table is
    shared: a model the manifest lists but no vector carries is not registered, and one whose
    dimensions are not its vectors' is refused, since the cell's servers register theirs by name)."""
    listed = {m["id"]: store.Model(**m) for m in manifest["models"]}
    for model_id, dimensions in await store.models_named(conn, tenant.schema):
        model = listed.get(model_id)
        if model is None or model.dimensions != dimensions:
            raise EngramError(
                "invalid",
                f"tenant {tenant.key}'s vectors carry embedding model {model_id} with {dimensions} dimensions,"
                " which the backup's manifest does not list so: nothing restored",
            )
        await store.ensure_model(conn, model)


async def _load(
    conn: OwnerConnection,
    manifest: dict[str, Any],
    tenants: list[store.TenantRow],
    tables: list[store.Table],
    data: Callable[[str], AsyncIterator[bytes]],
    progress: Progress,
) -> None:
    """Every table's rows, each table's checked by themselves before they join anything: a
    tenant's rows of a control table (beside other tenants' rows) go through a table of their own."""
    whole = manifest["kind"] == "cell"
    await store.load_rows(conn, tables, [t for t in tables if whole or not t.tenant_id])
    staged = []
    for number, (table, entry) in enumerate(zip(tables, manifest["tables"], strict=True)):
        rows = await store.stage(conn, table, number) if table.tenant_id else table
        await store.copy_in(conn, rows, data(entry["file"]))
        await _check_rows(conn, rows, table, entry, tenants, whole)
        if rows is not table:
            staged.append((rows, table, entry))
        progress("tables loaded", number + 1, len(tables))
    for rows, table, _ in staged:
        await store.adopt(conn, rows, table)
    await _verify(conn, [(table, entry) for _, table, entry in staged])  # as they stand among the others'


async def _check_rows(
    conn: OwnerConnection,
    rows: store.Table,
    table: store.Table,
    entry: dict[str, Any],
    tenants: list[store.TenantRow],
    whole: bool,
) -> None:
    """The rows a table receives name no tenant but those restored (in this database's columns
    that name one, whatever the manifest lists), and their own count and digest are the manifest's.
    A cell's rows that name a tenant by key (memberships, consents, sign-in events) are its
    people's, and may name tenants removed or on another cell: restored as they were."""
    where = f"the backup's {table.schema}.{table.name} rows"
    if (table.schema, table.name) == (store.CONTROL, "tenants") and not await store.tenant_rows_match(
        conn, rows, tenants
    ):
        raise EngramError("invalid", f"{where} are not the tenants its manifest lists: nothing restored")
    for column in await store.tenant_columns(conn, table):
        if whole and column != "tenant_id":
            continue
        if count := await store.strangers(conn, rows, column, tenants):
            raise EngramError(
                "invalid", f"{where}: {count} name a tenant this backup does not hold ({column}): nothing restored"
            )
    found = await store.digest(conn, rows)
    if found != (entry["rows"], entry["digest"]):
        raise EngramError(
            "conflict",
            f"restored rows differ from the backup's, nothing restored: {where}"
            f" ({found[0]}, the manifest {entry['rows']})",
        )


async def _check_target(conn: OwnerConnection, manifest: dict[str, Any], tenants: list[store.TenantRow]) -> None:
    here = [list(m) for m in await store.migrations(conn)]
    if here != manifest["migrations"]:
        theirs = manifest["migrations"][-1][0] if manifest["migrations"] else "none"
        ours = here[-1][0] if here else "none"
        raise EngramError(
            "conflict",
            f"the backup was made at migration {theirs} (Engram {manifest['engram']}), this database is at {ours}: "
            "migrate it with the same Engram version, restore, then upgrade",
        )
    if manifest["kind"] == "cell" and await store.any_tenant(conn):
        raise EngramError("conflict", "a cell's backup is restored into a database that holds no tenant yet")
    for tenant in tenants:
        if await store.tenant_taken(conn, tenant):
            raise EngramError("conflict", f"this database already holds tenant {tenant.key!r} (or its id)")


async def _chunks(tar: tarfile.TarFile, member: tarfile.TarInfo, name: str) -> AsyncIterator[bytes]:
    """A data file's COPY text, or `invalid` if it does not unpack (the whole restore rolls back)."""
    packed = tar.extractfile(member)
    assert packed is not None  # a regular file (read_archive)
    try:
        with gzip.GzipFile(fileobj=packed, mode="rb") as unpacked:
            while chunk := unpacked.read(_CHUNK):
                yield chunk
    except (OSError, EOFError, zlib.error) as exc:
        raise EngramError("invalid", f"{name} of the backup is damaged ({exc}): nothing restored") from None


async def _verify(conn: OwnerConnection, loaded: list[tuple[store.Table, dict[str, Any]]]) -> None:
    differ = []
    for table, entry in loaded:
        rows, digest = await store.digest(conn, table)
        if (rows, digest) != (entry["rows"], entry["digest"]):
            differ.append(f"{table.schema}.{table.name} ({rows} rows, the backup {entry['rows']})")
    if differ:
        raise EngramError("conflict", "restored rows differ from the backup's, nothing restored: " + ", ".join(differ))


def _exists(path: Path) -> bool:
    return path.exists()


def _size(path: Path) -> int:
    return path.stat().st_size


def _finish(partial: Path, path: Path) -> None:
    partial.rename(path)


def _report(manifest: dict[str, Any], size: int, started: float) -> Report:
    return Report(
        kind=manifest["kind"],
        tenants=len(manifest["tenants"]),
        tables=len(manifest["tables"]),
        rows=sum(t["rows"] for t in manifest["tables"]),
        bytes=size,
        seconds=time.monotonic() - started,
    )
