"""docs/troubleshooting.md tells the truth: each error a newcomer meets that this machine can make
is made for real (a taken port, an unreachable, missing, unmigrated or password-refused database,
migrating as the run-time role, a token for another endpoint), and what Engram prints is checked
against what the page quotes."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from app.config import Settings
from app.devdb import provision
from tests.support.server import ROOT, TEST_DB, Server, free_port

PAGE = (ROOT / "docs/troubleshooting.md").read_text()


def _quoted(printed: str, **mine: str) -> None:
    """`printed` (its last line) is on the page once this machine's values are put back as the
    page writes them (`mine`: the value here -> the page's)."""
    line = printed.strip().splitlines()[-1]
    for here, page in mine.items():
        line = line.replace(here, page)
    assert line in PAGE, f"not on docs/troubleshooting.md: {line}"


def _engram(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`engram <args>` with no ENGRAM_* setting but `env`'s, on free ports unless `env` names one: a
    server on this machine (`make run`) may hold the default ones, 8000 and the metrics' 9464."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    ports = {"ENGRAM_PORT": str(free_port()), "ENGRAM_METRICS_PORT": str(free_port())}
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args], env={**clean, **ports, **env}, cwd=ROOT, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip


@pytest.fixture(scope="module")
def empty_database(db_settings: Settings) -> Iterator[str]:
    """A database with nothing of Engram in it: its run-time URL."""
    admin = provision.with_local_database(Settings()).admin_dsn()
    runtime = provision.with_local_database(Settings()).runtime_dsn()
    name = f"{TEST_DB}_unmigrated"
    asyncio.run(provision.recreate_database(admin, name))
    yield provision.on_database(runtime, name)
    asyncio.run(provision.drop_database(admin, name))


def test_a_taken_port(db_settings: Settings, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        served = _engram("serve", ENGRAM_DATABASE_URL=db_settings.runtime_dsn(), ENGRAM_PORT=port)
        assert served.returncode == 1
        _quoted(served.stderr, **{port: "8000"})
        # the local database's port, before anything is built or remembered
        made = _engram("db", "up", ENGRAM_CACHE_DIR=str(tmp_path), ENGRAM_LOCAL_DB_PORT=port)
        if "cannot listen there" not in made.stderr:
            pytest.skip("this machine provides no local database (not root on Debian/Ubuntu)")
        _quoted(made.stderr, **{port: "55432", str(tmp_path): "/root/.cache/engram"})
        assert not list(tmp_path.iterdir())


def test_a_database_that_cannot_be_used(db_settings: Settings, empty_database: str, tmp_path: Path) -> None:
    runtime = empty_database
    database = runtime.rsplit("/", 1)[1]
    host = runtime.split("@", 1)[1].rsplit("/", 1)[0]
    unmigrated = _engram("serve", ENGRAM_DATABASE_URL=runtime, ENGRAM_PORT=str(free_port()))
    assert unmigrated.returncode == 1
    _quoted(unmigrated.stderr, **{f"{host}/{database}": "127.0.0.1:55432/engram"})
    as_app = _engram("migrate", ENGRAM_DATABASE_URL=runtime)
    assert as_app.returncode == 1
    _quoted(as_app.stderr, **{database: "engram"})
    saved = _engram("backup", str(tmp_path / "cell.engram"), ENGRAM_DATABASE_URL=db_settings.runtime_dsn())
    assert saved.returncode == 1 and not list(tmp_path.iterdir())
    _quoted(saved.stderr)
    free = str(free_port())
    unreachable = f"postgresql://engram_app:x@127.0.0.1:{free}/engram"
    gone = _engram(
        "serve", ENGRAM_DATABASE_URL=unreachable, ENGRAM_DATABASE_WAIT_SECONDS="0", ENGRAM_PORT=str(free_port())
    )
    _quoted(gone.stderr, **{free: "5432"})
    _quoted(_engram("migrate", ENGRAM_DATABASE_URL=unreachable).stderr, **{free: "5432"})
    wrong = re.sub(r"//([^:]+):[^@]+@", r"//\1:not-the-password@", runtime)
    refused = _engram("serve", ENGRAM_DATABASE_URL=wrong, ENGRAM_PORT=str(free_port()))
    _quoted(refused.stderr, **{f"{host}/{database}": "127.0.0.1:55432/engram"})
    missing = _engram("serve", ENGRAM_DATABASE_URL=runtime.rsplit("/", 1)[0] + "/nope", ENGRAM_PORT=str(free_port()))
    _quoted(missing.stderr, **{host: "127.0.0.1:55432"})


def test_dev_mode_on_another_interface(db_settings: Settings) -> None:
    served = _engram("serve", ENGRAM_DATABASE_URL=db_settings.runtime_dsn(), ENGRAM_HOST="0.0.0.0")  # noqa: S104
    assert served.returncode == 1
    _quoted(served.stderr)


def test_a_token_for_another_endpoint(server: Server) -> None:
    from app.auth.devkeys import mint_token

    # (the suite's own tokens name every endpoint: this one only the native one, as OAuth clients get)
    token = mint_token(server.settings, tenant="trouble", audience=server.settings.endpoint_url("native"))
    answer = httpx2.post(f"{server.base}/mcp/memory", headers={"Authorization": f"Bearer {token}"}, json={}, timeout=10)
    assert answer.status_code == 401
    header = answer.headers["www-authenticate"]
    _quoted(f"www-authenticate: {header}", **{server.base: "http://127.0.0.1:8000"})
    native = httpx2.post(f"{server.base}/mcp", headers={"Authorization": f"Bearer {token}"}, json={}, timeout=10)
    assert native.status_code != 401  # the same token where it was meant for
