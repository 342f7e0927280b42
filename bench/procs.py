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

from app.provision import Chroot
from bench.env import ROOT

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of one process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _database_pids() -> list[int]:
    """The local PostgreSQL's processes (they run inside its cached root)."""
    root = str(Chroot().root.resolve())
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "root") == root:
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine, every core, every user."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return (sum(values) - idle) / _TICK, sum(values) / _TICK


@dataclass
class CpuWindow:
    """Cores busy during a measured window: the server, the database, this process, the whole machine."""

    server_pid: int | None

    def __enter__(self) -> CpuWindow:
        self._t = time.monotonic()
        self._db_pids = _database_pids()
        self._server = cpu_seconds(self.server_pid) if self.server_pid else 0.0
        self._db = sum(self._safe(p) for p in self._db_pids)
        self._me = time.process_time()
        self._busy = _machine_busy()
        return self

    @staticmethod
    def _safe(pid: int) -> float:
        try:
            return cpu_seconds(pid)
        except OSError:
            return 0.0

    def __exit__(self, *exc: object) -> None:
        wall = time.monotonic() - self._t
        busy, total = _machine_busy()
        self.cores = {
            "server": round((cpu_seconds(self.server_pid) - self._server) / wall, 2) if self.server_pid else None,
            "database": round((sum(self._safe(p) for p in self._db_pids) - self._db) / wall, 2),
            "clients": round((time.process_time() - self._me) / wall, 2),
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
