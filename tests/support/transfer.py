"""`engram export` and `engram import` as a subprocess against a test server's database, and the
JSON Lines they write read back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from tests.support.server import ROOT, Server


def cli(server: Server, *args: str, check: bool = True, **extra: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=ROOT,
        env={**server.env, "ENGRAM_EMBEDDING_PROVIDER": "none", **extra},
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    if check and done.returncode not in (0, 2):
        raise AssertionError(f"engram {' '.join(args)}: {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


def export(server: Server, tenant: str, path: Path, *flags: str) -> bytes:
    cli(server, "export", "--tenant", tenant, "-o", str(path), *flags)
    return path.read_bytes()


def summary(server: Server, tenant: str, path: Path, *flags: str) -> dict[str, Any]:
    done = cli(server, "import", "--tenant", tenant, str(path), "--json", *flags)
    return json.loads(done.stdout)


def lines_of(data: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in data.splitlines() if line.strip()]


def write_lines(path: Path, rows: list[Any]) -> Path:
    path.write_bytes(b"".join((r if isinstance(r, bytes) else orjson.dumps(r)) + b"\n" for r in rows))
    return path
