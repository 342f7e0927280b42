"""The operator's work, which no tenant's token reaches: tenants placed and made on their cells,
reports merged over every cell, the directory of cells, the server's keys and clients. The CLI
calls it; each method opens the owner connections it needs (app/store/connect.py `owner`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.services.operator.cells import CellDirectory, Owners, Skipped
from app.services.operator.keys import Keys
from app.services.operator.reports import Reports
from app.services.operator.tenants import Tenants

if TYPE_CHECKING:
    from app.config import Settings


@dataclass(frozen=True, slots=True)
class Operator:
    owners: Owners
    tenants: Tenants
    cells: CellDirectory
    reports: Reports
    keys: Keys

    @classmethod
    def from_settings(cls, settings: Settings, *, skipped: Skipped) -> Operator:
        """Over every cell `settings` names; a report passes over a cell it has no owner URL for,
        telling `skipped`."""
        owners = Owners.from_settings(settings)
        return cls(owners, Tenants(owners), CellDirectory(owners), Reports(owners, skipped), Keys(owners))
