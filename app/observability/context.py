"""Per-request and per-call context carried in contextvars: request id, and the tool call in progress."""

from __future__ import annotations

import re
import uuid
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


CALL: ContextVar[Call | None] = ContextVar("engram_call", default=None)
