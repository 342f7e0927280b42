"""What the operator reads over every cell (`engram audit`, `engram usage`): a tenant's audit rows
and usage counts are written on its cell, so each report merges what every cell holds."""

from __future__ import annotations

from datetime import datetime

from app.services.operator.cells import Owners, Skipped
from app.store import audit, oauth
from app.store.audit import AdminAuditRow, UsageRow


class Reports:
    """Reports over every cell; a cell this configuration cannot reach is told to `skipped` and passed over."""

    def __init__(self, owners: Owners, skipped: Skipped) -> None:
        self.owners = owners
        self.skipped = skipped

    async def audit(self, tenant: str | None, limit: int, since: datetime | None) -> list[AdminAuditRow]:
        """The newest `limit` audit rows (of one tenant or all) over every cell."""
        pages = await self.owners.on_each(lambda c: audit.admin_page(c, tenant, limit, since), skipped=self.skipped)
        return audit.newest(limit, (row for _, page in pages for row in page))

    async def usage(self, tenant: str | None, days: int) -> list[UsageRow]:
        """Calls per tenant, tool and day over the last `days` days, over every cell."""
        found = await self.owners.on_each(lambda c: audit.usage(c, tenant, days), skipped=self.skipped)
        return audit.in_order(r for _, rows in found for r in rows)

    async def cleanup(self, days: int) -> list[tuple[str, int]]:
        """Audit rows older than `days` removed on every cell: how many on each."""
        return await self.owners.on_each(lambda c: audit.cleanup(c, days), skipped=self.skipped)

    async def auth_events(self, limit: int, since: datetime | None) -> list[oauth.AuthEvent]:
        """The authorization server's events, newest first (in the control database)."""
        async with self.owners.control() as control:
            return await oauth.events(control, limit, since)
