"""More local PostgreSQL clusters beside the development database: cells and their standbys, for
the tests and benchmarks of several clusters (routing, tenant moves, standby reads).

Each runs from the development database's trixie root (`engram db up` builds it), on a port of
its own on 127.0.0.1, with the same `postgres` and `engram_app` passwords as the development
database, `wal_level = logical` (a tenant moves by logical replication), AGE preloaded and `fsync`
off (throw-away data). A standby is a streaming hot standby made by `pg_basebackup -R` with a
physical replication slot of its own on the primary, so the primary keeps the WAL a stopped standby
still needs (up to `max_slot_wal_keep_size`); a standby whose WAL is gone anyway is made anew.
"""

from __future__ import annotations

import asyncio
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import asyncpg

from app.devdb.provision import (
    APP_ROLE,
    DATABASE,
    PG_BIN,
    Chroot,
    LocalState,
    ProvisionError,
    _port_open,
    _prepare_database,
    _run,
)

_BASE = "/var/lib/engram/clusters"  # inside the root
_SLOT_WAL = "2GB"  # the most WAL a primary keeps for a stopped standby
_SETTINGS = (
    "\n# engram local cell\n"
    "listen_addresses = '127.0.0.1'\n"
    "unix_socket_directories = '/tmp'\n"
    "dynamic_shared_memory_type = mmap\n"
    "shared_preload_libraries = 'age'\n"
    "max_connections = 100\n"
    "shared_buffers = 64MB\n"
    "fsync = off\n"
    "synchronous_commit = off\n"
    "full_page_writes = off\n"
    "wal_level = logical\n"
    "max_wal_senders = 20\n"
    "max_replication_slots = 20\n"
    "hot_standby = on\n"
    "hot_standby_feedback = on\n"
)


@dataclass(frozen=True)
class Cluster:
    """A started local cluster: its name, port and the development database's passwords."""

    name: str
    port: int
    state: LocalState

    def url(self, *, admin: bool = False, database: str = DATABASE) -> str:
        user, password = ("postgres", self.state.admin_password) if admin else (APP_ROLE, self.state.app_password)
        return f"postgresql://{user}:{quote(password, safe='')}@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        """Stop it fast (its data is kept; `cluster` starts it again)."""
        root = Chroot()
        data = f"{_BASE}/{self.name}"
        if _running(root, data):
            _run(root.in_root(f"{PG_BIN}/pg_ctl", "-D", data, "-m", "fast", "-w", "stop", user="postgres"))


def _state() -> tuple[Chroot, LocalState]:
    state = LocalState.load()
    if state is None or state.kind != "chroot" or not Chroot.possible():
        raise ProvisionError("local cells need the development database's trixie root: run `engram db up` as root")
    return Chroot(), state


def _running(root: Chroot, data: str) -> bool:
    status = root.in_root(f"{PG_BIN}/pg_ctl", "-D", data, "status", user="postgres")
    return subprocess.run(status, capture_output=True).returncode == 0


def _start(root: Chroot, name: str, port: int) -> None:
    data = f"{_BASE}/{name}"
    if _running(root, data):
        return
    if _port_open(port):
        raise ProvisionError(f"port {port} is taken by something other than local cell {name!r}")
    _run(root.in_root("chmod", "700", data))  # a base backup's folder is made by us, not initdb
    root.pg_start(data, f"{_BASE}/{name}.log", port)


def _started(root: Chroot, name: str, port: int, *, remake: bool) -> bool:
    """Start cluster `name`; False if its data would not start (a throw-away cluster, `fsync` off,
    that a crash of the machine left damaged) and `remake`: it is deleted then, to be made anew."""
    try:
        _start(root, name, port)
    except ProvisionError as failed:
        if not remake or _port_open(port):
            raise
        root.say(f"local cell {name} did not start; making it anew: {str(failed)[-300:]}")
        drop(name)
        return False
    return True


def _data(root: Chroot, name: str) -> Path:
    return root.root / _BASE.lstrip("/") / name


def _place(name: str) -> tuple[Chroot, LocalState, Path, bool]:
    """Where cluster `name` keeps its data, and whether it is still to be made (its folder made empty then)."""
    _check_name(name)
    root, state = _state()
    data = _data(root, name)
    fresh = not (data / "PG_VERSION").exists()
    if fresh:
        data.mkdir(parents=True, exist_ok=True)
    return root, state, data, fresh


def _check_name(name: str) -> None:
    if not name.isidentifier() or not name.isascii():
        raise ProvisionError(f"a local cell's name is letters, digits and _: {name!r}")


def cluster(name: str, *, port: int) -> Cluster:
    """Cluster `name` on `port`, made on first use, started if stopped, with database `engram` and
    the run-time role (not migrated: that is the caller's `engram migrate`)."""
    root, state, data, fresh = _place(name)
    if fresh:
        pwfile = root.root / "tmp" / f"engram-pw-{name}"
        pwfile.write_text(state.admin_password)
        try:
            _run(root.in_root("chown", "-R", "postgres:postgres", _BASE, f"/tmp/engram-pw-{name}"))  # noqa: S108
            _run(
                root.in_root(
                    f"{PG_BIN}/initdb", "-D", f"{_BASE}/{name}", "-U", "postgres", "--auth=scram-sha-256",
                    f"--pwfile=/tmp/engram-pw-{name}", "-E", "UTF8", "--locale=C.UTF-8",
                    user="postgres",
                )
            )  # fmt: skip
        finally:
            pwfile.unlink(missing_ok=True)
        with (data / "postgresql.conf").open("a") as conf:
            conf.write(_SETTINGS)
    if not _started(root, name, port, remake=not fresh):
        return cluster(name, port=port)  # made anew
    made = Cluster(name, port, state)
    asyncio.run(_prepare_database(LocalState(state.kind, port, state.admin_password, state.app_password)))
    return made


def standby(primary: Cluster, *, name: str, port: int) -> Cluster:
    """A streaming hot standby of `primary` on `port`, made by a base backup on first use, and made
    anew when the primary no longer keeps the WAL it would replay from (its slot gone or lost)."""
    root, state, _, fresh = _place(name)
    if not fresh and not asyncio.run(_slot_kept(primary, name)):
        root.say(f"local standby {name} can no longer stream from {primary.name}; making it anew")
        drop(name)
        root, state, _, fresh = _place(name)
    if fresh:
        asyncio.run(_fresh_slot(primary, name))
        _run(root.in_root("chown", "-R", "postgres:postgres", _BASE))
        source = f"host=127.0.0.1 port={primary.port} user=postgres password={state.admin_password}"
        _run(
            root.in_root(
                f"{PG_BIN}/pg_basebackup", "-d", source, "-D", f"{_BASE}/{name}", "-R", "-X", "stream",
                "-c", "fast", "-C", "-S", name, user="postgres",
            )
        )  # fmt: skip
    if not _started(root, name, port, remake=not fresh):
        return standby(primary, name=name, port=port)  # made anew
    return Cluster(name, port, state)


async def _slot_kept(primary: Cluster, slot: str) -> bool:
    """Whether `primary` still keeps the WAL from its standby's slot on."""
    conn = await asyncpg.connect(primary.url(admin=True, database="postgres"))
    try:
        status = await conn.fetchval("SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1", slot)
    finally:
        await conn.close()
    return status in ("reserved", "extended", "unreserving")


async def _fresh_slot(primary: Cluster, slot: str) -> None:
    """No slot named `slot` left on `primary` for the base backup to make, and the WAL a slot may keep
    bounded (clusters made before the bound get it here)."""
    conn = await asyncpg.connect(primary.url(admin=True, database="postgres"))
    try:
        await conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", slot
        )
        await conn.execute(f"ALTER SYSTEM SET max_slot_wal_keep_size = '{_SLOT_WAL}'")
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()


def drop(name: str) -> None:
    """Stop cluster `name` and delete its data."""
    _check_name(name)
    root, _ = _state()
    data = _data(root, name)
    if data.exists():
        if _running(root, f"{_BASE}/{name}"):
            _run(
                root.in_root(
                    f"{PG_BIN}/pg_ctl", "-D", f"{_BASE}/{name}", "-m", "immediate", "-w", "stop", user="postgres"
                )
            )
        _run(root.in_root("rm", "-rf", f"{_BASE}/{name}"))


async def caught_up(primary: Cluster, standby: Cluster, seconds: float = 60) -> None:
    """Wait until `standby` has replayed what `primary` has written so far (its insert position:
    with asynchronous commit, a commit may not have reached the write position yet)."""
    source = await asyncpg.connect(primary.url(admin=True, database="postgres"))
    try:
        lsn = await source.fetchval("SELECT pg_current_wal_insert_lsn()::text")
    finally:
        await source.close()
    replica = await asyncpg.connect(standby.url(admin=True, database="postgres"))
    try:
        async with asyncio.timeout(seconds):
            replayed = False
            while not replayed:
                replayed = await replica.fetchval("SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn", lsn)
                await asyncio.sleep(0 if replayed else 0.05)
    finally:
        await replica.close()
