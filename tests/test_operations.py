"""Migrations, readiness, configuration errors: what an operator relies on."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx2
import pytest

from app.devdb import provision
from app.store import migrate
from tests.support.server import ROOT, free_port, server_env, start_server

# Alone, after the suite's parallel workers (`make test`):
# it stops, kills and starts the local database every suite shares.
pytestmark = pytest.mark.serial


def engram(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=ROOT,
        env=env or dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
async def scratch_db(db_settings) -> AsyncIterator[str]:
    """An empty database on the same server, dropped afterwards; yields its owner URL."""
    admin = db_settings.admin_dsn()
    name = f"scratch_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(admin)
    await conn.execute(f'CREATE DATABASE "{name}"')
    await conn.close()
    yield admin.rsplit("/", 1)[0] + "/" + name
    conn = await asyncpg.connect(admin)
    await conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    await conn.close()


def test_migrate_twice_is_a_no_op(db_settings):
    env = {**os.environ, "ENGRAM_DATABASE_URL": db_settings.admin_dsn()}
    first = engram("migrate", env=env)
    second = engram("migrate", env=env)
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    assert second.stdout.strip() == "database schema is up to date"


async def test_concurrent_migrations_apply_each_file_once(db_settings, scratch_db):
    results = await asyncio.gather(*(migrate.migrate(scratch_db, db_settings.migrations_dir) for _ in range(3)))
    applied = sorted(name for names in results for name in names)
    assert applied == sorted(m.name for m in migrate.load(db_settings.migrations_dir))
    conn = await asyncpg.connect(scratch_db)
    try:
        assert await conn.fetchval("SELECT count(*) FROM engram.schema_migrations") == len(applied)
        role = await conn.fetchrow(
            "SELECT rolsuper, rolbypassrls, rolcreatedb FROM pg_roles WHERE rolname = 'engram_app'"
        )
        assert tuple(role) == (False, False, False)
    finally:
        await conn.close()


async def test_changed_or_unknown_migrations_are_errors(db_settings, scratch_db, tmp_path):
    await migrate.migrate(scratch_db, db_settings.migrations_dir)
    edited = tmp_path / "migrations"
    shutil.copytree(db_settings.migrations_dir, edited)
    first = sorted(edited.glob("*.sql"))[0]
    first.write_text(first.read_text() + "\n-- edited\n")
    with pytest.raises(migrate.MigrationError, match="changed after it was applied"):
        await migrate.migrate(scratch_db, edited)

    conn = await asyncpg.connect(scratch_db)
    await conn.execute("INSERT INTO engram.schema_migrations VALUES ('9999', '9999_future.sql', 'x')")
    await conn.close()
    with pytest.raises(migrate.MigrationError, match="does not know"):
        await migrate.migrate(scratch_db, db_settings.migrations_dir)
    # ... and the server refuses to serve on that schema.
    env = server_env(db_settings, free_port(), ENGRAM_DATABASE_URL=scratch_db)
    refused = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert refused.returncode != 0 and "9999_future.sql" in refused.stdout + refused.stderr


def test_bad_configuration_fails_at_start_naming_the_setting(db_settings):
    cases = {
        "ENGRAM_PORT": ("70000", "ENGRAM_PORT"),
        "ENGRAM_POOL_MAX_SIZE": ("0", "ENGRAM_POOL_MAX_SIZE"),
        "ENGRAM_PUBLIC_URL": ("ftp://x", "ENGRAM_PUBLIC_URL"),
        "ENGRAM_HOST": ("0.0.0.0", "ENGRAM_AUTH_MODE=dev"),  # noqa: S104 - the point of the test
        "ENGRAM_AUTH_MODE": ("magic", "ENGRAM_AUTH_MODE"),
    }
    for variable, (value, named) in cases.items():
        result = engram("serve", env={**server_env(db_settings, free_port()), variable: value})
        assert result.returncode != 0, variable
        assert "configuration error" in result.stderr and named in result.stderr, result.stderr


def test_readyz_reflects_a_stopped_database(db_settings):
    if os.environ.get("ENGRAM_DATABASE_URL"):
        pytest.skip("the database is external: this test stops and starts the local one")
    process = start_server(server_env(db_settings, port := free_port()))
    base = f"http://127.0.0.1:{port}"
    try:
        ready = httpx2.get(f"{base}/readyz", timeout=10).json()
        assert ready["status"] == "ready" and ready["embeddings"].startswith("ok")
        provision.down()
        try:
            stopped = httpx2.get(f"{base}/readyz", timeout=10)
            assert stopped.status_code == 503 and "database unreachable" in stopped.json()["reason"]
            assert httpx2.get(f"{base}/healthz", timeout=10).status_code == 200  # alive, just not ready
        finally:
            provision.up()
        deadline = time.monotonic() + 30
        while httpx2.get(f"{base}/readyz", timeout=10).status_code != 200:
            assert time.monotonic() < deadline, "not ready again after the database came back"
            time.sleep(0.2)
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_db_status_and_url(db_settings):
    if os.environ.get("ENGRAM_DATABASE_URL"):
        pytest.skip("external database")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_DATABASE")}
    assert "running" in engram("db", "status", env=env).stdout
    url = engram("db", "url", env=env).stdout.strip()
    assert url.startswith("postgresql://engram_app:") and url.endswith("/engram")


def test_db_up_starts_a_killed_server_whose_lock_names_a_live_process(db_settings):
    """A machine restored from a snapshot holds the lock file of a server killed mid-work, and its
    process id may belong to another program now; the start waits out the recovery, however long."""
    if os.environ.get("ENGRAM_DATABASE_URL"):
        pytest.skip("the database is external: this test kills and starts the local one")
    backend = provision.Chroot()
    lock = backend.root / provision.PG_DATA.lstrip("/") / "postmaster.pid"
    postmaster = int(lock.read_text().split("\n", 1)[0])
    children = subprocess.run(["pgrep", "-P", str(postmaster)], capture_output=True, text=True).stdout.split()
    other = subprocess.Popen(["sleep", "300"])
    try:
        os.kill(postmaster, 9)
        deadline = time.monotonic() + 30
        while any(Path(f"/proc/{pid}").exists() for pid in [postmaster, *children]):
            assert time.monotonic() < deadline, "the killed server's processes did not exit"
            time.sleep(0.2)
        lines = lock.read_text().split("\n")
        lock.write_text("\n".join([str(other.pid), *lines[1:]]))
        said: list[str] = []
        provision.up(said.append)
    finally:
        other.kill()
        other.wait()
    assert any("not stopped cleanly" in line for line in said), said
    assert "running" in provision.status()
    url = provision.on_database(db_settings.admin_dsn(), "postgres")

    async def ask() -> int:
        conn = await asyncpg.connect(url)
        try:
            return await conn.fetchval("SELECT 1")
        finally:
            await conn.close()

    assert asyncio.run(ask()) == 1
