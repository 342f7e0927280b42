"""The shapes of the `search` tool's answer."""

from __future__ import annotations

from datetime import datetime
from typing import Literal, Self

from pydantic import BaseModel, Field

from app.services.budget import Clipped, clip
from app.services.models import EntitySummary

Mode = Literal["hybrid", "semantic", "keyword"]


class Scores(BaseModel):
    semantic: float | None = Field(None, description="Cosine similarity of the best-matching text (-1 to 1).")
    keyword: float | None = Field(None, description="Full-text rank of the best-matching text (0-1).")
    name: float | None = Field(None, description="Trigram similarity of the entity's name to the query (0-1).")
    fused: float = Field(description="Reciprocal-rank fusion of the rankings that ran; 1 is first in all of them.")


class Match(BaseModel):
    kind: Literal["observation", "entity", "name"] = Field(
        description="What matched: an observation, the entity's name/type/description, or its name alone."
    )
    text: str = Field(description="The observation, or the entity's description.")
    snippet: str | None = Field(None, description="The text around the query's words, **marked**, when words matched.")
    # An observation's record (absent for the entity's own text and names):
    source: str | None = Field(None, description="Where the observation came from, as its writer said.")
    created_by: str | None = Field(None, description="Who wrote the observation.")
    created_at: datetime | None = Field(None, description="When the observation was written.")
    valid_from: datetime | None = Field(None, description="When it became true; absent: no lower bound.")
    valid_until: datetime | None = Field(None, description="When it stopped (or stops) being true; absent: no end.")


class SearchHit(Clipped):
    entity: EntitySummary
    match: Match
    scores: Scores

    def clip_text(self) -> str:
        return self.match.text

    def clipped(self, text: str) -> Self:
        """Its matched text shortened, and its entity's description to as many bytes (a hit is the two)."""
        entity = self.entity.model_copy(update={"description": clip(self.entity.description, len(text.encode()))})
        match = self.match.model_copy(update={"text": text, "snippet": None})
        return self.model_copy(update={"entity": entity, "match": match})


class SearchResult(BaseModel):
    mode: Mode = Field(description="The mode that ran (hybrid is keyword when no vectors can be made).")
    hits: list[SearchHit]
    next_cursor: str | None = Field(None, description="Pass as `cursor` for the next page; absent on the last.")
    omitted: int = Field(
        0, description="Hits of this page left out to keep within `max_tokens` (the cursor's page starts with them)."
    )
    notices: list[str] = Field(default_factory=list, description="What limited this answer, if anything.")
