"""Moving a tenant to another cell while it is served: its schema copied and streamed by logical
replication, a short write fence, the directory switched (docs/scaling.md, "Moving a tenant").

The steps are data (`STEPS`): each its name, its work and what undoes it, all on one
`MoveContext`. Every step is recorded in the control database once done and may be run again, so
a move stopped anywhere (a crash, a killed command, a step that failed) is continued by starting
it again; an abort runs the undos of the steps it may have begun, in reverse.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from app.config import CellUrls
from app.errors import EngramError
from app.store import cells as cell_store
from app.store import moves, tenants
from app.store.connect import OwnerConnection, owner
from app.store.database import Tenant
from app.store.moves import Move, State, Step


class Interrupted(Exception):
    """Raised after step `stop_after` (a stand-in for a crash there, for tests and rehearsals)."""


@dataclass(frozen=True)
class Timing:
    """How long a move waits for each thing, and how often it looks."""

    copy_seconds: float = 3600.0  # the initial copy and the catch-up before the fence
    fence_seconds: float = 30.0  # writers inside waited out, and the target caught up after the fence
    poll_seconds: float = 0.05
    grace_seconds: float = 600.0  # the fenced source kept this long before `cleanup` drops it

    async def wait(self, check: Callable[[], Awaitable[bool]], seconds: float, what: str) -> None:
        """Wait for `check()` to be true, looking every `poll_seconds`, for at most `seconds`."""
        ends = time.monotonic() + seconds
        while not await check():
            if time.monotonic() > ends:
                raise EngramError("unavailable", f"{what} did not finish within {seconds:g} s; run the move again")
            await asyncio.sleep(self.poll_seconds)


@dataclass(frozen=True)
class MoveContext:
    """What a step (or its undo) works on: owner connections to the control database and to both
    cells, the tenant (as it lives on the source), its progress row, and the waits."""

    control: OwnerConnection
    source: OwnerConnection
    target: OwnerConnection
    tenant: Tenant
    move: Move
    replication: str  # the source's address, as the target subscribes to it
    timing: Timing


Work = Callable[[MoveContext], Awaitable[None]]


class MoveStep(NamedTuple):
    """One step: its name (recorded once done), its work, and the work that undoes it for an
    abort; `undo` is None when there is nothing of its own to undo (what it made lives in what an
    earlier step's undo drops), and from `switch` on, when a move is finished, never aborted."""

    name: Step
    do: Work
    undo: Work | None


async def _prepare(m: MoveContext) -> None:
    """The target's empty schema and role, by the same tenant steps."""
    await moves.prepare_target(m.target, m.tenant, m.move.target)


async def _drop_copy(m: MoveContext) -> None:
    """The target's copy dropped: its graph, tables, role and cell row."""
    await moves.drop_source(m.target, m.tenant, m.move.target)


async def _publish(m: MoveContext) -> None:
    """A publication of the tenant's schema on the source."""
    await moves.publish(m.source, m.tenant)


async def _unpublish(m: MoveContext) -> None:
    """On the source: the publication (and its slot, if left) and the mark table dropped."""
    await moves.unpublish(m.source, m.tenant)
    await moves.drop_mark(m.source, m.tenant)


async def _subscribe(m: MoveContext) -> None:
    """The target subscribes: the copy starts."""
    await moves.subscribe(m.target, m.tenant, m.replication)


async def _unsubscribe(m: MoveContext) -> None:
    """On the target: the subscription dropped, and with it the source's slot."""
    await moves.unsubscribe(m.target, m.tenant)


async def _copy(m: MoveContext) -> None:
    """Every table copied, and the stream caught up with the source."""
    t = m.timing
    await t.wait(lambda: moves.copied(m.target, m.tenant), t.copy_seconds, "the initial copy")
    position = await moves.mark(m.source, m.tenant)
    await t.wait(lambda: moves.reached(m.target, m.tenant, position), t.copy_seconds, "the catch-up")


async def _fence_writes(m: MoveContext) -> None:
    """The source refuses the tenant's writes; writers inside are waited out."""
    await moves.fence(m.source, m.tenant, "writes", m.timing.fence_seconds)


async def _reopen(m: MoveContext) -> None:
    """On the source: the fence lifted, the tenant role's privileges as the tenant steps grant them."""
    await moves.reopen(m.source, m.tenant)


async def _catch_up(m: MoveContext) -> None:
    """The target has applied everything the source had at the fence."""
    t = m.timing
    position = await moves.mark(m.source, m.tenant)
    await t.wait(lambda: moves.reached(m.target, m.tenant, position), t.fence_seconds, "the last writes")


async def _compare(m: MoveContext) -> None:
    """Every table's count and digest equal on both sides."""
    # both sides at once: the fence lasts as long as the slower one
    mine, theirs = await asyncio.gather(moves.digest(m.source, m.tenant), moves.digest(m.target, m.tenant))
    if mine != theirs:
        differ = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
        raise EngramError("conflict", f"the copy differs from the source in {', '.join(differ[:5])}")


async def _sequences(m: MoveContext) -> None:
    """The target's sequences where the source's are."""
    await moves.set_sequences(m.target, m.tenant, await moves.sequences(m.source, m.tenant))


async def _switch(m: MoveContext) -> None:
    """The directory names the target."""
    await moves.unfence(m.target, m.tenant)
    await moves.switch(m.control, m.move.id, m.tenant.id, m.move.source, m.move.target)


async def _fence_reads(m: MoveContext) -> None:
    """The source refuses reads too: a server still pointing there resolves again."""
    await moves.fence(m.source, m.tenant, "all", m.timing.fence_seconds)


async def _drop_replication(m: MoveContext) -> None:
    """Subscription, slot and publication dropped."""
    await moves.unsubscribe(m.target, m.tenant)
    await moves.unpublish(m.source, m.tenant)


# The steps in order; a progress row names the last one done.
STEPS: tuple[MoveStep, ...] = (
    MoveStep("prepare", _prepare, _drop_copy),
    MoveStep("publish", _publish, _unpublish),
    MoveStep("subscribe", _subscribe, _unsubscribe),
    MoveStep("copy", _copy, None),
    MoveStep("fence_writes", _fence_writes, _reopen),
    MoveStep("catch_up", _catch_up, None),
    MoveStep("compare", _compare, None),
    MoveStep("sequences", _sequences, None),
    MoveStep("switch", _switch, None),
    MoveStep("fence_reads", _fence_reads, None),
    MoveStep("unsubscribe", _drop_replication, None),
)
STEP_NAMES: tuple[Step, ...] = tuple(s.name for s in STEPS)


def done(state: State) -> int:
    """How many steps a move in `state` has done (none while `planned` or `aborting`)."""
    return STEP_NAMES.index(state) + 1 if state in STEP_NAMES else 0


def undoing(state: State) -> list[tuple[Step, Work]]:
    """What an abort of a move in `state` runs, in order: the undos of the steps recorded done and
    of the next (a crash or a failure may have left it part-done), the last first; once an abort
    has begun (`aborting`), of every step. Each undo looks whether its work is there first."""
    begun = STEPS if state == "aborting" else STEPS[: done(state) + 1]
    return [(s.name, s.undo) for s in reversed(begun) if s.undo is not None]


@dataclass(frozen=True)
class Plan:
    """What a move would do."""

    key: str
    source: str
    target: str
    done: tuple[Step, ...]
    todo: tuple[Step, ...]


class Mover:
    """Moves tenants between the cells in `cells` (every cell by name, `main` included: how this
    configuration reaches it, as `Settings.every_cell()` says) of the control database at `control`
    (both as owners)."""

    def __init__(
        self,
        control: str,
        cells: Mapping[str, CellUrls | None],
        *,
        timing: Timing | None = None,
        progress: Callable[[str], None] = lambda _: None,
        steps: Callable[[str, int, int], None] = lambda *_: None,
        stop_after: Step | None = None,
    ) -> None:
        """`progress` hears a line as each step ends; `steps` is told (the move, steps done, steps
        in all) as the move goes, for a bar."""
        self.control = control
        self.cells = dict(cells)
        self.timing = timing or Timing()
        self.progress = progress
        self.steps = steps
        self.stop_after = stop_after

    def _reach(self, cell: str) -> tuple[str, str]:
        """Cell `cell`'s owner URL, and the address other cells replicate from."""
        urls = self.cells.get(cell)
        admin = urls.admin() if urls else None
        if urls is None or admin is None:
            raise EngramError("invalid", f"cell {cell!r} has no owner URL here (ENGRAM_CELL_{cell.upper()}_ADMIN_URL)")
        return admin, urls.replication() or admin

    async def _resolve(self, control: OwnerConnection, key: str, target: str | None) -> tuple[Tenant, Move | None]:
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
            if move.step == "aborting":
                raise EngramError("conflict", f"the move of {key!r} is being undone: run `--abort` again to end it")
            if done(move.step) == len(STEPS) and move.target != target:
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
        self._reach(tenant.cell)
        self._reach(target)
        return tenant, None

    async def plan(self, key: str, target: str) -> Plan:
        """What `move` would do now; nothing is changed."""
        async with owner(self.control) as control:
            tenant, move = await self._resolve(control, key, target)
        n = done(move.step) if move else 0
        return Plan(key, move.source if move else tenant.cell, target, STEP_NAMES[:n], STEP_NAMES[n:])

    async def status(self) -> list[Move]:
        async with owner(self.control) as control:
            return await moves.listing(control)

    async def move(self, key: str, target: str) -> Move:
        """Move tenant `key` to cell `target`, or continue its move there; then drop the sources
        of earlier moves whose grace period has passed. Answers the move as it ends (switched)."""
        async with owner(self.control) as control:
            tenant, move = await self._resolve(control, key, target)
            await moves.claim(control, tenant.id)  # held by this connection until the move returns
            tenant, move = await self._resolve(control, key, target)  # as the last runner left it
            if move is None:
                move = await moves.start(control, tenant.id, tenant.cell, target)
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

    async def _claimed(self, control: OwnerConnection, key: str, doing: str) -> tuple[Tenant, Move]:
        """Tenant `key` and its unfinished move, claimed by this connection; `not_found` if none."""
        tenant, _ = await self._resolve(control, key, None)
        await moves.claim(control, tenant.id)
        tenant, move = await self._resolve(control, key, None)
        if move is None:
            raise EngramError("not_found", f"tenant {key!r} has no move to {doing}")
        return tenant, move

    async def finish(self, key: str) -> None:
        """Drop the source of tenant `key`'s switched move now, not waiting out the grace period."""
        async with owner(self.control) as control:
            _, move = await self._claimed(control, key, "finish")
            if done(move.step) < len(STEPS):
                raise EngramError("conflict", f"the move of {key!r} is at step {move.step}: run it to its end first")
            await self._cleanup(control, move)

    async def abort(self, key: str) -> Move:
        """Undo tenant `key`'s move that has not switched: the undos of the steps it may have begun,
        in reverse (replication dropped, the source's fence lifted, the target's copy dropped); the
        tenant stays where it is, served as before. Each undo may be run again, so an abort stopped
        part-way is ended by running it again."""
        async with owner(self.control) as control:
            tenant, move = await self._claimed(control, key, "abort")
            if move.switched_at is not None or tenant.cell != move.source:
                raise EngramError(
                    "conflict",
                    f"tenant {key!r} is served from cell {move.target!r} already: `--finish` the move, then move"
                    " the tenant back",
                )
            (source_url, replication), (target_url, _) = self._reach(move.source), self._reach(move.target)
            await moves.record(control, move.id, "aborting")
            async with owner(source_url) as source, owner(target_url) as target:
                m = MoveContext(control, source, target, tenant, move, replication, self.timing)
                for _, undo in undoing(move.step):
                    await undo(m)
            await moves.finish(control, move.id, "aborted")
            self.progress(f"tenant {key}: the move to cell {move.target} is undone; it stays on cell {move.source}")
            return await moves.get(control, move.id)

    async def cleanup(self) -> int:
        """Drop the sources of switched moves whose grace period has passed; how many."""
        async with owner(self.control) as control:
            due = await moves.due(control, self.timing.grace_seconds)
            for move in due:
                await self._cleanup(control, move)
        return len(due)

    async def _cleanup(self, control: OwnerConnection, move: Move) -> None:
        tenant = Tenant(move.tenant_id, move.key, move.schema, move.source)
        async with owner(self._reach(move.source)[0]) as source:
            await moves.drop_source(source, tenant, move.source)
        await moves.finish(control, move.id, "finished")
        self.progress(f"tenant {move.key}: its old copy on cell {move.source} dropped; move finished")

    async def _run(self, control: OwnerConnection, tenant: Tenant, move: Move) -> None:
        """The steps not done yet, each recorded once done."""
        (source_url, replication), (target_url, _) = self._reach(move.source), self._reach(move.target)
        async with owner(source_url) as source, owner(target_url) as target:
            m = MoveContext(control, source, target, tenant, move, replication, self.timing)
            self.steps(f"moving {tenant.key}", done(move.step), len(STEPS))
            for number in range(done(move.step), len(STEPS)):
                await self._step(m, number)
                self.steps(f"moving {tenant.key}", number + 1, len(STEPS))

    async def _step(self, m: MoveContext, number: int) -> None:
        step, started = STEPS[number], time.monotonic()
        try:
            await step.do(m)
        except Exception as exc:
            before: State = STEPS[number - 1].name if number else "planned"
            await moves.record(m.control, m.move.id, before, f"{step.name}: {exc}")
            if isinstance(exc, EngramError):
                raise
            raise EngramError("unavailable", f"the move stopped at step {step.name}: {exc}") from exc
        await moves.record(m.control, m.move.id, step.name)
        self.progress(f"  {step.name} done in {time.monotonic() - started:.2f} s")
        if step.name == self.stop_after:
            raise Interrupted(step.name)
