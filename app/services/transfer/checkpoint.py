"""Where an import of one file stands: a row of the tenant's `imports` table, moved forward by each
batch in that batch's own transaction, so that an interrupted import goes on after its last
committed batch."""

from __future__ import annotations

from dataclasses import dataclass

from app.services.transfer.summary import ImportSummary
from app.store import transfer
from app.store.database import Tx

Place = tuple[int, int]  # (pass, the last line of it whose batch committed)


class Moved(Exception):
    """The checkpoint is not where this import left it: another import of the file is running."""


@dataclass(slots=True)
class Checkpoint:
    digest: bytes
    fmt: str
    on_existing: str
    actor: str

    async def resume(self, tx: Tx, summary: ImportSummary) -> tuple[ImportSummary, Place] | None:
        """The summary and place of an unfinished import of this file; None: it begins anew."""
        cp = await transfer.checkpoint(tx, self.digest, self.fmt, self.on_existing, lock=True)
        if cp is None or cp.finished_at is not None:
            await self.save(tx, summary, (1, 0), restart=True)
            return None
        resumed = ImportSummary.model_validate(
            {**cp.counts, "refused": cp.refused, "format": summary.format, "dry_run": False}
        )
        resumed.lines = summary.lines
        resumed.resumed_at_line = cp.line if cp.pass_ == 1 else summary.lines + cp.line
        resumed.complete, resumed.stopped = False, None
        return resumed, (cp.pass_, cp.line)

    async def hold(self, tx: Tx, at: Place) -> None:
        """Lock the row for a batch, making sure it is where this import left it, `at` (else `Moved`)."""
        cp = await transfer.checkpoint(tx, self.digest, self.fmt, self.on_existing, lock=True)
        if cp is None or (cp.pass_, cp.line) != at or cp.finished_at is not None:
            raise Moved

    async def save(
        self, tx: Tx, summary: ImportSummary, place: Place, *, finished: bool = False, restart: bool = False
    ) -> None:
        """Record the place (and the summary so far) in `tx`."""
        await transfer.save_checkpoint(
            tx,
            self.digest,
            self.fmt,
            self.on_existing,
            pass_=place[0],
            line=place[1],
            counts=summary.model_dump(exclude={"refused", "format", "dry_run"}),
            refused=[r.model_dump() for r in summary.refused],
            actor=self.actor,
            finished=finished,
            restart=restart,
        )
