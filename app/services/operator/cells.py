"""The cells as the operator reaches them: the owner's URL of each (main, the control database,
first), the one loop over them, and the directory of cells (`engram cell`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, TypeVar

from app.config import MAIN_CELL
from app.errors import EngramError
from app.store import cells
from app.store.cell import each_cell
from app.store.connect import OwnerConnection, owner

if TYPE_CHECKING:
    from app.config import Settings

T = TypeVar("T")

# What a loop over the cells does with a cell it has no owner URL for: told to this, and passed over.
Skipped = Callable[[str], None]


class Owners:
    """The owner's URL of every cell this configuration names, `main` first; None where it has none
    (its tenants are out of this operator's reach)."""

    def __init__(self, urls: Mapping[str, str | None]) -> None:
        self.urls = dict(urls)

    @classmethod
    def from_settings(cls, settings: Settings) -> Owners:
        return cls({name: urls.admin() if urls else None for name, urls in settings.every_cell().items()})

    def url(self, cell: str) -> str:
        """Cell `cell`'s owner URL; `unavailable` where this configuration has none."""
        if (url := self.urls.get(cell)) is None:
            raise EngramError("unavailable", f"cell {cell!r} has no ENGRAM_CELL_{cell.upper()}_URL or _ADMIN_URL here")
        return url

    def on(self, cell: str) -> AbstractAsyncContextManager[OwnerConnection]:
        """An owner connection to `cell`'s database, closed after the block."""
        return owner(self.url(cell))

    def control(self) -> AbstractAsyncContextManager[OwnerConnection]:
        """An owner connection to the control database (the cell `main`: the directory of cells and tenants)."""
        return self.on(MAIN_CELL)

    async def each(self, work: Callable[[str, str], Awaitable[T]], *, skipped: Skipped | None) -> list[tuple[str, T]]:
        """`work(name, owner_url)` on every cell in turn, `main` first, each result with its cell's name
        (through the store's walk over the cells, which raises a failing cell's error and stops).
        A cell with no owner URL here: with `skipped`, told to it by name in its turn and passed
        over; without, `unavailable`."""
        done: list[tuple[str, T]] = []

        async def one(name: str, url: str | None) -> None:
            if url is None and skipped is not None:
                skipped(name)
                return
            done.append((name, await work(name, self.url(name))))

        await each_cell(self.urls, one, on_error="raise")
        return done

    async def on_each(
        self, work: Callable[[OwnerConnection], Awaitable[T]], *, skipped: Skipped | None
    ) -> list[tuple[str, T]]:
        """`work(conn)` on an owner connection to every cell's database, by `each`'s rule."""

        async def on(name: str, url: str) -> T:
            async with owner(url) as conn:
                return await work(conn)

        return await self.each(on, skipped=skipped)


class CellDirectory:
    """Which cells tenants are placed on, their state and capacity (in the control database)."""

    def __init__(self, owners: Owners) -> None:
        self.owners = owners

    @staticmethod
    def named(name: str) -> str:
        """`name` if it names a cell an operator may register or change (not `main`), else `invalid`."""
        cells.check_name(name)
        if name == MAIN_CELL:
            raise EngramError("invalid", "`main` is the control database: it is always registered")
        return name

    async def listing(self) -> list[cells.Cell]:
        async with self.owners.control() as conn:
            return await cells.listing(conn)

    async def add(self, name: str, capacity: int | None) -> bool:
        """Register cell `name`, open; False if it was registered already (then nothing changes)."""
        async with self.owners.control() as conn:
            return await cells.add(conn, name, capacity)

    async def change(self, name: str, state: str | None, capacity: int | None, *, clear_capacity: bool) -> None:
        async with self.owners.control() as conn:
            await cells.set_state(conn, name, state, capacity, clear_capacity=clear_capacity)
