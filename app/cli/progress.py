"""Progress of the CLI's long work (import, export, backup, restore, reindex, tenant moves, the
tenant steps of `engram migrate`): one helper, a tqdm bar per stage on standard error.

Drawn only when standard error is a terminal: a script, a pipe, a log file or a CI job gets no bar
and no progress lines, only what the command prints when it is done (docs/operations.md,
"Progress"). The services report progress as `(stage, done, total)`; this turns that into bars.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import IO, Any


class Progress:
    """Call it with `(stage, done, total)` as work goes (`total` None when unknown, as for an
    export's bytes); a new stage closes the last one's bar and opens its own. `say(line)` prints a
    line above the bars, which stays whether or not a terminal shows them."""

    def __init__(self, unit: str = "it", *, stream: IO[str] | None = None, scale: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.shown = _terminal(self.stream)
        self.unit = unit
        self.scale = scale  # 1.2M rather than 1234567, for bytes
        self._stage: str | None = None
        self._bar: Any = None  # a tqdm bar

    def __call__(self, stage: str, done: int, total: int | None = None) -> None:
        if not self.shown:
            return
        if stage != self._stage or self._bar is None:
            self.close()
            from tqdm import tqdm  # only where a bar is drawn: `engram --help` stays quick

            self._stage = stage
            self._bar = tqdm(
                desc=stage, total=total, initial=done, unit=self.unit, unit_scale=self.scale,
                file=self.stream, leave=True, dynamic_ncols=True, mininterval=0.2,
            )  # fmt: skip
            return
        if total is not None and self._bar.total != total:
            self._bar.total = total
        self._bar.update(done - self._bar.n)

    def say(self, line: str, *, stream: IO[str] | None = None) -> None:
        """A line of the command's own output, printed above the bar (if one is drawn)."""
        out = stream if stream is not None else sys.stdout
        if self._bar is not None:
            self._bar.write(line, file=out)
        else:
            print(line, file=out, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        self._bar, self._stage = None, None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False
