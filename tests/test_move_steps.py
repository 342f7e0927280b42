"""A move's steps as data, without a database: their order is the `Step` type's, an abort undoes
what a move may have begun (the last first), and the waits give up when told. The steps' work on
real clusters is tests/test_moves.py."""

from __future__ import annotations

from typing import get_args

import pytest

from app.errors import EngramError
from app.services.moves import STEP_NAMES, STEPS, Timing, done, undoing
from app.store.moves import State, Step

BEFORE_THE_SWITCH = STEP_NAMES[: STEP_NAMES.index("switch")]


def test_the_table_holds_every_step_once_in_the_types_order() -> None:
    assert get_args(Step) == STEP_NAMES
    assert len(set(STEP_NAMES)) == len(STEPS) == 11
    assert all(callable(s.do) for s in STEPS)


def test_done_counts_the_steps_a_recorded_state_has_done() -> None:
    assert [done(name) for name in STEP_NAMES] == list(range(1, len(STEPS) + 1))
    assert done("planned") == done("aborting") == 0


@pytest.mark.parametrize(
    ("state", "undone"),
    [
        ("planned", ["prepare"]),  # prepare may have begun
        ("prepare", ["publish", "prepare"]),  # publish may have begun
        ("publish", ["subscribe", "publish", "prepare"]),
        ("copy", ["fence_writes", "subscribe", "publish", "prepare"]),  # killed inside the fence
        ("compare", ["fence_writes", "subscribe", "publish", "prepare"]),
        ("aborting", ["fence_writes", "subscribe", "publish", "prepare"]),  # an abort run again: all
    ],
)
def test_an_abort_undoes_the_steps_begun_last_first(state: State, undone: list[Step]) -> None:
    assert [name for name, _ in undoing(state)] == undone
    undos = {s.name: s.undo for s in STEPS}
    assert [undo for _, undo in undoing(state)] == [undos[name] for name in undone]


def test_every_undo_of_a_done_step_runs_in_reverse_order() -> None:
    for state in BEFORE_THE_SWITCH:
        order = [STEP_NAMES.index(name) for name, _ in undoing(state)]
        assert order == sorted(order, reverse=True)
        began = STEP_NAMES[: done(state) + 1]
        assert {name for name, _ in undoing(state)} == {s.name for s in STEPS if s.name in began and s.undo}


def test_from_the_switch_on_a_move_is_finished_never_undone() -> None:
    assert [s.name for s in STEPS if s.undo is None and s.name not in BEFORE_THE_SWITCH] == list(
        STEP_NAMES[len(BEFORE_THE_SWITCH) :]
    )
    assert {s.name for s in STEPS if s.undo} == {"prepare", "publish", "subscribe", "fence_writes"}


async def test_a_wait_ends_when_its_check_holds_and_gives_up_after_its_time() -> None:
    calls = 0

    async def third_time() -> bool:
        nonlocal calls
        calls += 1
        return calls == 3

    timing = Timing(poll_seconds=0.001)
    await timing.wait(third_time, 5.0, "the copy")
    assert calls == 3

    async def never() -> bool:
        return False

    with pytest.raises(EngramError) as refused:
        await timing.wait(never, 0.02, "the copy")
    assert refused.value.code == "unavailable"
    assert "the copy did not finish within 0.02 s; run the move again" in str(refused.value)
