"""What walking tenants costs now that each tenant's audit log, usage and pending marker live in its
schema: the filler's "which tenants have pending work", `engram audit` and `engram usage` over every
tenant, each beside its floor in the same run (one statement on one shared table, the shape these
reads had before). Reads only; run on an owner URL of a database with many tenants:

    python -m bench.tenant_walks postgresql://postgres:…@127.0.0.1:55432/<database> [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from app.store import audit


async def _timed(rounds: int, fn: Callable[[], Awaitable[Any]]) -> float:
    """The median of `rounds` runs, in milliseconds (one warm-up run first)."""
    await fn()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        await fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


async def main(dsn: str, rounds: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        tenants = await conn.fetchval("SELECT count(*) FROM engram.tenants")

        async def pending_walk() -> None:
            after: tuple[Any, Any] = (None, None)
            while rows := await conn.fetch("SELECT * FROM engram.search_tenants(true, $1, $2, 500)", *after):
                after = (rows[-1]["created_at"], rows[-1]["tenant_id"])
                if len(rows) < 500:
                    break

        cases = {
            "pending tenants (each tenant's marker, pages of 500)": pending_walk,
            "  floor: the same question to one shared table": lambda: conn.fetch(
                "SELECT * FROM engram.search_tenants(true)"
            ),
            "engram audit --limit 50 (every tenant)": lambda: audit.admin_page(conn, None, 50, None),
            "engram usage --days 7 (every tenant)": lambda: audit.usage(conn, None, 7),
            "  floor: one statement on one shared table": lambda: conn.fetch(
                "SELECT a.*, t.key FROM engram.audit a JOIN engram.tenants t ON t.id = a.tenant_id"
                " ORDER BY a.id DESC LIMIT 50"
            ),
        }
        print(f"{tenants} tenants, median of {rounds} rounds")
        for name, fn in cases.items():
            print(f"{name:<58} {await _timed(rounds, fn):9.1f} ms")
    finally:
        await conn.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dsn")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.dsn, args.rounds))
