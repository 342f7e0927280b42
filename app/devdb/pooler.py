"""A local PgBouncer in transaction mode in front of the development database, for the tests that
run Engram through the pooler every multi-replica deployment puts in front of PostgreSQL.

PgBouncer 1.21 or later is needed (`max_prepared_statements`, which asyncpg's named statements
need in transaction mode). Debian trixie ships 1.24: on the local database's trixie root it is
installed there and run as `postgres`; elsewhere a `pgbouncer` of that age on the PATH is used.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from app.devdb.provision import Chroot, LocalState, ProvisionError, _port_open, _run

MIN_VERSION = (1, 21)


def _version(text: str) -> tuple[int, int]:
    match = re.search(r"PgBouncer (\d+)\.(\d+)", text)
    return (int(match[1]), int(match[2])) if match else (0, 0)


def _quoted(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


@dataclass
class PgBouncer:
    """One PgBouncer process: `start()` it, connect to `url(user, password, database)`, `stop()` it.

    `pool_size` server connections per (database, user): small on purpose in tests, so that many
    clients' transactions interleave on few server connections.
    """

    port: int
    upstream_port: int
    users: Mapping[str, str]  # name -> password (PgBouncer answers SCRAM for them and logs in with it)
    pool_size: int = 2
    max_prepared_statements: int = 200
    server_lifetime: int = 3600
    _dir: Path | None = field(default=None, init=False)
    _chroot: Chroot | None = field(default=None, init=False)

    def url(self, user: str, database: str) -> str:
        password = quote(self.users[user], safe="")
        return f"postgresql://{user}:{password}@127.0.0.1:{self.port}/{database}"

    def _config(self, directory: str) -> str:
        return (
            "[databases]\n"
            f"* = host=127.0.0.1 port={self.upstream_port}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = scram-sha-256\n"
            f"auth_file = {directory}/users.txt\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {self.pool_size}\n"
            "min_pool_size = 0\n"
            "max_client_conn = 500\n"
            f"max_prepared_statements = {self.max_prepared_statements}\n"
            f"server_lifetime = {self.server_lifetime}\n"
            "server_reset_query =\n"
            f"logfile = {directory}/pgbouncer.log\n"
            f"pidfile = {directory}/pgbouncer.pid\n"
        )

    def _binary(self) -> list[str]:
        """The command that runs PgBouncer: inside the local trixie root, else from the PATH."""
        state = LocalState.load()
        if state is not None and state.kind == "chroot" and Chroot.possible():
            chroot = Chroot()
            if not (chroot.root / "usr/sbin/pgbouncer").exists():
                chroot.install("pgbouncer")
            self._chroot = chroot
            return chroot.in_root("/usr/sbin/pgbouncer", user="postgres")
        found = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not Path(found).exists():
            raise ProvisionError("no pgbouncer: install Debian's `pgbouncer` (1.21 or later)")
        return [found]

    def start(self) -> None:
        command = self._binary()
        version = _version(subprocess.run([*command, "--version"], capture_output=True, text=True).stdout)
        if version < MIN_VERSION:
            raise ProvisionError(f"pgbouncer {version} is too old: max_prepared_statements needs 1.21 or later")
        base = self._chroot.root / "tmp" if self._chroot else Path(tempfile.gettempdir())
        self._dir = Path(tempfile.mkdtemp(prefix=f"engram-pgbouncer-{self.port}-", dir=base))
        inside = "/tmp/" + self._dir.name if self._chroot else str(self._dir)  # noqa: S108 (inside the root)
        (self._dir / "pgbouncer.ini").write_text(self._config(inside))
        users = self._dir / "users.txt"
        users.write_text("".join(f"{_quoted(u)} {_quoted(p)}\n" for u, p in self.users.items()))
        users.chmod(0o600)
        if self._chroot is not None:
            _run(["chroot", str(self._chroot.root), "chown", "-R", "postgres:postgres", inside])
        _run([*command, "-d", f"{inside}/pgbouncer.ini"])
        deadline = time.monotonic() + 30
        while not _port_open(self.port):
            if time.monotonic() > deadline:
                raise ProvisionError(f"pgbouncer did not listen on {self.port}: {self.log()[-2000:]}")
            time.sleep(0.1)

    def log(self) -> str:
        path = self._dir / "pgbouncer.log" if self._dir else None
        return path.read_text(errors="replace") if path and path.exists() else ""

    def stop(self) -> None:
        if self._dir is None:
            return
        pidfile = self._dir / "pgbouncer.pid"
        if pidfile.exists():
            pid = int(pidfile.read_text().strip())
            os.kill(pid, signal.SIGINT)  # the process this object started, by its id
            deadline = time.monotonic() + 10
            while pidfile.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        shutil.rmtree(self._dir, ignore_errors=True)
        self._dir = None
