"""What an import did: the summary it answers, and what one batch adds to it once committed."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, Field

from app.services.transfer.format import Format

KEEP_REFUSED = 1000  # refused lines listed in a summary (all are counted)


class RefusedLine(BaseModel):
    line: int
    code: Literal["invalid", "conflict", "dangling", "forbidden"]
    reason: str


class Tally(BaseModel):
    created: int = 0
    merged: int = Field(0, description="Existing ones that took changes from the file.")
    unchanged: int = Field(0, description="Existing ones the file had nothing new for.")
    skipped: int = Field(0, description="Existing ones left alone (on_existing skip), or that could not be merged.")
    refused: int = 0

    def count(self, status: Literal["created", "updated", "unchanged"]) -> None:
        """One more written by the write path with this status (an update is a merge)."""
        if status == "created":
            self.created += 1
        elif status == "updated":
            self.merged += 1
        else:
            self.unchanged += 1

    def add(self, other: Tally) -> None:
        self.created += other.created
        self.merged += other.merged
        self.unchanged += other.unchanged
        self.skipped += other.skipped
        self.refused += other.refused


class HistoryTally(BaseModel):
    added: int = 0
    skipped: int = Field(0, description="Rows held already, or of entities the tenant does not hold.")
    refused: int = 0

    def add(self, other: HistoryTally) -> None:
        self.added += other.added
        self.skipped += other.skipped
        self.refused += other.refused


class ImportSummary(BaseModel):
    format: Format
    dry_run: bool
    lines: int
    resumed_at_line: int | None = Field(None, description="Where an interrupted import of this file went on.")
    entities: Tally = Field(default_factory=Tally)
    observations_added: int = 0
    aliases_added: int = 0
    relations: Tally = Field(default_factory=Tally)
    history: HistoryTally = Field(default_factory=HistoryTally)
    episodes: HistoryTally = Field(default_factory=HistoryTally)
    invalid: int = Field(0, description="Lines that are not a valid record (refused before any database work).")
    records: dict[str, int] = Field(default_factory=dict, description="Records in the file by kind, valid or not.")
    refused: list[RefusedLine] = Field(default_factory=list, description=f"The first {KEEP_REFUSED} refused lines.")
    refused_total: int = 0
    skipped_because: dict[str, int] = Field(default_factory=dict, description="Why existing ones were skipped.")
    warnings: list[str] = Field(default_factory=list)
    stopped: str | None = Field(None, description="Why the import stopped before the end (run it again to go on).")
    complete: bool = False

    def add(self, done: Done) -> None:
        """Count what a committed batch did."""
        self.entities.add(done.entities)
        self.relations.add(done.relations)
        self.history.add(done.history)
        self.episodes.add(done.episodes)
        self.observations_added += done.observations_added
        self.aliases_added += done.aliases_added
        self.invalid += done.invalid
        self.records = dict(Counter(self.records) + done.records)
        self.skipped_because = dict(Counter(self.skipped_because) + done.skipped_because)
        self.refused_total += len(done.refused)
        self.refused += done.refused[: max(0, KEEP_REFUSED - len(self.refused))]

    def plus(self, done: Done) -> ImportSummary:
        """The summary once `done` is counted, leaving this one as it is."""
        after = self.model_copy(deep=True)
        after.add(done)
        return after


@dataclass(slots=True)
class Done:
    """What one batch did (or, while reading, found); counted in the summary once committed."""

    entities: Tally = field(default_factory=Tally)
    relations: Tally = field(default_factory=Tally)
    history: HistoryTally = field(default_factory=HistoryTally)
    episodes: HistoryTally = field(default_factory=HistoryTally)
    observations_added: int = 0
    aliases_added: int = 0
    invalid: int = 0
    records: Counter[str] = field(default_factory=Counter)
    skipped_because: Counter[str] = field(default_factory=Counter)
    refused: list[RefusedLine] = field(default_factory=list)

    def refuse(
        self,
        line: int,
        code: Literal["invalid", "conflict", "dangling", "forbidden"],
        reason: str,
        tally: Tally | HistoryTally | None = None,
    ) -> None:
        """A refused line: an invalid one (no tally), or a record the database work refused."""
        self.refused.append(RefusedLine(line=line, code=code, reason=reason))
        if tally is None:
            self.invalid += 1
        else:
            tally.refused += 1

    def skip(self, tally: Tally | HistoryTally, what: str, because: str) -> None:
        tally.skipped += 1
        self.skipped_because[f"{what} {because}"] += 1

    @property
    def wrote(self) -> int:
        """Rows written, for the import's statistics cadence."""
        return self.entities.created + self.observations_added + self.relations.created
