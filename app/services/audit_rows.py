"""What every audit row says, wherever the services write one.

A row names who changed the memory, from which client, with which tool, how long the call took and
in which request; every writer (a write's transaction, a key change, an export, a purge) takes
them from `fields`, so a row means the same wherever it was written. Below `Service` (base.py
writes the rows of every write), so the audit log's pages are another module (audit.py).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from app.auth.principal import Principal
from app.observability.context import CALL, REQUEST_ID
from app.store import audit
from app.store.database import Tx


@dataclass(frozen=True, slots=True)
class AuditFields:
    """An audit row's fields but what it affected."""

    subject: str
    client_id: str
    tool: str
    duration_ms: float
    request_id: str


def fields(who: Principal, action: str = "", *, named: bool = False) -> AuditFields:
    """The row's fields for `who`'s change: the running call's tool and how long it has run. Outside
    a call, or for a row `named` by its `action` (an export, written as it starts), `action` and no
    duration."""
    call = CALL.get()
    if call is None or named:
        return AuditFields(who.subject, who.client_id, action, 0.0, REQUEST_ID.get())
    took = round((time.perf_counter() - call.started) * 1000, 3)
    return AuditFields(who.subject, who.client_id, call.tool, took, REQUEST_ID.get())


async def write(tx: Tx, row: AuditFields, affected: Sequence[str]) -> None:
    """One row for a successful change, in the change's own transaction."""
    await audit.write(
        tx,
        subject=row.subject,
        client_id=row.client_id,
        tool=row.tool,
        affected=affected,
        duration_ms=row.duration_ms,
        request_id=row.request_id,
    )
