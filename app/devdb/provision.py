"""A local PostgreSQL 17 with Apache AGE and pgvector for development and tests.

Three ways, tried in order by `up()`:
1. ``ENGRAM_DATABASE_URL`` is set: use that server, after checking it can host Engram.
2. A Docker engine answers: run the image built from ``sql/Dockerfile``.
3. Debian/Ubuntu as root: a Debian trixie root made by debootstrap (trixie packages AGE and
   pgvector for PostgreSQL 17), cached under ``~/.cache/engram`` and reused; PostgreSQL runs from
   it on 127.0.0.1.
The superuser and run-time role passwords are generated once and kept in the cache's state file.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import quote

import asyncpg
from pydantic import SecretStr

from app.config import Settings, cache_dir
from app.shipped import sql_dir

APP_ROLE = "engram_app"
DATABASE = "engram"
DEFAULT_PORT = 55432
PG_BIN = "/usr/lib/postgresql/17/bin"
PG_DATA = "/var/lib/engram/pgdata"  # inside the chroot
START_SECONDS = 1800  # a start after an unclean stop recovers first: minutes for a large data directory
DOCKER_IMAGE = "engram-postgres:17"
DOCKER_CONTAINER = "engram-postgres"
REQUIRED_EXTENSIONS = ("age", "vector", "pg_trgm")

Progress = Callable[[str], None]


class ProvisionError(RuntimeError):
    """The local database cannot be provided; the message says what the user can do."""


def _say(message: str) -> None:
    print(f"[engram db] {message}", file=sys.stderr, flush=True)


@dataclass
class LocalState:
    """What `engram db` remembers about the database it provisioned."""

    kind: str  # "chroot" or "docker"
    port: int
    admin_password: str
    app_password: str

    def url(self, *, admin: bool = False) -> str:
        user, password = ("postgres", self.admin_password) if admin else (APP_ROLE, self.app_password)
        return f"postgresql://{user}:{quote(password, safe='')}@127.0.0.1:{self.port}/{DATABASE}"

    @classmethod
    def load(cls) -> LocalState | None:
        path = cache_dir() / "local-db.json"
        return cls(**json.loads(path.read_text())) if path.exists() else None

    def save(self) -> None:
        path = cache_dir() / "local-db.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.write_text(json.dumps(asdict(self), indent=2))


def _run(
    cmd: list[str], *, quiet: bool = True, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    out = subprocess.DEVNULL if quiet else None
    result = subprocess.run(cmd, text=True, stdout=out, stderr=subprocess.PIPE, env=env, check=False)
    if result.returncode != 0:
        raise ProvisionError(f"`{' '.join(cmd[:4])} ...` failed:\n{(result.stderr or '').strip()[-2000:]}")
    return result


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _wait_for_port(port: int, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not _port_open(port):
        if time.monotonic() > deadline:
            raise ProvisionError(f"PostgreSQL did not start listening on 127.0.0.1:{port}")
        time.sleep(0.2)


def _new_state(kind: str) -> LocalState:
    port = int(os.environ.get("ENGRAM_LOCAL_DB_PORT", DEFAULT_PORT))
    if _port_open(port):  # before anything is built or remembered
        raise ProvisionError(_port_in_use(port))
    return LocalState(kind, port, secrets.token_urlsafe(24), secrets.token_urlsafe(24))


def _port_in_use(port: int) -> str:
    return (
        f"127.0.0.1:{port} is in use by another program, so the local PostgreSQL cannot listen there: "
        f"stop that program, or choose another port with ENGRAM_LOCAL_DB_PORT (remove "
        f"{cache_dir() / 'local-db.json'} first if it names {port})"
    )


# --- Debian trixie root -------------------------------------------------------------------


class Chroot:
    """PostgreSQL running from a cached debootstrap root."""

    def __init__(self, say: Progress = _say) -> None:
        self.root = cache_dir() / "pg17-trixie"
        self.say = say

    @staticmethod
    def possible() -> bool:
        return sys.platform == "linux" and os.geteuid() == 0 and Path("/etc/debian_version").exists()

    def in_root(self, *cmd: str, user: str | None = None) -> list[str]:
        prefix = ["chroot", str(self.root)]
        if user:
            prefix += ["runuser", "-u", user, "--"]
        return [*prefix, *cmd]

    def _mirror(self) -> str:
        for path in [Path("/etc/apt/sources.list"), *Path("/etc/apt/sources.list.d").glob("*")]:
            if not path.is_file():
                continue
            for line in path.read_text().splitlines():
                words = line.split()
                if words[:1] == ["URIs:"] or words[:1] == ["deb"]:
                    url = next((w for w in words[1:] if w.startswith("http")), "")
                    if url.rstrip("/").endswith("/debian"):
                        return url
        return "http://deb.debian.org/debian"

    def build(self) -> None:
        if (self.root / ".engram-ready").exists():
            return
        if shutil.which("debootstrap") is None:
            self.say("installing debootstrap (apt-get) ...")
            _run(["apt-get", "update", "-qq"])
            _run(
                ["apt-get", "install", "-y", "-qq", "debootstrap"],
                env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
            )
        partial = self.root.with_name(self.root.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.parent.mkdir(parents=True, exist_ok=True)
        self.say(f"building a Debian trixie root in {self.root} (about a minute, once) ...")
        _run(["debootstrap", "--variant=minbase", "trixie", str(partial), self._mirror()])
        (partial / "etc/postgresql-common").mkdir(parents=True, exist_ok=True)
        (partial / "etc/postgresql-common/createcluster.conf").write_text("create_main_cluster = false\n")
        policy = partial / "usr/sbin/policy-rc.d"
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
        shutil.copy("/etc/resolv.conf", partial / "etc/resolv.conf")
        self.say("installing postgresql-17, postgresql-17-age, postgresql-17-pgvector ...")
        _run(["chroot", str(partial), "apt-get", "update", "-qq"], env=self._ENV)
        packages = ["postgresql-17", "postgresql-17-age", "postgresql-17-pgvector", "locales-all", "pgbouncer"]
        self._apt(partial, *packages)
        (partial / ".engram-ready").touch()
        shutil.rmtree(self.root, ignore_errors=True)
        partial.rename(self.root)

    _ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}

    def _apt(self, root: Path, *packages: str) -> None:
        install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages]
        _run(["chroot", str(root), *install], env=self._ENV)
        _run(["chroot", str(root), "apt-get", "clean"], env=self._ENV)

    def install(self, *packages: str) -> None:
        """Add packages to a root built before they were part of it (PgBouncer for the pooled tests)."""
        self.say(f"installing {' '.join(packages)} in {self.root} ...")
        _run(["chroot", str(self.root), "apt-get", "update", "-qq"], env=self._ENV)
        self._apt(self.root, *packages)

    def _data(self) -> Path:
        return self.root / PG_DATA.lstrip("/")

    def initdb(self, state: LocalState) -> bool:
        if (self._data() / "PG_VERSION").exists():
            return False
        self.say("initialising the database cluster ...")
        data = self._data()
        data.mkdir(parents=True, exist_ok=True)
        pwfile = self.root / "tmp/engram-pw"
        pwfile.write_text(state.admin_password)
        try:
            _run(["chroot", str(self.root), "chown", "-R", "postgres:postgres", "/var/lib/engram", "/tmp/engram-pw"])  # noqa: S108 (inside the chroot)
            _run(
                self.in_root(
                    f"{PG_BIN}/initdb",
                    "-D",
                    PG_DATA,
                    "-U",
                    "postgres",
                    "--auth=scram-sha-256",
                    "--pwfile=/tmp/engram-pw",
                    "-E",
                    "UTF8",
                    "--locale=C.UTF-8",
                    user="postgres",
                )
            )
        finally:
            pwfile.unlink(missing_ok=True)
        with (data / "postgresql.conf").open("a") as conf:
            conf.write(
                "\n# engram local development settings\n"
                "listen_addresses = '127.0.0.1'\n"
                "unix_socket_directories = '/tmp'\n"
                "dynamic_shared_memory_type = mmap\n"
                "shared_preload_libraries = 'age'\n"
                "max_connections = 200\n"
                "shared_buffers = 256MB\n"
                "fsync = on\n"
                "wal_level = logical\n"  # tenants move between cells by logical replication
                "recovery_init_sync_method = syncfs\n"  # after an unclean stop: one sync, not one per file
            )
        return True

    def running(self) -> bool:
        if not (self._data() / "PG_VERSION").exists():
            return False
        result = subprocess.run(
            self.in_root(f"{PG_BIN}/pg_ctl", "-D", PG_DATA, "status", user="postgres"), capture_output=True, text=True
        )
        return result.returncode == 0

    def start(self, state: LocalState) -> None:
        if self.running():
            return
        if _port_open(state.port):
            raise ProvisionError(_port_in_use(state.port))
        self.say(f"starting PostgreSQL on 127.0.0.1:{state.port} ...")
        self.pg_start(PG_DATA, "/var/lib/engram/postgres.log", state.port)

    def pg_start(self, data: str, log: str, port: int) -> None:
        """Start the cluster in `data` (a path inside the root) on `port`, waiting out a recovery."""
        if (self.root / data.lstrip("/") / "postmaster.pid").exists():
            # a lock file left by a killed server; PostgreSQL itself passes over it when its process
            # id is gone or now another user's program (as after a machine is restored)
            self.say("it was not stopped cleanly: recovering first (minutes for a large data directory) ...")
        pg_ctl = f"{PG_BIN}/pg_ctl"
        waiting = ["-w", "-t", str(START_SECONDS)]
        _run(self.in_root(pg_ctl, "-D", data, "-l", log, *waiting, "-o", f"-p {port}", "start", user="postgres"))
        _wait_for_port(port)

    def stop(self) -> None:
        if self.running():
            _run(self.in_root(f"{PG_BIN}/pg_ctl", "-D", PG_DATA, "-m", "fast", "-w", "stop", user="postgres"))


# --- Docker -------------------------------------------------------------------------------


class Docker:
    """PostgreSQL in a container built from ``sql/Dockerfile`` (``app/sql/`` in the wheel)."""

    def __init__(self, say: Progress = _say) -> None:
        self.say = say

    @staticmethod
    def possible() -> bool:
        if shutil.which("docker") is None:
            return False
        return subprocess.run(["docker", "info"], capture_output=True).returncode == 0

    def running(self) -> bool:
        result = subprocess.run(
            ["docker", "inspect", "-f", "{{.State.Running}}", DOCKER_CONTAINER], capture_output=True, text=True
        )
        return result.stdout.strip() == "true"

    def start(self, state: LocalState) -> None:
        if self.running():
            return
        exists = subprocess.run(["docker", "inspect", DOCKER_CONTAINER], capture_output=True).returncode == 0
        if exists:
            self.say("starting the engram-postgres container ...")
            _run(["docker", "start", DOCKER_CONTAINER])
        else:
            self.say(f"building {DOCKER_IMAGE} from {sql_dir() / 'Dockerfile'} ...")
            _run(["docker", "build", "-t", DOCKER_IMAGE, str(sql_dir())], quiet=False)
            self.say("starting the engram-postgres container ...")
            _run(
                [
                    "docker",
                    "run",
                    "-d",
                    "--name",
                    DOCKER_CONTAINER,
                    "-p",
                    f"127.0.0.1:{state.port}:5432",
                    "-e",
                    f"POSTGRES_PASSWORD={state.admin_password}",
                    "-e",
                    f"POSTGRES_DB={DATABASE}",
                    "-v",
                    "engram-pgdata:/var/lib/postgresql/data",
                    DOCKER_IMAGE,
                ]
            )
        _wait_for_port(state.port)

    def stop(self) -> None:
        if self.running():
            _run(["docker", "stop", DOCKER_CONTAINER])


# --- what `engram db` does ------------------------------------------------------------------


def _backend(kind: str, say: Progress) -> Chroot | Docker:
    return Docker(say) if kind == "docker" else Chroot(say)


async def _prepare_database(state: LocalState) -> None:
    """Create the database and the run-time role; both may already exist."""
    admin = await _connect_retrying(state.url(admin=True).rsplit("/", 1)[0] + "/postgres")
    try:
        # Two `engram db up` at once (two suites starting) would update the same role row:
        # "tuple concurrently updated". One at a time; the lock ends with the connection.
        await admin.execute("SELECT pg_advisory_lock(hashtext('engram db up'))")
        if not await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", DATABASE):
            await admin.execute(f'CREATE DATABASE "{DATABASE}"')
        password = await admin.fetchval("SELECT format('%L', $1::text)", state.app_password)
        if await admin.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", APP_ROLE):
            await admin.execute(f"ALTER ROLE {APP_ROLE} LOGIN PASSWORD {password}")
        else:
            await admin.execute(f"CREATE ROLE {APP_ROLE} LOGIN NOSUPERUSER NOBYPASSRLS PASSWORD {password}")
    except asyncpg.PostgresError as exc:
        raise ProvisionError(f"could not prepare the database: {exc}") from exc
    finally:
        await admin.close()


async def _set_logical(state: LocalState) -> bool:
    """Bring a database made before today's defaults up to them: wal_level = logical and a crash
    recovery that syncs the file system once; True if a restart is due."""
    admin = await _connect_retrying(state.url(admin=True).rsplit("/", 1)[0] + "/postgres")
    try:
        if await admin.fetchval("SELECT current_setting('recovery_init_sync_method')") != "syncfs":
            await admin.execute("ALTER SYSTEM SET recovery_init_sync_method = syncfs")  # read at the next start
        if await admin.fetchval("SELECT current_setting('wal_level')") == "logical":
            return False
        await admin.execute("ALTER SYSTEM SET wal_level = logical")
        return True
    finally:
        await admin.close()


async def _connect_retrying(url: str, seconds: float = 30) -> asyncpg.Connection:
    deadline = time.monotonic() + seconds
    while True:
        try:
            return await asyncpg.connect(url, timeout=5)
        except (OSError, asyncpg.CannotConnectNowError, asyncpg.PostgresConnectionError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.3)


async def check_server(url: str) -> None:
    """Fail with a clear message if the server at `url` cannot host Engram."""
    try:
        conn = await asyncpg.connect(url, timeout=10)
    except (OSError, asyncpg.PostgresError) as exc:
        raise ProvisionError(f"cannot connect to ENGRAM_DATABASE_URL: {exc}") from exc
    try:
        rows = await conn.fetch(
            "SELECT name, installed_version IS NOT NULL AS installed FROM pg_available_extensions"
            " WHERE name = ANY($1::text[])",
            list(REQUIRED_EXTENSIONS),
        )
        found = {r["name"]: r["installed"] for r in rows}
        missing = [name for name in REQUIRED_EXTENSIONS if name not in found]
        if missing:
            raise ProvisionError(
                "the server lacks these extensions: "
                + ", ".join(missing)
                + " (install Apache AGE 1.5 and pgvector 0.8 for PostgreSQL 17; see docs/deployment.md)"
            )
        can_create = await conn.fetchval(
            "SELECT rolsuper OR has_database_privilege(current_database(), 'CREATE')"
            " FROM pg_roles WHERE rolname = current_user"
        )
        not_installed = [name for name, installed in found.items() if not installed]
        if not_installed and not can_create:
            raise ProvisionError(
                "extensions not yet created and this role cannot create them: " + ", ".join(not_installed)
            )
    finally:
        await conn.close()


def up(say: Progress = _say) -> LocalState | None:
    """Make a database available; returns the local state, or None for an external server."""
    if url := os.environ.get("ENGRAM_DATABASE_URL"):
        admin_url = os.environ.get("ENGRAM_ADMIN_DATABASE_URL") or url
        say("ENGRAM_DATABASE_URL is set: checking that server ...")
        asyncio.run(check_server(admin_url))
        say("the server has age, vector and pg_trgm available")
        return None
    state = LocalState.load()
    if state is None:
        if Docker.possible():
            state = _new_state("docker")
        elif Chroot.possible():
            state = _new_state("chroot")
        else:
            raise ProvisionError(
                "no database: set ENGRAM_DATABASE_URL to a PostgreSQL 17 with Apache AGE and pgvector, "
                "start a Docker engine, or run `engram db up` as root on Debian/Ubuntu"
            )
        state.save()
    backend = _backend(state.kind, say)
    if isinstance(backend, Chroot):
        backend.build()
        backend.initdb(state)
    backend.start(state)
    if isinstance(backend, Chroot) and asyncio.run(_set_logical(state)):
        say("restarting PostgreSQL with wal_level = logical (tenant moves replicate logically) ...")
        backend.stop()
        backend.start(state)
    asyncio.run(_prepare_database(state))
    say(f"ready on 127.0.0.1:{state.port} (`engram db url` prints the connection URL)")
    return state


def down(say: Progress = _say) -> None:
    state = LocalState.load()
    if state is None:
        say("no local database was provisioned")
        return
    _backend(state.kind, say).stop()
    say("stopped (data kept)")


def status() -> str:
    if os.environ.get("ENGRAM_DATABASE_URL"):
        return "external (ENGRAM_DATABASE_URL)"
    state = LocalState.load()
    if state is None:
        return "not provisioned"
    running = _backend(state.kind, _say).running()
    return f"{state.kind} on 127.0.0.1:{state.port}: {'running' if running else 'stopped'}"


def with_local_database(settings: Settings) -> Settings:
    """`settings`, pointed at the local database when no URL was configured."""
    if settings.database_url is not None:
        return settings
    state = LocalState.load()
    if state is None:
        raise ProvisionError("ENGRAM_DATABASE_URL is not set and no local database exists: run `engram db up`")
    return settings.model_copy(
        update={"database_url": SecretStr(state.url()), "admin_database_url": SecretStr(state.url(admin=True))}
    )


def on_database(url: str, name: str) -> str:
    """`url` with its database replaced by `name`."""
    return url.rsplit("/", 1)[0] + "/" + name


async def recreate_database(admin_url: str, name: str) -> None:
    """Drop database `name` (and the tenant roles it made) if it exists, then create it empty.

    For throw-away databases of tests and benchmarks.
    """
    await drop_database(admin_url, name)
    server = await asyncpg.connect(on_database(admin_url, "postgres"))
    try:
        await server.execute(f'CREATE DATABASE "{name}"')
    finally:
        await server.close()


async def drop_database(admin_url: str, name: str) -> None:
    """Drop database `name` and the tenant roles it made, if it exists; a database a killed DROP
    left invalid (``datconnlimit = -2``, which only accepts DROP) is dropped without reading its tenants."""
    server = await asyncpg.connect(on_database(admin_url, "postgres"))
    try:
        roles: list[str] = []
        limit = await server.fetchval("SELECT datconnlimit FROM pg_database WHERE datname = $1", name)
        if limit is None:
            return
        if limit != -2:
            old = await asyncpg.connect(on_database(admin_url, name))
            try:
                if await old.fetchval("SELECT to_regclass('engram.tenants') IS NOT NULL"):
                    roles = [r[0] for r in await old.fetch("SELECT schema_name FROM engram.tenants")]
            finally:
                await old.close()
        await server.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        for i in range(0, len(roles), 200):  # a statement per 200: thousands of tenants drop in seconds
            await server.execute("DROP ROLE IF EXISTS " + ", ".join(f'"{r}"' for r in roles[i : i + 200]))
    finally:
        await server.close()
