"""The answers of `recall` and the episode tools (app/mcp/tools/recall.py): one line per fact or episode, best first.

    Melanie:
    - ran a charity race for mental health (2023-05-20, D2:1; also D5:3)
    - is a painter (2023-05-08, D1:12)
    Caroline mentors Melanie (2023-06-01, chat)
    2023-05-08 13:56:
    #412 Melanie: I ran a charity race last Saturday! (D2:1)
    #413 Caroline: … what was it for? (D2:2)

Facts of one entity that follow each other share its name as a heading, each on a line of its own
starting with "- "; episodes that follow each other share when they happened the same way; a
relation stands alone on a line. `#412` is the episode's id, which the episode tools take. A long
episode shows the sentences that hold the question's words, the rest marked `…`
(`detail="full"` has it whole).
"""

from __future__ import annotations

from collections.abc import Sequence

from app.answers.form import Form
from app.answers.text import PINNED, block, lines, moment, more, note, notices
from app.services.recall_models import (
    Episode,
    EpisodePage,
    EpisodesChanged,
    EpisodesWritten,
    Fact,
    Involved,
    RecallResult,
)


def fact_chunks(facts: Sequence[Fact]) -> list[str]:
    """Each fact's lines, in order; a heading where the entity changes."""
    out = []
    heading: str | None = None
    for f in facts:
        chunk = ""
        if f.kind in ("observation", "entity") and f.entity is not None:
            if f.entity.id != heading:
                heading = f.entity.id
                chunk = f"{block(f.entity.name)}:\n"
            chunk += f"- {_fact_line(f)}\n"
        elif f.kind == "episode" and f.at is not None:
            when = moment(f.at)
            if when != heading:
                heading = when
                chunk = f"{when}:\n"
            chunk += f"{_episode_line(f)}\n"
        else:
            heading = None
            chunk = f"{_fact_line(f) if f.kind == 'relation' else _episode_line(f)}\n"
        out.append(chunk)
    return out


def _fact_line(f: Fact) -> str:
    text = (PINNED if f.pinned else "") + block(f.text)
    if f.kind == "relation" and f.relation and f.relation.get("notes"):
        text += f": {block(str(f.relation['notes']))}"
    when = None if f.kind == "entity" else (f.valid_from or f.created_at)
    return text + note(when, f.source, until=f.valid_until, more_sources=(a.source for a in f.also))


def _episode_line(f: Fact) -> str:
    """An episode under the heading of when it happened: `#412 Melanie: I ran a charity race! (D2:1)`."""
    speakers = _speakers(f.entities or [])
    return f"#{f.episode_id} {speakers}{block(f.excerpt or f.text)}" + note(
        None, f.source, until=f.valid_until, more_sources=(a.source for a in f.also)
    )


def _speakers(entities: Sequence[Involved]) -> str:
    names = [e.name for e in entities if e.role == "speaker"]
    return f"{' & '.join(block(n) for n in names)}: " if names else ""


def _recall(r: RecallResult, chunks: list[str]) -> str:
    if not r.facts:
        return lines([], "No facts found.", *notices(r.notices))
    return lines(chunks, *notices(r.notices), more(r.next_cursor, r.omitted, "facts"))


RECALL = Form[RecallResult, Fact](lambda r: r.facts, fact_chunks, _recall)


# --- episodes -----------------------------------------------------------------------------------------


def episode_chunks(episodes: Sequence[Episode]) -> list[str]:
    return [f"{episode_line(e)}\n" for e in episodes]


def episode_line(e: Episode) -> str:
    others = [x.name for x in e.entities if x.role != "speaker"]
    with_ = f" [with {', '.join(block(n) for n in others)}]" if others else ""
    ended = f" [ended: {block(e.ended_why)}]" if e.ended_why else ""
    return (
        f"#{e.id} {moment(e.at)} {_speakers(e.entities)}{block(e.text)}"
        + note(None, e.source, until=e.valid_until)
        + with_
        + ended
    )


def _episodes(page: EpisodePage, chunks: list[str]) -> str:
    if not page.episodes:
        return "No episodes."
    return lines(chunks, more(page.next_cursor, page.omitted, "episodes"))


EPISODES = Form[EpisodePage, Episode](lambda page: page.episodes, episode_chunks, _episodes)


def episodes_written(r: EpisodesWritten) -> str:
    ids = ", ".join(f"#{e.id}" for e in r.episodes)
    pending = f"; {r.embeddings_pending} texts found by meaning once embedded" if r.embeddings_pending else ""
    linked = sorted({x.name for e in r.episodes for x in e.entities})
    with_ = f"; linked to {', '.join(linked[:20])}{' …' if len(linked) > 20 else ''}" if linked else ""
    return f"Kept {len(r.episodes)} episodes: {ids}{with_}{pending}."


def episodes_changed(r: EpisodesChanged, verb: str) -> str:
    done = f"{verb} {', '.join(f'#{i}' for i in r.ids)}." if r.ids else f"{verb} none."
    return done + (f" Unchanged or unknown: {', '.join(f'#{i}' for i in r.unchanged)}." if r.unchanged else "")
