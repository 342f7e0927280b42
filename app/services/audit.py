"""The tenant's audit log, as its administrators read it (the rows are written by audit_rows.py)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

from app.auth.principal import Principal
from app.services.base import Service
from app.store import audit


# One audit row as administrators read it: the store's `AuditRow` in the tools' contract (no
# docstring: it would become the published schema's description).
class AuditEntry(BaseModel):
    id: int
    at: datetime
    subject: str
    client_id: str
    tool: str
    affected: list[str]
    outcome: str
    duration_ms: float
    request_id: str


class AuditPage(BaseModel):
    entries: list[AuditEntry]
    next_cursor: str | None = None


class Audit(Service):
    async def page(
        self, who: Principal, tool: str | None, limit: int, cursor: str | None, subject: str | None = None
    ) -> AuditPage:
        """The tenant's audit log, newest first; only one tool's calls, or one subject's, if given."""
        async with self.tx(who, readonly=True) as tx:
            listing = f"audit:{tool or ''}" + (f":{subject}" if subject else "")
            before = self.cursors.decode(cursor, tx.tenant.id, listing) if cursor else None
            rows = await audit.page(tx, limit + 1, before, tool, subject)
            more = len(rows) > limit
            next_cursor = self.cursors.encode(tx.tenant.id, listing, rows[limit - 1].id) if more else None
        entries = [AuditEntry.model_validate(r, from_attributes=True) for r in rows[:limit]]
        return AuditPage(entries=entries, next_cursor=next_cursor)
