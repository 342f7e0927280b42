"""Memory in an assistant's loop: what a hook event (Claude Code's SessionStart, UserPromptSubmit,
Stop, SubagentStop, PreCompact, SessionEnd) gives and keeps, so the assistant remembers without
deciding to call a tool (docs/clients.md).

- A session's start gets a short brief: the tenant's latest episodes from other sessions, and the
  facts recall finds for the project the working directory names (its last path part, as words).
- A prompt gets the facts recall finds for it that score at least the tenant's threshold, within
  its token budget — never this session's own turns (the client shows them already), never a prompt
  that only repeats this one, never a fact this session was given before (`hook_shown`: clients
  keep injected context in their history, so a fact given twice costs twice). The prompt is kept as
  an episode.
- The end of a turn (Stop, SubagentStop; PreCompact and SessionEnd when the input carries the
  assistant's last message) keeps that message as an episode.

Each kept turn is an episode with source `claude-code:<session>:<turn>:<speaker>` and a capture
key from the session, the turn and (for an answer) its text, unique per tenant: a delivery retried,
a Stop fired again for the same answer or a session resumed keeps each turn once. A session's turn
count is a row of `hook_sessions`, locked while a turn is kept, so every replica agrees on it.
Secrets are taken out before anything is stored (redaction.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from app.auth.principal import ADMIN, READ, WRITE, Principal
from app.config import Settings
from app.errors import EngramError
from app.services.base import Service
from app.services.budget import Budget, clip
from app.services.episodes import Episodes, episode_model
from app.services.filters import Scope
from app.services.hook_models import Brief, HookInput, HookOutcome, HookPolicy, HookTurn
from app.services.recall import Recall, RecallQuery
from app.services.recall_models import EPISODE_MAX_CHARS, Episode, EpisodeIn, Fact
from app.services.redaction import redact_off_loop as redact
from app.store import episodes as episode_store
from app.store import hooks as store
from app.store import index

logger = logging.getLogger(__name__)

PREFIX = "claude-code:"  # the source of every episode a hook keeps
QUERY_CHARS = 1000  # of a prompt, what recall reads (as a tool's query)
CANDIDATES = 20  # facts recall ranks for a prompt, before the filters and the budget
RECENT = 8  # episodes a brief considers
FORGET_BATCH = 100  # idle sessions dropped per session start
ECHO_SIMILARITY = 0.95  # cosine at which an episode restates the prompt

Sizes = Callable[[Sequence[Any]], Sequence[int]]


def policy_from_settings(settings: Settings) -> HookPolicy:
    return HookPolicy(
        capture=settings.hook_capture,
        events=frozenset(settings.hook_events),
        prompt_tokens=settings.hook_prompt_tokens,
        start_tokens=settings.hook_start_tokens,
        min_score=settings.hook_min_score,
    )


def _default(name: str) -> Any:
    field = Settings.model_fields[f"hook_{name}"]
    return field.get_default(call_default_factory=True)


# The documented defaults, for services built without settings (benchmarks, the CLI).
DEFAULT_POLICY = HookPolicy(
    capture=_default("capture"),
    events=frozenset(_default("events")),
    prompt_tokens=_default("prompt_tokens"),
    start_tokens=_default("start_tokens"),
    min_score=_default("min_score"),
)


def fact_key(f: Fact) -> int:
    """A fact's identity within a session's `hook_shown` (63 bits of a digest)."""
    if f.episode_id is not None:
        ident = f"episode:{f.episode_id}"
    else:
        ident = f"{f.kind}:{f.entity.id if f.entity else ''}:{f.to.id if f.to else ''}:{f.text}"
    return int.from_bytes(hashlib.sha256(ident.encode()).digest()[:8], "big", signed=True)


# Words that carry no question on their own: what "thanks!", "ok, go on" or "yes please" are made of.
# fmt: off
FILLER = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "can", "could", "did", "do", "does", "for", "from",
    "go", "going", "got", "had", "has", "have", "he", "her", "his", "how", "i", "if", "in", "is", "it", "its",
    "just", "me", "my", "no", "not", "now", "of", "oh", "ok", "okay", "on", "or", "our", "out", "please", "right",
    "she", "so", "sure", "that", "the", "their", "them", "then", "there", "they", "this", "to", "too", "up", "us",
    "was", "we", "well", "were", "what", "when", "where", "which", "who", "why", "will", "with", "would", "yes",
    "yeah", "yep", "you", "your", "thanks", "thank", "thx", "ty", "great", "good", "nice", "cool", "fine",
    "awesome", "perfect", "sounds", "sound", "lol", "haha", "hmm", "hm", "ah", "wow", "alright", "continue",
    "proceed", "done", "ahead", "keep", "next", "more", "again", "let", "lets",
))
# fmt: on


def asks_something(prompt: str) -> bool:
    """Whether a prompt has a word of substance (three letters or more, not filler): small talk is
    not recalled for, so "thanks!" is never answered with memory."""
    return any(len(w) >= 3 and w not in FILLER for w in re.findall(r"[^\W_]+", prompt.lower()))


def _words(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def project_words(cwd: str | None) -> str | None:
    """What a working directory says about the project: its last path part as words (`engram-web`
    → "engram web"). Only text: the server never opens it."""
    if not cwd:
        return None
    last = re.split(r"[\\/]", cwd.rstrip("\\/"))[-1]
    words = " ".join(re.findall(r"[^\W_]+", last))[:100]
    return words or None


class Hooks(Service):
    def __init__(
        self, recall: Recall, episodes: Episodes, defaults: HookPolicy, *, cache_seconds: float, session_days: float
    ) -> None:
        super().__init__(recall.db, recall.indexer, recall.cursors, recall.limits, recall.fairness)
        self._recall = recall
        self._episodes = episodes
        self.defaults = defaults
        self._cache_seconds = cache_seconds
        self._session_days = session_days
        self._policies: dict[str, tuple[float, HookPolicy]] = {}

    # --- settings

    async def policy(self, who: Principal) -> HookPolicy:
        """The tenant's hook settings, read again after ENGRAM_LIMITS_CACHE_SECONDS."""
        cached = self._policies.get(who.tenant)
        now = time.monotonic()
        if cached is not None and cached[0] > now:
            return cached[1]
        async with self.tx(who, readonly=True, primary=True) as tx:
            row = await store.overrides(tx)
        policy = self.defaults
        if row is not None:
            given = {k: v for k in store.COLUMNS if (v := getattr(row, k)) is not None}
            if "events" in given:
                given["events"] = frozenset(given["events"])
            if "deny" in given:
                given["deny"] = tuple(given["deny"])
            policy = policy.model_copy(update=given)
        if len(self._policies) > 10_000:
            self._policies.clear()
        self._policies[who.tenant] = (now + self._cache_seconds, policy)
        return policy

    async def change(self, who: Principal, values: dict[str, object]) -> HookPolicy:
        """Set the tenant's own hook settings (None: back to the server's default), as one of its
        administrators; the new settings apply on this server at once, on others within
        ENGRAM_LIMITS_CACHE_SECONDS."""
        if ADMIN not in who.scopes:
            raise EngramError("forbidden", "only the tenant's administrators change its hook settings")
        async with self.tx(who, primary=True) as tx:
            await store.set_own(tx, values)
        self._policies.pop(who.tenant, None)
        return await self.policy(who)

    # --- events

    async def handle(self, who: Principal, event: HookInput, fact_sizes: Sizes, episode_sizes: Sizes) -> HookOutcome:
        """What one event injects and keeps; an event the tenant does not answer does nothing."""
        policy = await self.policy(who)
        name = event.hook_event_name
        if name not in policy.events:
            return HookOutcome()
        can_read, capture = READ in who.scopes, policy.capture and WRITE in who.scopes
        if name == "SessionStart":
            brief = await self.start(who, event, policy, fact_sizes, episode_sizes) if can_read else None
            return HookOutcome(brief=brief)
        if name == "UserPromptSubmit":
            if not event.prompt or not event.prompt.strip():
                return HookOutcome()
            text, redacted = await redact(event.prompt, policy.deny)
            if not (can_read and capture):
                brief = await self.prompt(who, event.session_id, text, policy, fact_sizes) if can_read else None
                kept = await self.keep(who, event.session_id, "user", text) if capture else 0
                return HookOutcome(brief=brief, kept=kept, redacted=redacted)
            # Recall and keeping the prompt at once, on two connections, once its vector is in the
            # cache (both would embed the same text): the answer waits for the longer, not the sum.
            await self._embedded(who, text)
            async with asyncio.TaskGroup() as group:
                recalled = group.create_task(self.prompt(who, event.session_id, text, policy, fact_sizes))
                keeping = group.create_task(self.keep(who, event.session_id, "user", text))
            return HookOutcome(brief=recalled.result(), kept=keeping.result(), redacted=redacted)
        if name in ("Stop", "SubagentStop", "PreCompact", "SessionEnd"):
            said = event.last_assistant_message
            if not capture or not said or not said.strip():
                return HookOutcome()
            speaker = "assistant" if name != "SubagentStop" else f"subagent-{_slug(event.agent_type) or 'agent'}"
            text, redacted = await redact(said, policy.deny)
            return HookOutcome(kept=await self.keep(who, event.session_id, speaker, text), redacted=redacted)
        return HookOutcome()

    async def _embedded(self, who: Principal, text: str) -> None:
        """The prompt's vector made once, as recall and the episode's write will ask for it."""
        if asks_something(text):
            await self.indexer.query_vector(await self.db.tenant(who.tenant), _query(text))

    async def prompt(self, who: Principal, session: str, text: str, policy: HookPolicy, sizes: Sizes) -> Brief | None:
        """The facts to inject for a prompt, or None when nothing relevant is new to this session."""
        if policy.prompt_tokens <= 0 or not asks_something(text):
            return None
        result = await self._recall.recall(who, RecallQuery(text=_query(text), limit=CANDIDATES))
        wanted = [f for f in result.facts if f.scores.fused >= policy.min_score and not _echo(f, session, text)]
        if not wanted:
            return None
        facts = await self._unseen(who, session, wanted, Budget(policy.prompt_tokens, sizes))
        return Brief(heading="Engram memory: facts this prompt may need (recalled, not said in this session).",
                     facts=facts) if facts else None  # fmt: skip

    async def start(
        self, who: Principal, event: HookInput, policy: HookPolicy, fact_sizes: Sizes, episode_sizes: Sizes
    ) -> Brief | None:
        """A session's brief: the latest episodes of other sessions and, for the project the working
        directory names, the facts recall ranks first; each half of the budget at most."""
        if policy.start_tokens <= 0:
            return None
        session = event.session_id
        if event.source in ("clear", "compact"):  # the client's history lost what it was shown
            async with self.tx(who, primary=True) as tx:
                await store.forget_shown(tx, session)
        half = max(policy.start_tokens // 2, 100)
        own = f"{PREFIX}{session}:"
        async with self.tx(who, readonly=True) as tx:
            rows = await episode_store.listing(
                tx, entity_id=None, sources=None, since=None, until=None, limit=RECENT + 20
            )
        recent = [
            episode_model(r)
            for r in rows
            if not (r.source or "").startswith(own) and not _prompt_source(r.source)  # answers, notes: not asks
        ][:RECENT]
        recent = Budget(half, episode_sizes).take(recent, _episode_text, _episode_shortened)
        facts: list[Fact] = []
        project = project_words(event.cwd)
        if project is not None:
            result = await self._recall.recall(who, RecallQuery(text=project, limit=CANDIDATES, scope=Scope()))
            shown_ids = {e.id for e in recent}
            wanted = [
                f
                for f in result.facts
                if f.scores.fused >= policy.min_score and f.episode_id not in shown_ids and f.kind != "episode"
            ]
            room = policy.start_tokens - half if recent else policy.start_tokens
            facts = await self._unseen(who, session, wanted, Budget(room, fact_sizes))
        if not recent and not facts:
            return None
        async with self.tx(who, primary=True) as tx:
            await store.mark_shown(tx, session, [fact_key_of_episode(e) for e in recent])
            await store.forget_old(tx, self._session_days, FORGET_BATCH)
        return Brief(
            heading="Engram memory: the latest from other sessions.",
            episodes=recent,
            facts=facts,
            facts_heading=f"About {project}:" if facts else None,
        )

    async def _unseen(self, who: Principal, session: str, facts: list[Fact], budget: Budget) -> list[Fact]:
        """Those of `facts` this session was not given, as many as fit `budget`; marked as given."""
        keys = [fact_key(f) for f in facts]
        async with self.tx(who, primary=True) as tx:
            seen = await store.shown(tx, session, keys)
            fresh = [f for f, k in zip(facts, keys, strict=True) if k not in seen]
            fitting = budget.take(fresh, _fact_text, _fact_shortened)
            if fitting:
                await store.mark_shown(tx, session, [fact_key(f) for f in fitting])
        return fitting

    async def keep(self, who: Principal, session: str, speaker: str, text: str) -> int:
        """Keep one turn as an episode, once: 1 if kept now, 0 if it was kept before."""
        body = clip(text.strip(), EPISODE_MAX_CHARS)  # bytes, so within the episode's bound in characters
        digest = hashlib.sha256(body.encode()).digest()[:16]
        user = speaker == "user"
        async with self.tx(who, texts=[index.episode_text(body, [])], primary=True) as tx:
            state = await store.session_turn(tx, session)
            if user and state.last_user == digest and not state.answered:
                return 0  # the same prompt again before any answer: a retried delivery
            turn = state.turns + 1 if user else state.turns
            key = _capture_key(session, turn, speaker, None if user else digest)
            if await store.captured(tx, [key]):
                return 0
            item = EpisodeIn(text=body, source=f"{PREFIX}{session}:{turn}:{speaker}")
            rows = await self._episodes.write(tx, who, [item], None)
            await store.set_capture_keys(tx, [r.id for r in rows], [key])
            if user:
                await store.set_turn(tx, session, turn, digest, answered=False)
            else:
                await store.set_turn(tx, session, state.turns, state.last_user, answered=True)
        return 1

    async def turns(self, who: Principal, session: str | None, limit: int) -> list[HookTurn]:
        """The newest turns hooks kept, of one session or of all (the console's listing)."""
        async with self.tx(who, readonly=True) as tx:
            rows = await store.episodes(tx, PREFIX, session, limit)
        out = []
        for r in rows:
            where, turn, speaker = r.source[len(PREFIX) :].rsplit(":", 2)
            out.append(HookTurn(id=r.id, session=where, turn=int(turn), speaker=speaker, text=r.content, at=r.at))
        return out


def _query(prompt: str) -> str:
    """What recall reads of a prompt (and the episode keeps of a short one: one vector for both)."""
    return prompt[:QUERY_CHARS].strip()


def _prompt_source(source: str | None) -> bool:
    return source is not None and source.startswith(PREFIX) and source.endswith(":user")


def _echo(f: Fact, session: str, prompt: str) -> bool:
    """Whether injecting `f` would only say back what was said: a turn of this session (the client
    shows it already), a text that restates the prompt, or a question asked before through a hook
    (a question answers nothing; asked again, it would only come back)."""
    if f.kind != "episode":
        return False
    if (f.source or "").startswith(f"{PREFIX}{session}:"):
        return True
    if (f.scores.semantic or 0) >= ECHO_SIMILARITY or _words(f.text) == _words(prompt):
        return True
    return _prompt_source(f.source) and "?" in f.text


def _capture_key(session: str, turn: int, speaker: str, digest: bytes | None) -> str:
    ident = f"{session}\x00{turn}\x00{speaker}\x00{digest.hex() if digest else ''}"
    return "cc1:" + hashlib.sha256(ident.encode()).hexdigest()[:48]


def fact_key_of_episode(e: Episode) -> int:
    return int.from_bytes(hashlib.sha256(f"episode:{e.id}".encode()).digest()[:8], "big", signed=True)


def _slug(text: str | None) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", (text or "").lower()).strip("-")[:30]  # a source stays within 200


def _fact_text(f: Fact) -> str:
    return f.text


def _fact_shortened(f: Fact, text: str) -> Fact:
    return f.model_copy(update={"text": text})


def _episode_text(e: Episode) -> str:
    return e.text


def _episode_shortened(e: Episode, text: str) -> Episode:
    return e.model_copy(update={"text": text})
