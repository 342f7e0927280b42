"""Tenants as the operator administers them (`engram tenant`, `hooks`, `apikey`): each in the
directory of the control database, its contents, limits and hook settings on its cell's database."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import TypeVar

from app.config import MAIN_CELL
from app.services.operator.cells import Owners
from app.store import tenants
from app.store.connect import OwnerConnection
from app.store.database import Tenant, adopt

T = TypeVar("T")


class Tenants:
    def __init__(self, owners: Owners) -> None:
        self.owners = owners

    async def _on_its_cell(self, key: str, work: Callable[[OwnerConnection, OwnerConnection], Awaitable[T]]) -> T:
        """`work(control, cell)` on owner connections to the control database and tenant `key`'s
        cell (the same connection for `main`); `not_found` for a tenant the directory lacks."""
        async with self.owners.control() as control:
            cell = await tenants.cell_of(control, key)
            if cell == MAIN_CELL:
                return await work(control, control)
            async with self.owners.on(cell) as conn:
                return await work(control, conn)

    async def create(self, key: str) -> Tenant:
        """Tenant `key`, unless it exists: placed on a cell in the directory, then made on that cell."""
        async with self.owners.control() as control:
            made = await tenants.create(control, key)
            if made.cell != MAIN_CELL:
                async with self.owners.on(made.cell) as conn:
                    await adopt(conn, made)
            return made

    async def listing(self) -> list[tenants.TenantRecord]:
        async with self.owners.control() as control:
            return await tenants.list_all(control)

    async def show(self, key: str) -> tenants.TenantView:
        return await self._on_its_cell(key, lambda control, cell: tenants.show(control, key, cell))

    async def delete(self, key: str) -> None:
        """The tenant and everything it has, on its cell, then its directory row and keys."""
        await self._on_its_cell(key, lambda control, cell: tenants.delete(control, key, cell))

    async def set_limits(self, key: str, values: Mapping[str, float | int | None]) -> None:
        await self._on_its_cell(key, lambda _, cell: tenants.set_limits(cell, key, values))

    async def hooks(self, key: str) -> dict[str, object]:
        """The tenant's own hook settings (the unset ones left out)."""
        return await self._on_its_cell(key, lambda _, cell: tenants.hook_view(cell, key))

    async def set_hooks(self, key: str, values: Mapping[str, object]) -> None:
        await self._on_its_cell(key, lambda _, cell: tenants.set_hooks(cell, key, values))

    async def add_key(
        self, key: str, key_id: str, digest: bytes, scopes: Sequence[str], name: str, expires: datetime | None
    ) -> None:
        """An API key for tenant `key` (placed in the directory if it is new), in the control database."""
        async with self.owners.control() as control:
            await tenants.add_key(control, key, key_id, digest, scopes, name, expires)

    async def keys(self, key: str | None) -> list[tenants.TenantKeyRow]:
        async with self.owners.control() as control:
            return await tenants.list_keys(control, key)

    async def revoke_key(self, key_id: str) -> bool:
        async with self.owners.control() as control:
            return await tenants.revoke_key(control, key_id)
