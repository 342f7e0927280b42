"""The shapes of `recall` and of the episode tools."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import BaseModel, Field, StringConstraints, model_validator

from app.services.budget import Clipped
from app.services.models import Clean, Ref, Source, Strict, ValidFrom, ValidUntil, check_interval
from app.services.search_models import Mode

# An episode's text: a message, a note, a captured chat, a document chunk. Words find all of it;
# the embedding model reads its first ~256 word pieces (docs/search.md).
EPISODE_MAX_CHARS = 8000
EpisodeText = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=EPISODE_MAX_CHARS), Clean
]
Role = Literal["speaker", "participant", "mentioned"]
FactKind = Literal["observation", "relation", "episode", "entity"]


class EpisodeIn(Strict):
    text: EpisodeText = Field(description="The raw text.")
    at: datetime | None = Field(None, description="When it happened; default now.")
    source: Source | None = Field(None, description="Default: your client id.")
    speakers: Annotated[list[Ref], Field(max_length=10)] = Field(
        default_factory=list, description="Who said it: entity ids or names."
    )
    participants: Annotated[list[Ref], Field(max_length=50)] = Field(
        default_factory=list, description="Others involved: entity ids or names."
    )
    valid_from: ValidFrom = None
    valid_until: ValidUntil = None
    private: bool = Field(
        False,
        strict=True,  # true or false: a privacy flag is never guessed from "yes" or 1
        description="True: only you will see it (your private memory); default: the whole tenant (shared).",
    )

    @model_validator(mode="after")
    def _interval(self) -> EpisodeIn:
        check_interval(self.valid_from, self.valid_until)
        return self


class EntityRef(BaseModel):
    id: str
    name: str
    type: str


class Involved(EntityRef):
    role: Role = Field(description="speaker, participant, or mentioned (its name or an alias is in the text).")


class Episode(Clipped):
    clip_field: ClassVar[str] = "text"
    id: int
    text: str
    at: datetime = Field(description="When it happened.")
    source: str | None = None
    created_by: str
    created_at: datetime
    valid_from: datetime | None = None
    valid_until: datetime | None = None
    ended_why: str | None = Field(None, description="Why it stopped being true, as its ender said.")
    entities: list[Involved] = Field(default_factory=list, description="The live entities it involves.")
    private: bool = Field(False, description="True: in your private memory, which only you see.")


class EpisodesWritten(BaseModel):
    episodes: list[Episode]
    embeddings_pending: int = Field(
        0, description="Texts found by words now and by meaning once the background filler embeds them."
    )


class EpisodePage(BaseModel):
    episodes: list[Episode]
    next_cursor: str | None = None
    omitted: int = Field(0, description="Episodes of this page left out to keep within `max_tokens`.")


class EpisodesChanged(BaseModel):
    ids: list[int] = Field(description="The episodes this call changed.")
    unchanged: list[int] = Field(default_factory=list, description="Given ids that do not exist or needed no change.")


class RecallScores(BaseModel):
    semantic: float | None = Field(None, description="Cosine similarity of the fact to the query (-1 to 1).")
    keyword: float | None = Field(None, description="Share of the query's word weight the fact holds (0-1).")
    named: bool | None = Field(
        None, description="True: about an entity the query names; false: about one of their neighbours."
    )
    fused: float = Field(description="The fused score that ordered the answer (1 is best possible).")


class FactRecord(BaseModel):
    """A fact folded into a better one: what it said and its record."""

    text: str
    source: str | None = None
    at: datetime | None = None
    created_at: datetime | None = None
    valid_from: datetime | None = None
    valid_until: datetime | None = None


class Fact(Clipped):
    clip_field: ClassVar[str] = "text"
    kind: FactKind = Field(description="observation, relation, episode, or entity (its description).")
    text: str = Field(description="The fact: an observation, a relation as a sentence, an episode, a description.")
    entity: EntityRef | None = Field(None, description="Whose observation or description; a relation's `from`.")
    to: EntityRef | None = Field(None, description="A relation's target.")
    relation: dict[str, Any] | None = Field(None, description="A relation's id, type, notes, strength, properties.")
    episode_id: int | None = None
    at: datetime | None = Field(None, description="When an episode happened.")
    entities: list[Involved] | None = Field(None, description="An episode's entities.")
    private: bool | None = Field(None, description="An episode's: true when in your private memory (only you see it).")
    pinned: bool | None = Field(None, description="True: a pinned fact, which leads answers (pin_facts).")
    source: str | None = None
    created_by: str | None = None
    created_at: datetime | None = Field(None, description="When it was written.")
    valid_from: datetime | None = Field(None, description="When it became true; absent: no lower bound.")
    valid_until: datetime | None = Field(None, description="When it stopped (or stops) being true; absent: no end.")
    also: list[FactRecord] = Field(
        default_factory=list, description="Near-identical facts folded into this one, with their sources and times."
    )
    scores: RecallScores
    # The sentences of a long text that hold the question's words (…-marked where the rest was left
    # out): what the concise answer shows; never part of the record.
    excerpt: str | None = Field(None, exclude=True)

    def clip_text(self) -> str:
        """What a budget shortens: a relation's notes when it has them (its sentence is two names
        and a type), else the text."""
        return str(notes) if (notes := self._notes()) else self.text

    def clipped(self, text: str) -> Self:
        if self._notes() and self.relation is not None:
            return self.model_copy(update={"relation": {**self.relation, "notes": text}})
        return self.model_copy(update={"text": text})

    def _notes(self) -> object:
        return self.relation.get("notes") if self.kind == "relation" and self.relation else None


class RecallResult(BaseModel):
    mode: Mode = Field(description="The mode that ran (hybrid is keyword when no vectors can be made).")
    facts: list[Fact]
    named: list[EntityRef] = Field(
        default_factory=list, description="Entities the query names (their facts rank higher)."
    )
    next_cursor: str | None = Field(None, description="Pass as `cursor` for the next page; absent on the last.")
    omitted: int = Field(
        0, description="Facts of this page left out to keep within `max_tokens` (the cursor's page starts with them)."
    )
    notices: list[str] = Field(default_factory=list, description="What limited this answer, if anything.")
