"""The answer of `audit_log` (app/mcp/tools/admin.py): a call a line, under who made it."""

from __future__ import annotations

from collections.abc import Sequence

from app.answers.text import block, lines, moment, more
from app.services.audit import AuditEntry, AuditPage


def audit_chunks(entries: Sequence[AuditEntry]) -> list[str]:
    """A call a line, newest first; who made it (subject and client) as a heading where that changes."""
    out = []
    caller: tuple[str, str] | None = None
    for e in entries:
        chunk = ""
        if (e.subject, e.client_id) != caller:
            caller = (e.subject, e.client_id)
            chunk = f"{block(e.subject)} via {block(e.client_id)}:\n"
        outcome = f" {block(e.outcome)}" if e.outcome != "ok" else ""
        affected = f", {len(e.affected)} changed" if e.affected else ""
        out.append(chunk + f"- {moment(e.at)} {block(e.tool)}{outcome}{affected}\n")
    return out


def audit(page: AuditPage) -> str:
    if not page.entries:
        return "No calls recorded."
    return lines(audit_chunks(page.entries), more(page.next_cursor))
