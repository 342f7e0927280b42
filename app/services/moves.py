"""Moving a tenant to another cell while it is served: its schema copied and streamed by logical
replication, a short write fence, the directory switched (docs/scaling.md, "Moving a tenant").

Every step is recorded in the control database once done and may be run again, so a move stopped
anywhere (a crash, a killed command, a step that failed) is continued by starting it again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from app.errors import EngramError
from app.store import cells as cell_store
from app.store import moves, tenants
from app.store.database import Tenant
from app.store.moves import Move

# The steps in order; a progress row names the last one done.
STEPS = (
    "prepare",  # the target's empty schema and role, by the same tenant steps
    "publish",  # a publication of the tenant's schema on the source
    "subscribe",  # the target subscribes: the copy starts
    "copy",  # every table copied, and the stream caught up with the source
    "fence_writes",  # the source refuses the tenant's writes; writers inside are waited out
    "catch_up",  # the target has applied everything the source had at the fence
    "compare",  # every table's count and digest equal on both sides
    "sequences",  # the target's sequences where the source's are
    "switch",  # the directory names the target
    "fence_reads",  # the source refuses reads too: a server still pointing there resolves again
    "unsubscribe",  # subscription, slot and publication dropped
)
SWITCHED = STEPS[-1]
ABORTING = "aborting"  # `--abort` has begun undoing the move (run it again to end it)


class Interrupted(Exception):
    """Raised after step `stop_after` (a stand-in for a crash there, for tests and rehearsals)."""


@dataclass(frozen=True)
class CellAccess:
    """How a move reaches one cell: its owner, and the address the other cells replicate from."""

    admin: str
    replication: str


@dataclass(frozen=True)
class Timing:
    """How long a move waits for each thing, and how often it looks."""

    copy_seconds: float = 3600.0  # the initial copy and the catch-up before the fence
    fence_seconds: float = 30.0  # writers inside waited out, and the target caught up after the fence
    poll_seconds: float = 0.05
    grace_seconds: float = 600.0  # the fenced source kept this long before `cleanup` drops it


@dataclass(frozen=True)
class Plan:
    """What a move would do."""

    key: str
    source: str
    target: str
    done: tuple[str, ...]
    todo: tuple[str, ...]


class Mover:
    """Moves tenants between the cells in `cells` (by name; `main` included) of the control
    database at `control` (both as owners)."""

    def __init__(
        self,
        control: str,
        cells: Mapping[str, CellAccess],
        *,
        timing: Timing | None = None,
        progress: Callable[[str], None] = lambda _: None,
        stop_after: str | None = None,
    ) -> None:
        self.control = control
        self.cells = dict(cells)
        self.timing = timing or Timing()
        self.progress = progress
        self.stop_after = stop_after

    def _access(self, cell: str) -> CellAccess:
        found = self.cells.get(cell)
        if found is None:
            raise EngramError("invalid", f"cell {cell!r} has no owner URL here (ENGRAM_CELL_{cell.upper()}_ADMIN_URL)")
        return found

    async def _resolve(self, control: moves.Connection, key: str, target: str | None) -> tuple[Tenant, Move | None]:
        record = await tenants.get(control, key)
        tenant = Tenant(record.id, record.key, record.schema_name, record.cell)
        move = await moves.running(control, tenant.id)
        if target is None:
            return tenant, move
        cell_store.check_name(target)
        known = {c.name: c for c in await cell_store.listing(control)}
        if target not in known:
            raise EngramError("not_found", f"no cell {target!r} is registered (`engram cell list`)")
        if move is not None:
            if move.step == ABORTING:
                raise EngramError("conflict", f"the move of {key!r} is being undone: run `--abort` again to end it")
            if move.step == SWITCHED and move.target != target:
                raise EngramError(
                    "conflict", f"tenant {key!r} left cell {move.source!r} lately: `--finish` that move first"
                )
            if move.target != target:
                raise EngramError("conflict", f"tenant {key!r} is being moved to cell {move.target!r} already")
            return tenant, move
        if tenant.cell == target:
            raise EngramError("invalid", f"tenant {key!r} lives on cell {target!r} already")
        if known[target].state != "open":
            raise EngramError("conflict", f"cell {target!r} is {known[target].state}: it takes no tenants")
        self._access(tenant.cell)
        self._access(target)
        return tenant, None

    async def plan(self, key: str, target: str) -> Plan:
        """What `move` would do now; nothing is changed."""
        async with moves.connect(self.control) as control:
            tenant, move = await self._resolve(control, key, target)
        done = STEPS[: STEPS.index(move.step) + 1] if move and move.step in STEPS else ()
        return Plan(key, move.source if move else tenant.cell, target, done, STEPS[len(done) :])

    async def status(self) -> list[Move]:
        async with moves.connect(self.control) as control:
            return await moves.listing(control)

    async def move(self, key: str, target: str) -> Move:
        """Move tenant `key` to cell `target`, or continue its move there; then drop the sources
        of earlier moves whose grace period has passed. Answers the move as it ends (switched)."""
        async with moves.connect(self.control) as control:
            tenant, move = await self._resolve(control, key, target)
            await moves.claim(control, tenant.id)  # held by this connection until the move returns
            tenant, move = await self._resolve(control, key, target)  # as the last runner left it
            if move is None:
                move = await moves.start(control, tenant.id, tenant.cell, target, "planned")
                self.progress(f"moving tenant {key} from cell {move.source} to cell {target}")
            else:
                self.progress(f"continuing the move of tenant {key} to cell {target} after step {move.step}")
            tenant = Tenant(tenant.id, tenant.key, tenant.schema, move.source)
            await self._run(control, tenant, move)
            for old in await moves.due(control, self.timing.grace_seconds):
                await self._cleanup(control, old)
            found = await moves.running(control, tenant.id)
        assert found is not None
        return found

    async def _claimed(self, control: moves.Connection, key: str, doing: str) -> tuple[Tenant, Move]:
        """Tenant `key` and its unfinished move, claimed by this connection; `not_found` if none."""
        tenant, _ = await self._resolve(control, key, None)
        await moves.claim(control, tenant.id)
        tenant, move = await self._resolve(control, key, None)
        if move is None:
            raise EngramError("not_found", f"tenant {key!r} has no move to {doing}")
        return tenant, move

    async def finish(self, key: str) -> None:
        """Drop the source of tenant `key`'s switched move now, not waiting out the grace period."""
        async with moves.connect(self.control) as control:
            _, move = await self._claimed(control, key, "finish")
            if move.step != SWITCHED:
                raise EngramError("conflict", f"the move of {key!r} is at step {move.step}: run it to its end first")
            await self._cleanup(control, move)

    async def abort(self, key: str) -> Move:
        """Undo tenant `key`'s move that has not switched: replication dropped, the target's copy
        dropped, the source's fence lifted; the tenant stays where it is, served as before. Each
        part may be run again, so an abort stopped part-way is ended by running it again."""
        async with moves.connect(self.control) as control:
            tenant, move = await self._claimed(control, key, "abort")
            if move.switched_at is not None or tenant.cell != move.source:
                raise EngramError(
                    "conflict",
                    f"tenant {key!r} is served from cell {move.target!r} already: `--finish` the move, then move"
                    " the tenant back",
                )
            source_access, target_access = self._access(move.source), self._access(move.target)
            await moves.record(control, move.id, ABORTING)
            async with moves.connect(source_access.admin) as source, moves.connect(target_access.admin) as target:
                await moves.unsubscribe(target, tenant)
                await moves.unpublish(source, tenant)
                await moves.reopen(source, tenant)
                await moves.drop_source(target, tenant, move.target)
            await moves.finish(control, move.id, "aborted")
            self.progress(f"tenant {key}: the move to cell {move.target} is undone; it stays on cell {move.source}")
            return await moves.get(control, move.id)

    async def cleanup(self) -> int:
        """Drop the sources of switched moves whose grace period has passed; how many."""
        async with moves.connect(self.control) as control:
            due = await moves.due(control, self.timing.grace_seconds)
            for move in due:
                await self._cleanup(control, move)
        return len(due)

    async def _cleanup(self, control: moves.Connection, move: Move) -> None:
        tenant = Tenant(move.tenant_id, move.key, move.schema, move.source)
        async with moves.connect(self._access(move.source).admin) as source:
            await moves.drop_source(source, tenant, move.source)
        await moves.finish(control, move.id)
        self.progress(f"tenant {move.key}: its old copy on cell {move.source} dropped; move finished")

    async def _run(self, control: moves.Connection, tenant: Tenant, move: Move) -> None:
        done = STEPS.index(move.step) + 1 if move.step in STEPS else 0
        source_access, target_access = self._access(move.source), self._access(move.target)
        async with moves.connect(source_access.admin) as source, moves.connect(target_access.admin) as target:
            for step in STEPS[done:]:
                started = time.monotonic()
                try:
                    await self._step(step, control, source, target, tenant, move, source_access)
                except Exception as exc:
                    before = STEPS[STEPS.index(step) - 1] if step != STEPS[0] else "planned"
                    await moves.record(control, move.id, before, f"{step}: {exc}")
                    if isinstance(exc, EngramError):
                        raise
                    raise EngramError("unavailable", f"the move stopped at step {step}: {exc}") from exc
                await moves.record(control, move.id, step)
                self.progress(f"  {step} done in {time.monotonic() - started:.2f} s")
                if step == self.stop_after:
                    raise Interrupted(step)

    async def _step(
        self,
        step: str,
        control: moves.Connection,
        source: moves.Connection,
        target: moves.Connection,
        tenant: Tenant,
        move: Move,
        source_access: CellAccess,
    ) -> None:
        t = self.timing
        if step == "prepare":
            await moves.prepare_target(target, tenant, move.target)
        elif step == "publish":
            await moves.publish(source, tenant)
        elif step == "subscribe":
            await moves.subscribe(target, tenant, source_access.replication)
        elif step == "copy":
            await self._until(lambda: moves.copied(target, tenant), t.copy_seconds, "the initial copy")
            position = await moves.mark(source, tenant)
            await self._until(lambda: moves.reached(target, tenant, position), t.copy_seconds, "the catch-up")
        elif step == "fence_writes":
            await moves.fence(source, tenant, "writes", t.fence_seconds)
        elif step == "catch_up":
            position = await moves.mark(source, tenant)
            await self._until(lambda: moves.reached(target, tenant, position), t.fence_seconds, "the last writes")
        elif step == "compare":
            # both sides at once: the fence lasts as long as the slower one
            mine, theirs = await asyncio.gather(moves.digest(source, tenant), moves.digest(target, tenant))
            if mine != theirs:
                differ = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
                raise EngramError("conflict", f"the copy differs from the source in {', '.join(differ[:5])}")
        elif step == "sequences":
            await moves.set_sequences(target, tenant, await moves.sequences(source, tenant))
        elif step == "switch":
            await moves.unfence(target, tenant)
            await moves.switch(control, move.id, tenant.id, move.source, move.target)
        elif step == "fence_reads":
            await moves.fence(source, tenant, "all", t.fence_seconds)
        elif step == "unsubscribe":
            await moves.unsubscribe(target, tenant)
            await moves.unpublish(source, tenant)

    async def _until(self, check: Callable[[], object], seconds: float, what: str) -> None:
        """Wait for `check()` to be true, looking every `poll_seconds`, for at most `seconds`."""
        ends = time.monotonic() + seconds
        while not await check():  # type: ignore[misc]
            if time.monotonic() > ends:
                raise EngramError("unavailable", f"{what} did not finish within {seconds:g} s; run the move again")
            await asyncio.sleep(self.timing.poll_seconds)
