"""A throw-away PostgreSQL cluster of a test module's own, to freeze (SIGSTOP) and kill (SIGKILL)
without touching anyone else's database (tests/test_outages.py, tests/test_hook_outages.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from app.config import Settings
from app.devdb import provision
from app.store import migrate
from tests.support.server import free_port


class OwnPostgres:
    """A throw-away PostgreSQL cluster run from the cached Debian root, on its own port."""

    def __init__(self) -> None:
        self.chroot = provision.Chroot()
        self.root = self.chroot.root
        self.host_dir = Path(tempfile.mkdtemp(prefix="engram-outages-", dir=self.root / "tmp"))
        self.dir = "/" + str(self.host_dir.relative_to(self.root))  # the same directory, seen from inside
        self.data = f"{self.dir}/data"
        self.port = free_port()
        self.state = provision.LocalState("chroot", self.port, secrets.token_urlsafe(18), secrets.token_urlsafe(18))

    def _as_postgres(self, *cmd: str) -> list[str]:
        return ["chroot", str(self.root), "runuser", "-u", "postgres", "--", *cmd]

    def create(self) -> None:
        (self.host_dir / "pw").write_text(self.state.admin_password)
        subprocess.run(["chroot", str(self.root), "chown", "-R", "postgres:postgres", self.dir], check=True)
        subprocess.run(
            self._as_postgres(
                f"{provision.PG_BIN}/initdb",
                "-D",
                self.data,
                "-U",
                "postgres",
                "--auth=scram-sha-256",
                f"--pwfile={self.dir}/pw",
                "-E",
                "UTF8",
                "--locale=C.UTF-8",
                "--no-sync",
            ),
            check=True,
            capture_output=True,
        )
        with (self.host_dir / "data" / "postgresql.conf").open("a") as conf:
            conf.write(
                "listen_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.dir}'\n"
                "dynamic_shared_memory_type = mmap\n"
                "shared_preload_libraries = 'age'\n"
                "max_connections = 60\n"
                "shared_buffers = 32MB\n"
                "fsync = off\n"  # a killed process loses nothing the kernel already has; only a crashed machine would
            )

    def start(self) -> None:
        subprocess.run(
            self._as_postgres(
                f"{provision.PG_BIN}/pg_ctl",
                "-D",
                self.data,
                "-l",
                f"{self.dir}/postgres.log",
                "-w",
                "-t",
                "60",
                "-o",
                f"-p {self.port}",
                "start",
            ),
            check=True,
            capture_output=True,
        )

    def stop(self) -> None:
        self.signal(signal.SIGCONT)
        subprocess.run(
            self._as_postgres(f"{provision.PG_BIN}/pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop"),
            capture_output=True,
        )

    def pids(self) -> list[int]:
        """The postmaster and its children: this cluster's processes only."""
        pidfile = self.host_dir / "data" / "postmaster.pid"
        if not pidfile.exists():
            return []
        postmaster = int(pidfile.read_text().split()[0])
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = stat.read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == postmaster:
                    children.append(int(stat.parent.name))
        return [postmaster, *children]

    def signal(self, sig: signal.Signals) -> None:
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def kill(self) -> None:
        pids = self.pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while any(Path(f"/proc/{pid}").exists() for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)

    def remove(self) -> None:
        shutil.rmtree(self.host_dir, ignore_errors=True)


def own_postgres_cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[OwnPostgres, Settings]]:
    """The cluster made, started and migrated; stopped and removed after (a module fixture's body)."""
    if not provision.Chroot.possible() or not (provision.Chroot().root / ".engram-ready").exists():
        pytest.skip("needs the cached Debian root of `engram db up` (Debian/Ubuntu as root)")
    pg = OwnPostgres()
    try:
        pg.create()
        pg.start()
        asyncio.run(provision._prepare_database(pg.state))
        asyncio.run(migrate.migrate(pg.state.url(admin=True), Settings().migrations_dir))
        settings = Settings(
            dev_key_file=tmp_path_factory.mktemp("keys") / "dev-key.json",
            database_url=SecretStr(pg.state.url()),
            admin_database_url=SecretStr(pg.state.url(admin=True)),
        )
        yield pg, settings
    finally:
        pg.stop()
        pg.remove()
