"""The tenant's audit log, as its administrators read it (the rows are written by audit_rows.py)."""

from __future__ import annotations

from app.auth.principal import Principal
from app.services import models
from app.services.base import Service
from app.services.shapes import audit_entry
from app.store import audit


class Audit(Service):
    async def page(
        self, who: Principal, tool: str | None, limit: int, cursor: str | None, subject: str | None = None
    ) -> models.AuditPage:
        """The tenant's audit log, newest first; only one tool's calls, or one subject's, if given."""
        async with self.tx(who, readonly=True) as tx:
            listing = f"audit:{tool or ''}" + (f":{subject}" if subject else "")
            before = self.cursors.decode(cursor, tx.tenant.id, listing) if cursor else None
            rows = await audit.page(tx, limit + 1, before, tool, subject)
            more = len(rows) > limit
            next_cursor = self.cursors.encode(tx.tenant.id, listing, rows[limit - 1].id) if more else None
        return models.AuditPage(entries=[audit_entry(r) for r in rows[:limit]], next_cursor=next_cursor)
