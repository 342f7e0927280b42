"""Tenant steps one tenant per transaction: a migration adding a step completes over 2,000 tenants
with PostgreSQL's default max_locks_per_transaction (where one transaction for all of them runs out
of lock table in the low thousands), resumes after a crash, records each tenant's step, and the
server refuses, retryably, only the tenants still waiting.

The 2,000 tenants are made once per set of migrations (minutes) and copied for each run (seconds):
docs/scaling.md, "Migrations", says how long each part takes."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from app.config import Settings
from app.devdb import provision
from app.store import migrate
from app.store.database import InvalidTenant, Unavailable
from tests.support.server import ROOT, TEST_DB, open_database

TENANTS = 2_000
CRASH_AFTER = 700
# Making the template (once per set of migrations) takes minutes on a loaded machine.
pytestmark = pytest.mark.timeout(1800)

# A step like a real one: a table with an index and a grant in every tenant's schema.
STEP = """
CREATE FUNCTION engram.tenant_step_0999(s text) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, ag_catalog AS $fn$
BEGIN
    EXECUTE format('CREATE TABLE %1$I.step_probe (id bigint PRIMARY KEY, note text NOT NULL);'
                   ' CREATE INDEX ON %1$I.step_probe (note)', s);
END
$fn$;
REVOKE ALL ON FUNCTION engram.tenant_step_0999(text) FROM PUBLIC;
SELECT engram.add_tenant_step('0999', 'engram.tenant_step_0999');
"""


@pytest.fixture(scope="module")
async def many_tenants(db_settings: Settings) -> AsyncIterator[str]:
    """A copy of a database holding 2,000 tenants; yields its owner URL and drops it after.

    Making 2,000 real tenants takes minutes here; the database that holds them is made once per
    set of migrations and kept as a template (with its tenants' roles), and each run works on a
    copy of it, which takes seconds.
    """
    admin = db_settings.admin_dsn()
    template = await _template(admin, db_settings.migrations_dir)
    name = f"{TEST_DB}_steps"
    server = await asyncpg.connect(provision.on_database(admin, "postgres"))
    try:
        await server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # its roles are the template's
        await server.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}" STRATEGY FILE_COPY')
        yield provision.on_database(admin, name)
    finally:
        await server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await server.close()


async def _template(admin: str, migrations: Path) -> str:
    """The template database with 2,000 tenants for these migrations, made if missing (older ones
    dropped). One per server, whatever the suite's database is called; a lock lets one suite build
    it while another waits."""
    digest = hashlib.sha256("".join(m.checksum for m in migrate.load(migrations)).encode()).hexdigest()[:10]
    prefix = "engram_template_tenants_"
    name = f"{prefix}{TENANTS}_{digest}"
    server = await asyncpg.connect(provision.on_database(admin, "postgres"))
    try:
        await server.execute("SELECT pg_advisory_lock(hashtext($1))", prefix)
        rows = await server.fetch("SELECT datname::text FROM pg_database WHERE starts_with(datname, $1)", prefix)
        found = [r[0] for r in rows]
        if name not in found:
            for old in found:
                await provision.drop_database(admin, old)
            await _build(admin, migrations, name)
    finally:
        await server.close()  # and its lock
    return name


async def _build(admin: str, migrations: Path, name: str) -> None:
    building = provision.on_database(admin, name + "_part")
    await provision.recreate_database(admin, name + "_part")
    await migrate.migrate(building, migrations)
    keys = [f"many-{i:05d}" for i in range(TENANTS)]

    async def make(part: list[str]) -> None:
        conn = await asyncpg.connect(building)
        try:
            for i in range(0, len(part), 10):  # ten tenants per transaction: setup, not what is tested
                batch = part[i : i + 10]
                await conn.execute("SELECT engram.tenant_schema(k, true) FROM unnest($1::text[]) k", batch)
        finally:
            await conn.close()

    await asyncio.gather(make(keys[0::2]), make(keys[1::2]))
    server = await asyncpg.connect(provision.on_database(admin, "postgres"))
    try:
        await server.execute(f'ALTER DATABASE "{name}_part" RENAME TO "{name}"')
    finally:
        await server.close()


def engram(owner: str, migrations: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ENGRAM_DATABASE_URL": owner, "ENGRAM_MIGRATIONS_DIR": str(migrations)}
    command = [sys.executable, "-m", "app.cli", "migrate", *args]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


class Crash(Exception):
    pass


async def test_a_new_tenant_step_reaches_2000_tenants_one_transaction_each(db_settings, many_tenants, tmp_path):
    owner = many_tenants
    conn = await asyncpg.connect(owner)
    try:
        assert await conn.fetchval("SHOW max_locks_per_transaction") == "64"  # PostgreSQL's default
        assert await conn.fetchval("SELECT count(*) FROM engram.tenants") == TENANTS
    finally:
        await conn.close()
    migrations = tmp_path / "migrations"
    shutil.copytree(db_settings.migrations_dir, migrations)
    (migrations / "0999_step_probe.sql").write_text(STEP)

    # --dry-run says what would happen and changes nothing.
    dry = engram(owner, migrations, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would apply: 0999_step_probe.sql (registers a tenant step)" in dry.stdout
    assert f"would bring {TENANTS} tenants up to date" in dry.stdout
    assert [m.name for m in (await migrate.plan(owner, migrations)).pending] == ["0999_step_probe.sql"]

    # A run that dies part way (two tenants at a time) leaves each tenant with or without the step,
    # never half; the other connection's tenant may have committed just before.
    def crash_at(done: int, waiting: int) -> None:
        assert waiting == TENANTS
        if done == CRASH_AFTER:
            raise Crash

    with pytest.raises(Crash):
        await migrate.migrate(owner, migrations, on_tenant=crash_at, jobs=2)
    conn = await asyncpg.connect(owner)
    try:
        done = await conn.fetchval("SELECT count(*) FROM engram.tenants WHERE steps_version = '0999'")
    finally:
        await conn.close()
    assert CRASH_AFTER <= done <= CRASH_AFTER + 1
    status = engram(owner, migrations, "--status")
    assert status.returncode == 0, status.stderr
    assert f"newest tenant step 0999; {TENANTS - done} waiting for steps" in status.stdout
    assert f"last step 0999: {done} tenants" in status.stdout

    # Meanwhile the server serves the tenants that have their steps and says which ones wait.
    await _served_while_upgrading(db_settings, owner)

    # The next run resumes: only the tenants still waiting get the step.
    upgraded: list[int] = []
    assert await migrate.migrate(owner, migrations, on_tenant=lambda n, _: upgraded.append(n), jobs=2) == []
    assert upgraded[-1] == TENANTS - done
    conn = await asyncpg.connect(owner)
    try:
        versions = await conn.fetch("SELECT steps_version, count(*) FROM engram.tenants GROUP BY 1")
        assert [tuple(r) for r in versions] == [("0999", TENANTS)]
        probes = await conn.fetchval(
            "SELECT count(*) FROM pg_class c JOIN engram.tenants t"
            " ON t.schema_name = c.relnamespace::regnamespace::text WHERE c.relname = 'step_probe'"
        )
        assert probes == TENANTS
        # ... granted to each tenant's own role, like every table of its schema.
        assert await conn.fetchval(
            "SELECT bool_and(has_table_privilege(schema_name, schema_name || '.step_probe', 'INSERT'))"
            " FROM engram.tenants"
        )
        # A tenant made now runs every step, the new one included.
        made = await conn.fetchrow("SELECT * FROM engram.tenant_schema('after-0999', true)")
        assert made["steps_current"] is True
        assert await conn.fetchval("SELECT to_regclass($1 || '.step_probe') IS NOT NULL", made["schema_name"])
    finally:
        await conn.close()
    again = engram(owner, migrations)
    assert again.returncode == 0 and again.stdout.strip() == "database schema is up to date", again.stderr


async def _served_while_upgrading(db_settings: Settings, owner: str) -> None:
    runtime = provision.on_database(db_settings.listen_dsn(), owner.rsplit("/", 1)[1])  # direct, even with PgBouncer
    async with open_database(runtime, max_size=2, create_tenants=False) as db:
        conn = await asyncpg.connect(owner)
        try:
            done, waiting = [
                await conn.fetchval(
                    f"SELECT key FROM engram.tenants WHERE steps_version {op} '0999' ORDER BY key LIMIT 1"
                )
                for op in ("=", "<")
            ]
        finally:
            await conn.close()
        tenant = await db.tenant(done)
        async with db.transaction(tenant) as tx:
            assert await tx.fetchval("SELECT count(*) FROM {s}.step_probe") == 0
        with pytest.raises(Unavailable) as refused:
            await db.tenant(waiting)
        assert refused.value.code == "unavailable" and refused.value.reason == "tenant_upgrading"
        assert refused.value.details["retry_after"] == 30.0
        with pytest.raises(InvalidTenant):
            await db.tenant("never-made")
