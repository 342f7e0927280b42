"""A tenant's call rate holds across replicas: two server processes share its token bucket in the
database, so together they admit its burst once, not once each."""

from __future__ import annotations

import math
import subprocess
import sys
import time
import uuid

import asyncpg

from app.config import Settings
from app.services.fairness import SharedBuckets
from tests.support.client import error_code, ok
from tests.support.server import ROOT, open_database, serve

BURST = 6
RATE = 0.01  # one more call per 100 s: the burst is what the two replicas share


async def test_two_replicas_admit_one_burst_between_them(db_settings: Settings):
    tenant = f"shared-rate-{uuid.uuid4().hex[:10]}"
    env = {"ENGRAM_EMBEDDING_PROVIDER": "none", "ENGRAM_TENANT_QUEUE_SECONDS": "0"}
    with serve(db_settings, **env) as a, serve(db_settings, **env) as b:
        for args in (["create", tenant], ["set-limits", tenant, "--rate", str(RATE), "--burst", str(BURST)]):
            subprocess.run([sys.executable, "-m", "app.cli", "tenant", *args], env=a.env, cwd=ROOT, check=True)
        started = time.monotonic()
        admitted = refused = 0
        async with a.client(tenant) as on_a, b.client(tenant) as on_b:
            for i in range(4 * BURST):  # alternating: each replica alone would admit a whole burst
                result = await (on_a if i % 2 else on_b).call_tool("find_entities", {})
                if result.is_error:
                    assert error_code(result) == "limit"
                    refused += 1
                else:
                    ok(result)
                    admitted += 1
        refill = math.ceil(RATE * (time.monotonic() - started))  # 0 or 1 unless the run took minutes
        assert BURST <= admitted <= BURST + refill
        assert refused == 4 * BURST - admitted


async def test_a_replica_does_not_lease_away_what_another_needs_now(db_settings: Settings):
    """A lease of a whole burst (rate x lease over it) would leave the next replica's first call
    refused though the tenant is far under its rate: a lease is at most a quarter of the burst."""
    tenant_id = str(uuid.uuid4())
    async with (
        open_database(db_settings.runtime_dsn()) as one,
        open_database(db_settings.runtime_dsn()) as two,
    ):
        replicas = [SharedBuckets(db, lease_seconds=1) for db in (one, two)]  # rate x 1 s = 100: over the burst
        waits = [await replicas[i % 2].take(tenant_id, 100, 10) for i in range(8)]  # 8 calls, burst 10
    assert waits == [0.0] * 8


async def test_replicas_never_take_more_than_the_bucket_holds(db_settings: Settings):
    """Many takers of one tenant's bucket at once, each leasing several calls' worth: the tokens they
    get in total are the burst, not more."""
    tenant_id = str(uuid.uuid4())
    async with (
        open_database(db_settings.runtime_dsn()) as one,
        open_database(db_settings.runtime_dsn()) as two,
        open_database(db_settings.runtime_dsn()) as three,
    ):
        replicas = [SharedBuckets(db, lease_seconds=60) for db in (one, two, three)]  # rate x 60 s = 3 calls a lease
        started = time.monotonic()
        waits = [await replicas[i % 3].take(tenant_id, 0.05, 20) for i in range(60)]
        refill = math.ceil(0.05 * (time.monotonic() - started))
    admitted = sum(1 for w in waits if w == 0)
    assert 20 <= admitted <= 20 + refill  # the burst, every lease used up, and what refilled meanwhile
    assert all(w > 0 for w in waits[-10:])
    conn = await asyncpg.connect(db_settings.admin_dsn())
    try:
        left = await conn.fetchval("SELECT tokens FROM engram.rate_buckets WHERE tenant_id = $1", uuid.UUID(tenant_id))
    finally:
        await conn.close()
    assert left < 1
