"""A statement that runs past its time limit (here: waiting for a lock an administrator holds)
ends its call `unavailable` with reason `statement_timeout`, rolled back — never an internal error."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from app.config import Settings
from app.store.errors import Unavailable
from tests.support.server import open_database


def test_a_statement_past_its_time_limit_is_unavailable_and_writes_nothing(db_settings: Settings) -> None:
    async def check() -> None:
        async with open_database(db_settings.runtime_dsn(), statement_timeout_ms=300) as db:
            tenant = await db.tenant("statement-timeout")
            owner = await asyncpg.connect(db_settings.admin_dsn())
            try:
                async with owner.transaction():
                    await owner.execute(f"LOCK TABLE {tenant.schema}.observations IN ACCESS EXCLUSIVE MODE")
                    for readonly in (False, True):
                        with pytest.raises(Unavailable) as refused:
                            async with db.transaction(tenant, readonly=readonly) as tx:
                                await tx.fetchval("SELECT count(*) FROM {s}.observations")
                        details = refused.value.details
                        assert details["reason"] == "statement_timeout"
                        assert details.get("committed") == (None if readonly else False)
                # the lock is gone: the same transaction runs, and the pool's connection is fine
                async with db.transaction(tenant, readonly=True) as tx:
                    assert await tx.fetchval("SELECT count(*) FROM {s}.observations") == 0
            finally:
                await owner.close()

    asyncio.run(check())
