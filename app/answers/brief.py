"""The brief a hook injects into a session (app/hooks/routes.py): its heading, the tenant's pinned
facts at a session's start (docs/pinned-facts.md), the latest episodes one a line, then the facts,
printed as `recall` and `list_episodes` print them (app/answers/recall.py).

    Engram memory: the latest from other sessions.
    #412 2023-05-20 13:56 Melanie: I ran a charity race last Saturday! (D2:1)
    About shop:
    Shop checkout:
    - retries card payments three times (2023-05-08, notes)

The hooks service fits the episodes and the facts each in its own share of the tokens, by this
form's measure.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby

from app.answers.form import Form
from app.answers.recall import episode_chunks, fact_chunks
from app.answers.text import lines
from app.services.hook_models import Brief
from app.services.recall_models import Episode, Fact

Item = Episode | Fact
PINNED_HEADING = "Pinned facts (kept in view for every session):\n"


def _run(item: Item) -> tuple[type, bool]:
    """Which run an item belongs to: episodes, pinned facts (which lead), or the other facts."""
    return type(item), isinstance(item, Fact) and bool(item.pinned)


def _chunks(items: Sequence[Item]) -> list[str]:
    """Each run of episodes, and of facts, printed as its own answers print it."""
    out: list[str] = []
    for _, run in groupby(items, _run):
        some = list(run)
        episodes = [x for x in some if isinstance(x, Episode)]
        out += episode_chunks(episodes) if episodes else fact_chunks([x for x in some if isinstance(x, Fact)])
    return out


def _brief(brief: Brief, chunks: list[str]) -> str:
    pinned, chunks = chunks[: len(brief.pinned)], chunks[len(brief.pinned) :]
    episodes, facts = chunks[: len(brief.episodes)], chunks[len(brief.episodes) :]
    heading = [brief.facts_heading] if brief.facts and brief.facts_heading else []
    lead = [PINNED_HEADING, *pinned] if pinned else []
    return lines([f"{brief.heading}\n", *lead, *episodes, *(f"{h}\n" for h in heading), *facts])


BRIEF = Form[Brief, Item](lambda b: [*b.pinned, *b.episodes, *b.facts], _chunks, _brief)
