"""What a store call raises when the database itself fails (unreachable, refused, broken
connection), for callers that carry on without it instead of failing: the background filler,
and the limits read before a call."""

from __future__ import annotations

import asyncpg

DATABASE_ERRORS: tuple[type[BaseException], ...] = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError)

# A transaction that lost a deadlock or a serialization race: running the whole call again is safe.
RETRYABLE: tuple[type[BaseException], ...] = (asyncpg.DeadlockDetectedError, asyncpg.SerializationError)
