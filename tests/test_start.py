"""Starting: the CLI's small commands load neither the MCP SDK nor the embedding runtime, and
`engram --version` says which release runs. (How fast `engram serve` gets ready is measured by
bench/start.py, not asserted here.)"""

from __future__ import annotations

import subprocess
import sys

from app.version import VERSION

# Prints which heavy packages a CLI invocation imported, after it ran (its exit included).
_PROBE = """
import atexit, sys
from app.cli import main
atexit.register(lambda: print("loaded:", *sorted(m for m in ("mcp", "onnxruntime", "numpy", "starlette", "asyncpg")
                                             if m in sys.modules)))
main(sys.argv[1:])
"""


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, timeout=60)


def test_help_and_version_load_nothing_heavy() -> None:
    for args in (["--help"], ["--version"], ["serve", "--help"], ["tenant", "--help"]):
        result = _run(*args)
        assert result.returncode == 0, result.stderr
        assert result.stdout.rstrip().endswith("loaded:"), f"engram {' '.join(args)} imported: {result.stdout}"
    assert _run("--version").stdout.splitlines()[0] == f"engram {VERSION}"


def test_token_command_stays_light(tmp_path) -> None:
    """Minting a development token needs the signing key, not the server."""
    import os

    env = {**os.environ, "ENGRAM_CACHE_DIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, "token", "--tenant", "demo"], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    token, loaded = result.stdout.splitlines()
    assert token.count(".") == 2 and "mcp" not in loaded
