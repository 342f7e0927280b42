"""The directory of cells in the control database: which cells there are, their state and
capacity, and how many tenants each holds (`engram cell`, `/readyz`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from app.config import CELL_NAME
from app.errors import EngramError
from app.store.database import timed

STATES = ("open", "draining", "full")
MAX_CAPACITY = 10_000_000


@dataclass(frozen=True, slots=True)
class Cell:
    """A cell as the directory has it."""

    name: str
    state: str
    capacity: int | None
    tenants: int
    created_at: datetime


def check_name(name: str) -> str:
    """`name` if it is a cell's name (1-31 lowercase letters and digits, a letter first), else `invalid`."""
    if not isinstance(name, str) or not re.fullmatch(CELL_NAME, name):
        raise EngramError("invalid", "a cell is named by 1-31 lowercase letters and digits, starting with a letter")
    return name


def _check_capacity(capacity: int | None) -> None:
    if capacity is not None and not 0 <= capacity <= MAX_CAPACITY:
        raise EngramError("invalid", f"a cell's capacity is 0-{MAX_CAPACITY:,} tenants")


@timed
async def names(conn: asyncpg.Connection) -> list[str]:
    """Every cell's name (the run-time role may read them)."""
    return [r[0] for r in await conn.fetch("SELECT name FROM engram.cells ORDER BY name")]


@timed
async def listing(conn: asyncpg.Connection) -> list[Cell]:
    """Every cell with its tenants (as the owner: the run-time role sees no tenant rows)."""
    rows = await conn.fetch("SELECT name, state, capacity, tenants, created_at FROM engram.cell_load ORDER BY name")
    return [Cell(*r) for r in rows]


@timed
async def add(conn: asyncpg.Connection, name: str, capacity: int | None) -> bool:
    """Register cell `name` (open); False if it was registered already (then nothing changes)."""
    check_name(name)
    _check_capacity(capacity)
    done = await conn.execute(
        "INSERT INTO engram.cells (name, capacity) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING", name, capacity
    )
    return done.endswith(" 1")


@timed
async def set_state(
    conn: asyncpg.Connection, name: str, state: str | None, capacity: int | None, *, clear_capacity: bool = False
) -> None:
    """Change a registered cell's state and/or capacity (`clear_capacity`: no bound)."""
    check_name(name)
    if state is not None and state not in STATES:
        raise EngramError("invalid", f"a cell's state is one of {', '.join(STATES)}")
    _check_capacity(capacity)
    done = await conn.execute(
        "UPDATE engram.cells SET state = coalesce($2, state),"
        " capacity = CASE WHEN $4 THEN NULL ELSE coalesce($3, capacity) END WHERE name = $1",
        name,
        state,
        capacity,
        clear_capacity,
    )
    if not done.endswith(" 1"):
        raise EngramError("not_found", f"no cell {name!r} is registered (`engram cell add {name}`)")
