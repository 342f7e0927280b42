"""What a store call raises when the database itself fails (unreachable, refused, broken
connection), for callers that carry on without it instead of failing: the background filler,
and the limits read before a call."""

from __future__ import annotations

from typing import Any

import asyncpg

from app.errors import EngramError

# Seconds a client is asked to wait before calling again, by why the database was not there.
RETRY_AFTER = {
    "pool_exhausted": 1.0,
    "database_unreachable": 5.0,
    "deadline": 5.0,
    "tenant_upgrading": 30.0,
    "tenant_moving": 1.0,
    "statement_timeout": 2.0,
}

# Errors that mean the database is not there for this call: down, stalled, restarting, refusing
# connections, or the connection was dropped (by the server, the network, or a missed deadline).
OUTAGES: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    asyncpg.PostgresConnectionError,  # class 08, e.g. ConnectionDoesNotExistError
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.TooManyConnectionsError,
)
# ... but not these, which are about the input or the code, not the database's health.
_NOT_OUTAGES: tuple[type[BaseException], ...] = (
    asyncpg.DataError,
    asyncpg.exceptions.ClientConfigurationError,
    asyncpg.exceptions.UnsupportedClientFeatureError,
    asyncpg.exceptions.OutdatedSchemaCacheError,
)


def is_outage(exc: BaseException) -> bool:
    """Whether `exc` means the database did not answer or the connection to it is gone."""
    return isinstance(exc, OUTAGES) and not isinstance(exc, _NOT_OUTAGES)


class Unavailable(EngramError):
    """The database is down, stalled, or has no free connection: `unavailable`, with `retry_after`.

    `committed` (writes only) says what became of the transaction: False when it was dropped before
    COMMIT was sent, so nothing of it can commit later; "unknown" when COMMIT was sent and its answer
    never came, so it may have committed.
    """

    def __init__(self, reason: str, message: str, *, committed: bool | str | None = None) -> None:
        details: dict[str, Any] = {"reason": reason, "retry_after": RETRY_AFTER.get(reason, 5.0)}
        if committed is not None:
            details["committed"] = committed
        super().__init__("unavailable", message, **details)
        self.reason = reason


class Moving(Unavailable):
    """The tenant's cell fences it: its move to another cell is cutting over. Retryable: the
    tenant is resolved again from the directory, which soon names its new cell."""

    def __init__(self, key: str) -> None:
        super().__init__(
            "tenant_moving", f"tenant {key!r} is moving to another cell; nothing was done, call again", committed=False
        )


DATABASE_ERRORS: tuple[type[BaseException], ...] = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, Unavailable)


class RoleRefused(Unavailable):
    """Entering a tenant's role was refused while the tenant is not fenced: nothing was done. The
    call runs again (the tenant resolved afresh, on another connection); a refusal that lasts ends
    as `unavailable`, never an internal error."""

    def __init__(self, key: str) -> None:
        super().__init__(
            "tenant_role_refused", f"tenant {key!r} could not be entered; nothing was done", committed=False
        )


# A transaction that lost a deadlock or a serialization race, or could not enter its tenant's role:
# running the whole call again is safe.
RETRYABLE: tuple[type[BaseException], ...] = (asyncpg.DeadlockDetectedError, asyncpg.SerializationError, RoleRefused)
