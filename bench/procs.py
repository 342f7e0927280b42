"""Servers the benchmarks start, and the CPU they use while measured."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2

from bench.env import ROOT

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _client_ports(pid: int) -> set[int]:
    """The local TCP ports of `pid`'s sockets (its connections to the database among them)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            rows = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def database_backends(database: str, client_pid: int | None = None) -> list[int]:
    """The PostgreSQL backends connected to `database`, found by their process title
    (``postgres: user database host(port) state``): other databases' work on the same server is
    not counted. With `client_pid`, only the backends of that process's own connections (matched by
    their client port), so other clients of the same database are not counted either."""
    ports = _client_ports(client_pid) if client_pid is not None else None
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                title = (entry / "cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
            except OSError:
                continue
            words = title.split()
            if len(words) >= 4 and words[0] == "postgres:" and words[2] == database:
                port = words[3].rsplit("(", 1)[-1].rstrip(")")
                if ports is None or (port.isdigit() and int(port) in ports):
                    pids.append(int(entry.name))
    return pids


def _machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine, every core, every user."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return (sum(values) - idle) / _TICK, sum(values) / _TICK


def _cpu_or_none(pid: int) -> float | None:
    try:
        return cpu_seconds(pid)
    except (OSError, IndexError, ValueError):
        return None


@dataclass
class CpuWindow:
    """CPU used during a measured window: the server process, the database backends serving its
    own connections, this process (the clients), and the whole machine.

    `seconds` holds CPU seconds (for the cost per call), `cores` the same divided by the wall time.
    A backend that starts during the window counts from zero; one that exits counts up to its
    last reading (none are lost to a negative delta).
    """

    server_pid: int | None
    database: str | None = None

    def _backends(self) -> dict[int, float]:
        found = {}
        for pid in database_backends(self.database, self.server_pid) if self.database else []:
            if (cpu := _cpu_or_none(pid)) is not None:
                found[pid] = cpu
        return found

    def __enter__(self) -> CpuWindow:
        self._t = time.monotonic()
        self._db = self._backends()
        self._server = cpu_seconds(self.server_pid) if self.server_pid else 0.0
        self._me = time.process_time()
        self._busy = _machine_busy()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.monotonic() - self._t
        busy, total = _machine_busy()
        server = cpu_seconds(self.server_pid) - self._server if self.server_pid else None
        now = self._backends()
        database = sum(now.get(pid, before) - before for pid, before in self._db.items())
        database += sum(cpu for pid, cpu in now.items() if pid not in self._db)
        self.wall = wall
        self.seconds = {"server": server, "database": database, "clients": time.process_time() - self._me}
        self.cores = {
            "server": round(server / wall, 2) if server is not None else None,
            "database": round(database / wall, 2),
            "clients": round(self.seconds["clients"] / wall, 2),
            "machine": round((busy - self._busy[0]) / (total - self._busy[1]) * (os.cpu_count() or 1), 2),
        }


# A bound on waiting for a server to start (the embedding model loads first), not a measurement.
START_SECONDS = 120


@contextmanager
def serve(cmd: list[str], port: int, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """Run a server until the block ends; ready once /healthz or /mcp answers at all."""
    process = subprocess.Popen(cmd, cwd=ROOT, env=env)
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{' '.join(cmd[-3:])} exited with {process.returncode}")
            try:
                httpx2.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except httpx2.TransportError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{' '.join(cmd[-3:])} did not answer within {START_SECONDS} s") from None
                time.sleep(0.1)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def python(*args: str) -> list[str]:
    return [sys.executable, *args]
