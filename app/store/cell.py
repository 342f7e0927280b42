"""A cell as this server reaches it (`Cell`: its pool, its standby), and work done on every cell
with one rule, chosen by the caller, for a cell that fails (`each_cell`).

`each_cell` is a plain function over a mapping of cell names to whatever reaches each cell (the
server's `Database.cells`, the owner URLs of `Settings.every_cell()`, open owner connections), so
the server and the operator's commands walk the cells the same way.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar, overload

from app.store.pool import Pool
from app.store.standby import Standby

logger = logging.getLogger("engram.cells")

T = TypeVar("T")
R = TypeVar("R")

OnError = Literal["raise", "skip", "report"]


@dataclass(frozen=True, slots=True)
class Cell:
    """A cell as this server reaches it: its primary's pool, and its standby if it has one."""

    name: str
    pool: Pool
    standby: Standby | None = None


@overload
async def each_cell(
    cells: Mapping[str, T],
    work: Callable[[str, T], Awaitable[R]],
    *,
    on_error: Literal["raise", "skip"],
    together: bool = False,
) -> dict[str, R]: ...


@overload
async def each_cell(
    cells: Mapping[str, T],
    work: Callable[[str, T], Awaitable[R]],
    *,
    on_error: Literal["report"],
    together: bool = False,
) -> dict[str, R | Exception]: ...


async def each_cell(
    cells: Mapping[str, T],
    work: Callable[[str, T], Awaitable[R]],
    *,
    on_error: OnError,
    together: bool = False,
) -> dict[str, R] | dict[str, R | Exception]:
    """`work(name, cell)` for each cell, in the mapping's order (`main` first), one after another
    or, `together`, all at once; what each answered, by name.

    A cell whose work fails (any `Exception`; cancellation always goes through):
    - `raise`: stops the walk; its error is raised (with `together`, the others are cancelled);
    - `skip`: is logged and left out of the answer; the other cells go on;
    - `report`: answers its error in its place; the other cells go on.
    """
    names = list(cells)

    async def one(name: str) -> R | Exception:
        try:
            return await work(name, cells[name])
        except Exception as exc:
            if on_error == "raise":
                raise
            if on_error == "skip":
                logger.warning("cell %s skipped by %s: %s", name, getattr(work, "__name__", "work"), str(exc)[:200])
            return exc

    if together:
        tasks = [asyncio.ensure_future(one(name)) for name in names]
        try:
            answers = await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
    else:
        answers = [await one(name) for name in names]
    found = dict(zip(names, answers, strict=True))
    if on_error == "skip":
        return {name: answer for name, answer in found.items() if not isinstance(answer, Exception)}
    return found
