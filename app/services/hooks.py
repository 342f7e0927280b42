"""Memory in an assistant's loop: what a client's hook event gives and keeps, so the assistant
remembers without deciding to call a tool (docs/clients.md). The service speaks in neutral verbs; a
client's adapter (app/hooks/) says which of its events is which, as a `HookCall`.

- A session's `start` gets a short brief: the latest episodes of other sessions that the caller
  may see, and the facts recall finds for the project the working directory names (its last path
  part, as words).
- A `prompt` gets the facts recall finds for it that score at least the tenant's threshold, within
  its token budget — never this session's own turns (the client shows them already), never a prompt
  that only repeats this one, never a fact this session was given before (`hook_shown`: clients
  keep injected context in their history, so a fact given twice costs twice).
- A turn an event carries (the prompt, the end of an answer) is kept as an episode (`keep`).

An event is answered when the tenant's `events` setting lists the client's name for it.
Each kept turn is an episode with source `claude-code:<session>:<turn>:<speaker>` (the prefix of
every client's kept turns: stored data holds it) and a capture key from the session, the turn and
(for an answer) its text, unique per tenant: a delivery retried, an end of turn posted again for the
same answer or a session resumed keeps each turn once. A session's turn count is a row of
`hook_sessions`, locked while a turn is kept, so every replica agrees on it.
Secrets are taken out before anything is stored (redaction.py). A kept turn is private to the
principal that posted it unless the tenant's settings share them (docs/private-memory.md): every
read here runs in the caller's transaction, which sees the shared memory and its own only.

A session's state (turns, what it was given) is keyed by the client's session id and the principal
posting it (`session_key`): another principal of the tenant reusing the id has a session of its
own. Only hooks write `claude-code:` sources (episodes.py refuses them elsewhere), and what hooks
inject trusts the capture key, never the source string. A turn is kept by a task that outlives the
answer (hook_tasks.py), so a database too slow for the deadline still keeps it.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import re
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

from app.auth.principal import ADMIN, READ, WRITE, Principal
from app.config import Settings
from app.errors import EngramError
from app.services.base import Service
from app.services.budget import Budget, byte_tokens, clip
from app.services.calls import GRACE, retrying, within
from app.services.episodes import HOOK_SOURCE as PREFIX
from app.services.episodes import Episodes, episode_model
from app.services.filters import Scope
from app.services.hook_models import Brief, HookCall, HookOutcome, HookPolicy, HookTurn, Prompt, Said, Start
from app.services.hook_tasks import Detached
from app.services.pins import pinned_facts
from app.services.recall import Recall, RecallQuery
from app.services.recall_models import EPISODE_MAX_CHARS, Episode, EpisodeIn, Fact
from app.services.redaction import redact_off_loop as redact
from app.store import episodes as episode_store
from app.store import hooks as store
from app.store import index
from app.store.database import Tx
from app.store.errors import Unavailable

logger = logging.getLogger(__name__)

QUERY_CHARS = 1000  # of a prompt, what recall reads (as a tool's query)
CANDIDATES = 20  # facts recall ranks for a prompt, before the filters and the budget
RECENT = 8  # episodes a brief considers
FORGET_BATCH = 100  # idle sessions dropped per session start
ECHO_SIMILARITY = 0.95  # cosine at which an episode restates the prompt
CAPTURE_BACKOFF = 0.25  # seconds before a capture is tried again, doubling to CAPTURE_BACKOFF_MAX
CAPTURE_BACKOFF_MAX = 2.0
CAPTURE_SECONDS_MIN = 30.0  # a capture is tried for 3 calls' deadlines, and at least this long
CAPTURE_PENDING_MAX = 200  # captures (and tenant creations) still running after their answers
CALL_SECONDS_MAX = 60.0  # one try's bound, even where calls are unbounded

Sizes = Callable[[Sequence[Any]], Sequence[int]]
T = TypeVar("T")


def policy_from_settings(settings: Settings) -> HookPolicy:
    return HookPolicy(
        capture=settings.hook_capture,
        events=frozenset(settings.hook_events),
        prompt_tokens=settings.hook_prompt_tokens,
        start_tokens=settings.hook_start_tokens,
        min_score=settings.hook_min_score,
        private=settings.hook_private,
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
    private=_default("private"),
)


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


class Capture(NamedTuple):
    """A turn being kept (None: the event keeps nothing), and the prompt's vector made (set)."""

    task: asyncio.Task[Any] | None
    embedded: asyncio.Event


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
        self._call_seconds = min(recall.db.control.call_deadline, CALL_SECONDS_MAX)
        bound = max(3 * (self._call_seconds + GRACE), CAPTURE_SECONDS_MIN)
        self.detached = Detached(CAPTURE_PENDING_MAX, bound)
        self._making: dict[str, asyncio.Task[Any]] = {}

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

    def capture(self, who: Principal, call: HookCall) -> Capture:
        """Start keeping the call's turn now (the hook endpoint calls this as soon as the input is
        read, before its deadline can cut anything): the task, and the event recall waits for."""
        embedded = asyncio.Event()
        keeping = self._keeping(who, call, embedded)
        if keeping is None:
            embedded.set()
        return Capture(keeping, embedded)

    async def handle(self, who: Principal, call: HookCall, sizes: Sizes, capture: Capture | None = None) -> HookOutcome:
        """What one event injects and keeps; an event the tenant does not answer does nothing.

        A turn is kept by a task of its own (`_keeping`), started before anything asks the
        database: past the deadline the answer goes, and the turn is still kept once the database
        answers. For a prompt it embeds the text first, and recall waits for that (both read the
        same vector): the answer waits for the longer, not the sum."""
        keeping, embedded = capture or self.capture(who, call)
        await self.resolve(who)
        policy = await self.policy(who)
        ask = call.ask if call.event in policy.events and READ in who.scopes else None
        if isinstance(ask, Start):
            brief = await self.start(who, call.session, ask, policy, sizes)
        elif isinstance(ask, Prompt):
            text, _ = await redact(ask.text, policy.deny)
            await embedded.wait()
            brief = await self.prompt(who, call.session, text, policy, sizes)
        else:
            brief = None
        kept = await _kept(keeping)
        return HookOutcome(brief=brief, kept=kept.kept, redacted=kept.redacted)

    async def resolve(self, who: Principal) -> None:
        """The caller's tenant, made if it is new, by a task the hook's deadline does not cancel: a
        tenant whose first contact is a hook comes to exist even when the answer could not wait."""
        if self.db.cached_tenant(who.tenant) is not None:
            return
        making = self._making.get(who.tenant)
        if making is None:
            making = self.detached.start("tenant creation", functools.partial(self.db.tenant, who.tenant))
            self._making[who.tenant] = making
            making.add_done_callback(lambda _: self._making.pop(who.tenant, None))
        await asyncio.shield(making)

    def _keeping(self, who: Principal, call: HookCall, embedded: asyncio.Event) -> asyncio.Task[Any] | None:
        """The call's turn kept by a task that outlives the answer (hook_tasks.py), tried again
        while the database does not answer (each try within a call's deadline), until the task's
        bound; None when the call keeps nothing."""
        said = call.said
        if said is None or WRITE not in who.scopes:
            return None

        async def run() -> HookOutcome:
            wait = CAPTURE_BACKOFF
            tried: list[str] = []  # the capture keys of earlier tries, which may have committed
            try:
                while True:
                    try:
                        once = functools.partial(retrying, self._capture, who, call, said, embedded, tried)
                        return await within(self._call_seconds, once, writes=True)
                    except Unavailable:
                        embedded.set()  # recall goes on without waiting for the next try
                        await asyncio.sleep(wait)
                        wait = min(2 * wait, CAPTURE_BACKOFF_MAX)
            finally:
                embedded.set()

        return self.detached.start(f"capture of a {said.speaker} turn", run)

    async def _capture(
        self, who: Principal, call: HookCall, said: Said, embedded: asyncio.Event, tried: list[str]
    ) -> HookOutcome:
        """Keep one turn if the tenant's settings keep it: redacted, the prompt's vector made first."""
        speaker, raw = said
        policy = await self.policy(who)
        if call.event not in policy.events or not policy.capture:
            return HookOutcome()
        text, redacted = await redact(raw, policy.deny)
        if speaker == "user" and not embedded.is_set():
            await self._embedded(who, text)
            embedded.set()
        kept = await self.keep(who, call.session, speaker, text, tried, private=policy.private)
        return HookOutcome(kept=kept, redacted=redacted)

    async def _embedded(self, who: Principal, text: str) -> None:
        """The prompt's vector made once, as recall and the episode's write will ask for it."""
        if asks_something(text):
            await self.indexer.query_vector(await self.db.tenant(who.tenant), _query(text))

    async def prompt(self, who: Principal, session: str, text: str, policy: HookPolicy, sizes: Sizes) -> Brief | None:
        """The facts to inject for a prompt, or None when nothing relevant is new to this session."""
        if policy.prompt_tokens <= 0 or not asks_something(text):
            return None
        result = await self._recall.recall(who, RecallQuery(text=_query(text), limit=CANDIDATES))
        wanted = [f for f in result.facts if f.scores.fused >= policy.min_score and not _restates(f, text)]
        if not wanted:
            return None
        ids = [f.episode_id for f in wanted if f.episode_id is not None]
        key = session_key(who, session)
        async with self.tx(who, primary=True) as tx:
            hooked = await store.captured_ids(tx, ids) if ids else set()
            wanted = [
                f
                for f in wanted
                if f.kind != "episode" or not _withheld(f.source, f.episode_id in hooked, session, f.text)
            ]
            shown = Shown(tx, key, await store.shown(tx, key, _keys(facts=wanted)))
            facts = shown.take(wanted, fact_keys, Budget(policy.prompt_tokens, sizes))
            await shown.mark()
        return Brief(heading="Engram memory: facts this prompt may need (recalled, not said in this session).",
                     facts=facts) if facts else None  # fmt: skip

    async def start(self, who: Principal, session: str, start: Start, policy: HookPolicy, sizes: Sizes) -> Brief | None:
        """A session's brief: the latest episodes of other sessions and, for the project the working
        directory names, the facts recall ranks first; each half of the budget at most. What this
        session was given before (a resumed session) is not given again; a cleared start forgets it
        (the client's history lost it)."""
        if policy.start_tokens <= 0:
            return None
        key = session_key(who, session)
        if start.cleared:
            async with self.tx(who, primary=True) as tx:
                await store.forget_shown(tx, key)
        async with self.tx(who, readonly=True) as tx:
            rows = await episode_store.listing(
                tx, entity_id=None, sources=None, since=None, until=None, limit=RECENT + 20
            )
            hooked = await store.captured_ids(tx, [r.id for r in rows]) if rows else set()
            pinned = await pinned_facts(tx)
        # answers and notes, not asks, nor this session's own turns
        recent = [episode_model(r) for r in rows if not _withheld(r.source, r.id in hooked, session, None)]
        project = project_words(start.directory)
        wanted: list[Fact] = []
        if project is not None:
            result = await self._recall.recall(who, RecallQuery(text=project, limit=CANDIDATES, scope=Scope()))
            wanted = [f for f in result.facts if f.scores.fused >= policy.min_score and f.kind != "episode"]
        async with self.tx(who, primary=True) as tx:
            shown = Shown(tx, key, await store.shown(tx, key, _keys(recent[: 2 * RECENT], [*wanted, *pinned])))
            lead = shown.take(pinned, fact_keys, Budget(max(policy.start_tokens // 2, 100), sizes), again=True)
            tokens = policy.start_tokens - byte_tokens(sum(sizes(lead)))
            half = max(tokens // 2, 100)
            episodes = shown.take(recent[:RECENT], episode_keys, Budget(half, sizes))
            room = tokens - half if episodes else tokens
            facts = shown.take(wanted, fact_keys, Budget(room, sizes))
            await shown.mark()
            await store.forget_old(tx, self._session_days, FORGET_BATCH)
        if not episodes and not facts and not lead:
            return None
        return Brief(
            heading="Engram memory: the latest from other sessions.",
            pinned=lead,
            episodes=episodes,
            facts=facts,
            facts_heading=f"About {project}:" if facts else None,
        )

    async def keep(
        self, who: Principal, session: str, speaker: str, text: str, tried: list[str], *, private: bool = True
    ) -> int:
        """Keep one turn as an episode, once: 1 if kept now, 0 if it was kept before — by another
        delivery, or by an earlier try of this one whose COMMIT got no answer (`tried`: checked once
        the session's row is locked, which that try held until it ended). `private`: in the posting
        principal's private memory (the default), else in the tenant's shared memory."""
        body = clip(text.strip(), EPISODE_MAX_CHARS)  # bytes, so within the episode's bound in characters
        digest = hashlib.sha256(body.encode()).digest()[:16]
        user = speaker == "user"
        key = session_key(who, session)
        async with self.tx(who, texts=[index.episode_text(body, [])], primary=True) as tx:
            state = await store.session_turn(tx, key)
            if tried and await store.captured(tx, tried):
                return 0
            if user and state.last_user == digest and not state.answered:
                return 0  # the same prompt again before any answer: a retried delivery
            turn = state.turns + 1 if user else state.turns
            capture = _capture_key(key, turn, speaker, digest)  # a try's own key, whatever took the turn since
            if await store.captured(tx, [capture]):
                return 0
            tried.append(capture)
            item = EpisodeIn(text=body, source=f"{PREFIX}{session}:{turn}:{speaker}", private=private)
            rows = await self._episodes.write(tx, who, [item], None)
            await store.set_capture_keys(tx, [r.id for r in rows], [capture])
            if user:
                await store.set_turn(tx, key, turn, digest, answered=False)
            else:
                await store.set_turn(tx, key, state.turns, state.last_user, answered=True)
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


def session_key(who: Principal, session: str) -> str:
    """A session as the server keeps its state: the client's id bound to the principal posting it
    (its token's subject, or its API key). Another principal of the tenant posting the same id has
    a session of its own: it can neither read nor change what this one was given."""
    return f"{session}@{hashlib.sha256(who.subject.encode()).hexdigest()[:16]}"


def _withheld(source: str | None, hooked: bool, session: str, asked: str | None) -> bool:
    """Whether an episode must not be injected: one whose source claims a hook kept it but no hook
    did (no capture key: `claude-code:` sources are refused elsewhere, so only an import or an older
    write has one), a turn of this session (the client shows it already), or a prompt — in a brief
    any, for a prompt (`asked`) a question asked before through a hook (a question answers nothing;
    asked again, it would only come back)."""
    if not (source or "").startswith(PREFIX):
        return False
    if not hooked or (source or "").startswith(f"{PREFIX}{session}:"):
        return True
    prompt = (source or "").endswith(":user")
    return prompt and (asked is None or "?" in asked)


def _restates(f: Fact, prompt: str) -> bool:
    """Whether an episode only says the prompt back: cosine ≥ ECHO_SIMILARITY, or the same words."""
    return f.kind == "episode" and ((f.scores.semantic or 0) >= ECHO_SIMILARITY or _words(f.text) == _words(prompt))


def _capture_key(session: str, turn: int, speaker: str, digest: bytes | None) -> str:
    ident = f"{session}\x00{turn}\x00{speaker}\x00{digest.hex() if digest else ''}"
    return "cc1:" + hashlib.sha256(ident.encode()).hexdigest()[:48]


def _digest(ident: str) -> int:
    """63 bits of a digest: an entry of a session's `hook_shown`."""
    return int.from_bytes(hashlib.sha256(ident.encode()).digest()[:8], "big", signed=True)


def fact_key(f: Fact) -> int:
    """A fact's identity (an episode's is its id, shared with `episode_keys`)."""
    if f.episode_id is not None:
        return _digest(f"episode:{f.episode_id}")
    return _digest(f"{f.kind}:{f.entity.id if f.entity else ''}:{f.to.id if f.to else ''}:{f.text}")


def text_key(text: str) -> int:
    """What a text says, whoever wrote it: its words, lowercased."""
    return _digest("text:" + _words(text))


def _said(f: Fact, text: str) -> str:
    """A text as the brief shows it: an observation or a description under its entity's name."""
    return f"{f.entity.name}: {text}" if f.kind in ("observation", "entity") and f.entity else text


def fact_keys(f: Fact) -> list[int]:
    """Every key a fact is known by: its identity, its text, and the texts of the near-identical
    facts folded into it (`also`), so the group is given once whichever member leads it."""
    return [fact_key(f), text_key(_said(f, f.text)), *(text_key(_said(f, r.text)) for r in f.also)]


def episode_keys(e: Episode) -> list[int]:
    return [_digest(f"episode:{e.id}"), text_key(e.text)]


def _keys(episodes: Sequence[Episode] = (), facts: Sequence[Fact] = ()) -> list[int]:
    return [k for e in episodes for k in episode_keys(e)] + [k for f in facts for k in fact_keys(f)]


class Shown:
    """What one session was given before (`seen`) and what one brief gives: nothing twice, by any
    of its keys; what a brief gives is marked in the same transaction."""

    def __init__(self, tx: Tx, session: str, seen: set[int]) -> None:
        self.tx, self.session, self.seen = tx, session, seen
        self.new: list[int] = []

    def take(
        self, items: Sequence[T], keys_of: Callable[[T], list[int]], budget: Budget[Any], *, again: bool = False
    ) -> list[T]:
        """Those of `items` not given yet (`again`: given before or not, as pinned facts lead every
        brief), once each, as many as fit `budget`; marked given, so that nothing else repeats them."""
        fresh: list[tuple[T, list[int]]] = []
        here: set[int] = set()
        for item in items:
            keys = keys_of(item)
            if (again or self.seen.isdisjoint(keys)) and here.isdisjoint(keys):
                here.update(keys)
                fresh.append((item, keys))
        taken = budget.take([item for item, _ in fresh])
        for _, keys in fresh[: len(taken)]:
            self.seen.update(keys)
            self.new.extend(keys)
        return taken

    async def mark(self) -> None:
        if self.new:
            await store.mark_shown(self.tx, self.session, self.new)


async def _kept(keeping: asyncio.Task[Any] | None) -> HookOutcome:
    """What a capture kept, once its task ends; the hook's deadline ends the wait, not the task."""
    if keeping is None:
        return HookOutcome()
    await asyncio.wait({keeping})
    return keeping.result() or HookOutcome()
