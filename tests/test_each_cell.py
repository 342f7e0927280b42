"""The one walk over every cell (app/store/cell.py `each_cell`): its three rules for a cell that
fails, in order or all at once. Over plain values, as the operator's commands walk owner URLs."""

from __future__ import annotations

import asyncio
import logging

import pytest

from app.store.cell import each_cell

CELLS = {"main": 1, "b": 2, "c": 3}


async def _work(name: str, value: int) -> int:
    if name == "b":
        raise OSError("b is down")
    await asyncio.sleep(0)
    return value * 10


async def test_raise_stops_at_the_first_failure() -> None:
    done: list[str] = []

    async def work(name: str, value: int) -> int:
        done.append(name)
        return await _work(name, value)

    with pytest.raises(OSError, match="b is down"):
        await each_cell(CELLS, work, on_error="raise")
    assert done == ["main", "b"]  # c never ran
    assert await each_cell({"main": 1, "c": 3}, _work, on_error="raise") == {"main": 10, "c": 30}


async def test_skip_logs_the_failing_cell_and_answers_the_others(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="engram.cells"):
        assert await each_cell(CELLS, _work, on_error="skip") == {"main": 10, "c": 30}
    assert "cell b skipped by _work: b is down" in caplog.text


async def test_report_answers_each_cells_error_in_its_place() -> None:
    answers = await each_cell(CELLS, _work, on_error="report")
    assert list(answers) == ["main", "b", "c"]  # the mapping's order, main first
    assert answers["main"] == 10 and answers["c"] == 30
    assert isinstance(answers["b"], OSError)


async def test_together_runs_the_cells_at_once_and_cancels_the_rest_on_raise() -> None:
    started = asyncio.Event()
    running: set[str] = set()
    cancelled: list[str] = []

    async def work(name: str, value: int) -> int:
        running.add(name)
        if len(running) == len(CELLS):
            started.set()
        await started.wait()  # only returns once every cell's work has begun: they run at once
        if name == "b":
            raise OSError("b is down")
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(name)
            raise
        return value

    with pytest.raises(OSError):
        await asyncio.wait_for(each_cell(CELLS, work, on_error="raise", together=True), 10)
    assert sorted(cancelled) == ["c", "main"]
    answers = await asyncio.wait_for(each_cell(CELLS, _work, on_error="report", together=True), 10)
    assert answers["main"] == 10 and isinstance(answers["b"], OSError)
