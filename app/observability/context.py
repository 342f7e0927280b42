"""Per-request and per-call context carried in contextvars: request id, the tool call in progress,
and the deadline its database work must meet."""

from __future__ import annotations

import asyncio
import math
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

REQUEST_ID: ContextVar[str] = ContextVar("engram_request_id", default="-")
_VALID_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def accept_request_id(header: str | None) -> str:
    """The client's X-Request-ID when it is sane, else a new one."""
    if header and _VALID_REQUEST_ID.match(header):
        return header
    return uuid.uuid4().hex


@dataclass(slots=True)
class Call:
    """The tool call this task is running, for audit rows and logs."""

    tool: str
    subject: str
    client_id: str
    started: float
    tenant: str = ""
    outcome: str | None = None  # set by the tool wrapper once the call ran
    committing: bool = False  # its transaction sent COMMIT and awaits the answer


CALL: ContextVar[Call | None] = ContextVar("engram_call", default=None)


@contextmanager
def calling(tool: str, subject: str, client_id: str, tenant: str = "") -> Iterator[Call]:
    """Run the block as the call `tool` (its audit rows, logs and metrics say so): a tool call, a
    console action, an import."""
    call = Call(tool, subject, client_id, time.perf_counter(), tenant)
    token = CALL.set(call)
    try:
        yield call
    finally:
        CALL.reset(token)


# The event-loop time by which the database work of this call must end (math.inf: unbounded).
DEADLINE: ContextVar[float | None] = ContextVar("engram_deadline", default=None)


@contextmanager
def deadline(seconds: float) -> Iterator[float]:
    """Bound the database work in this context to `seconds` from now, never past an enclosing
    deadline; `math.inf` lifts the bound (long maintenance jobs). Yields the loop time it ends."""
    at = asyncio.get_running_loop().time() + seconds if seconds != math.inf else math.inf
    outer = DEADLINE.get()
    token = DEADLINE.set(at if outer is None or seconds == math.inf else min(at, outer))
    try:
        yield DEADLINE.get() or at
    finally:
        DEADLINE.reset(token)
