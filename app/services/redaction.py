"""Secrets taken out of a text before it is stored: what a hook captures is whatever a person typed
or an assistant printed, keys and passwords included.

What is found (docs/security.md, "Redaction"):
- the detectors of secret_rules.py: detect-secrets' regex plugins, keyword = value forms from its
  keyword list, and the shapes it lacks;
- high entropy strings, as detect-secrets' Base64 plugin judges them (Shannon entropy >= 4.5 over
  its alphabet), of 20 characters or more with letters and digits;
- the next line of a secret that ends a line, when it looks like the rest of the key (wrapped);
- the tenant's own deny-list: globs matched against each whitespace-separated word, or that word
  without the punctuation around it (`hunter2.`): `*` any run, `?` one character, as in `fnmatch`.

Time: every pattern, the deny-list's included, is an RE2 automaton, linear in the text whatever the
input; the Python work is one step per match or per candidate. The hook runs it in a worker thread
(`redact_off_loop`), a few at once, so a large prompt never holds the event loop.

What matches becomes `[redacted]`.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import lru_cache

import anyio
import anyio.to_thread
import re2
from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString

from app.services.secret_rules import KEYWORD_HEAD, OPTIONS, Rule, own_rules, plugin_rules

MARK = "[redacted]"
MAX_PATTERNS = 100
MAX_PATTERN_CHARS = 200
STEPS = 1000  # matches and candidates looked at in one text, at most (a few microseconds each)
THREADS = 2  # redactions at once in worker threads: a burst of large prompts queues, the loop stays free

Span = tuple[int, int]

RULES: tuple[Rule, ...] = (*plugin_rules()[0], *own_rules())

_KEYWORD = re2.compile(KEYWORD_HEAD.encode(), options=OPTIONS)
VALUE_CHARS = 1024  # of a value after a key word, what is read (and hidden)
# Quoted ("…", '…', `…`) or bare; each alternative one character class then one literal: no backtracking.
_VALUE = re.compile(
    rb"\"([^\"\r\n]{4,1024})\"|'([^'\r\n]{4,1024})'|`([^`\r\n]{4,1024})`|([^\s\"'`,;<>(){}\[\]]{4,1024})"
)
# Python's engine here, whose match objects cost a tenth of RE2's: a run of one character class takes
# linear time in it too (a failed start rescans fewer than 20 characters).
_CANDIDATE = re.compile(rb"[A-Za-z0-9+/_-]{20,}={0,2}")
_ENTROPY = Base64HighEntropyString()  # detect-secrets' default limit, 4.5 bits a character
ENTROPY_CHARS = 256
_MIN_DISTINCT = 23  # fewer distinct characters cannot reach 4.5 bits: skip the count
_CONTINUATION = re2.compile(rb"\r?\n([A-Za-z0-9+/=_-]{8,})(?:\r?\n|\z)", options=OPTIONS)
_KEY_CHAR = re.compile(rb"[0-9+/=]")
_PLACEHOLDER = re.compile(rb"[*xX.#-]+|\d+|[A-Z][A-Z0-9]*_[A-Z0-9_]+")  # masks, numbers, ENV_NAMES
_REFERENCE = (b"$", b"%", b"{", b"<")
_WORDS = {b"true", b"false", b"null", b"none", b"nil", b"undefined", b"yes", b"no", b"on", b"off", b"required"}
_TRAILING = b".,;:!?)]}'\""
_SPACES = (b" ", b"\t", b"\n", b"\r", b"\f", b"\v")
_WORD = re.compile(rb"\S*")


def check_patterns(patterns: Sequence[str]) -> list[str]:
    """A tenant's deny-list as given, or ValueError saying what is wrong with it."""
    if len(patterns) > MAX_PATTERNS:
        raise ValueError(f"at most {MAX_PATTERNS} deny patterns")
    out = []
    for p in patterns:
        if not p or len(p) > MAX_PATTERN_CHARS or any(c.isspace() or c == "\x00" for c in p):
            raise ValueError(f"a deny pattern is 1-{MAX_PATTERN_CHARS} characters without spaces")
        if p.strip("*?") == "":
            raise ValueError(f"the deny pattern {p!r} would match every word")
        out.append(p)
    return out


class _Exhausted(Exception):
    """More matches and candidates than STEPS: the text is withheld."""


def _step(steps: list[int]) -> None:
    steps[0] -= 1
    if steps[0] < 0:
        raise _Exhausted


def _counted(matches: Iterable[re2._Match], steps: list[int]) -> Iterable[re2._Match]:
    for m in matches:
        _step(steps)
        yield m


def redact(text: str, deny: Sequence[str] = ()) -> tuple[str, int]:
    """`text` with every secret found replaced; and how many were. A text in which more than STEPS
    matches or candidates need a look (a dump of keys, or input made to be slow) is withheld whole:
    the work per text stays bounded, and too much is hidden rather than too little."""
    data = text.encode("utf-8", "surrogatepass")
    steps = [STEPS]
    try:
        spans = [*_rule_spans(data, steps), *_keyword_spans(data, steps)]
        spans += [*_entropy_spans(data, steps), *_deny_spans(data, tuple(deny), steps)]
    except _Exhausted:
        return MARK, 1
    if not spans:
        return text, 0
    merged = _wrapped(data, _merge(spans))
    out: list[bytes] = []
    last = 0
    for start, end in merged:
        out += (data[last:start], MARK.encode())
        last = end
    out.append(data[last:])
    return b"".join(out).decode("utf-8", "surrogatepass"), len(merged)


_limiter: anyio.CapacityLimiter | None = None


async def redact_off_loop(text: str, deny: Sequence[str] = ()) -> tuple[str, int]:
    """`redact` in a worker thread (at most THREADS at once), so that a long text delays only itself."""
    global _limiter
    if _limiter is None:
        _limiter = anyio.CapacityLimiter(THREADS)
    return await anyio.to_thread.run_sync(redact, text, tuple(deny), limiter=_limiter)


def _rule_spans(data: bytes, steps: list[int]) -> Iterable[Span]:
    for rule in RULES:
        for m in _counted(rule.regex.finditer(data), steps):
            start, end = rule.span(m)
            # A value after a key word (a group of a plugin's, or of ours) is judged as such.
            judge = rule.judge or ("reference" if start > m.start() else "")
            if judge == "prose":
                end = start + len(data[start:end].rstrip(_TRAILING))
            if judge and not _plausible(data[start:end], prose=judge == "prose", short=judge == "reference"):
                continue
            if end > start:
                yield start, end


def _keyword_spans(data: bytes, steps: list[int]) -> Iterable[Span]:
    """`password=…`, `"SecretAccessKey": "…"`, `api_key: …`: the value, when `_plausible`. The value
    is read from at most VALUE_CHARS bytes after the head, by a pattern that cannot backtrack."""
    for m in _counted(_KEYWORD.finditer(data), steps):
        head = m.end()
        v = _VALUE.match(data, head, head + VALUE_CHARS + 2)
        if v is None:
            continue
        group = v.lastindex or 0
        start, end = v.span(group)
        if group >= 3:  # a code span or a bare value: trailing punctuation is prose
            end = start + len(data[start:end].rstrip(_TRAILING))
        op = data[m.start() : head].rstrip()[-1:]
        prose = op == b":" and head > 0 and data[head - 1 : head].isspace() and group != 1
        if _plausible(data[start:end], prose=prose and group != 2):
            yield start, end


def _plausible(value: bytes, prose: bool, short: bool = False) -> bool:
    """Whether a value after a key word can be a secret: not a reference (`$X`, `%X%`, `{{x}}`, `<x>`,
    an ENV_NAME), a placeholder (`...`, `…`, `****`, a number, true/false); and after `key: ` in prose,
    YAML or a code span, not a plain word (it has a digit, `+/=` or both cases: `s3cret`, `MyPassw`)."""
    last = value.rsplit(b" ", 1)[-1]  # "Bearer $API_KEY" refers to a secret, as "$API_KEY" does
    if len(value) < (1 if short else 4) or last[:1] in _REFERENCE or b"\xe2\x80\xa6" in value:
        return False
    if _PLACEHOLDER.fullmatch(value) or value.lower() in _WORDS or (b"<" in value and b">" in value):
        return False
    if prose:
        return bool(_KEY_CHAR.search(value)) or not (value.islower() or value.isupper() or value.istitle())
    return True


def _entropy_spans(data: bytes, steps: list[int]) -> Iterable[Span]:
    """Runs of Base64 characters of high entropy. detect-secrets' measure and limit, computed on the
    first ENTROPY_CHARS characters of a run (a long run's start says what it is)."""
    for m in _CANDIDATE.finditer(data):  # a cheap look at each run; the budget counts the closer ones
        token = m.group()[:ENTROPY_CHARS]
        if len(set(token)) < _MIN_DISTINCT or token.isalpha() or token.isdigit():
            continue
        _step(steps)
        if _entropy(token) >= _ENTROPY.entropy_limit:
            yield m.span()


def _entropy(token: bytes) -> float:
    """Shannon entropy in bits a character: detect-secrets' `calculate_shannon_entropy`, in one pass
    (the same figure: every character of a candidate is in its Base64 alphabet)."""
    n = len(token)
    return -sum(c / n * math.log2(c / n) for c in Counter(token).values())


@lru_cache(maxsize=256)
def _globs(patterns: tuple[str, ...]) -> re2._Regexp | None:
    """The deny-list as one RE2 alternation: `*` any run of non-space, `?` one non-space character."""
    if not patterns:
        return None
    parts = ("".join({"*": r"\S*", "?": r"\S"}.get(c, re.escape(c)) for c in p) for p in patterns)
    return re2.compile("|".join(f"(?:{p})" for p in parts).encode(), options=OPTIONS)


def _deny_spans(data: bytes, deny: tuple[str, ...], steps: list[int]) -> Iterable[Span]:
    """Each word a glob matches whole, or without the punctuation around it: found by searching for
    the globs anywhere, then judging the word around each hit once (so linear, however many hits)."""
    globs = _globs(deny)
    pos = 0
    while globs is not None and (hit := globs.search(data, pos)) is not None:
        _step(steps)
        start = max(data.rfind(c, pos, hit.start()) for c in _SPACES) + 1 or pos  # never looks back past `pos`
        word_end = _WORD.match(data, hit.start())  # \S* matches at any position: never None
        end = word_end.end() if word_end else hit.start()
        word = data[start:end]
        core = word.strip(_TRAILING + b"([{'\"<")
        if globs.fullmatch(word):
            yield start, end
        elif core and globs.fullmatch(core):
            offset = start + word.index(core)
            yield offset, offset + len(core)
        pos = max(end, hit.start() + 1)


def _merge(spans: list[Span]) -> list[Span]:
    spans.sort()
    merged = [spans[0]]
    for start, end in spans[1:]:
        if start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _key_like(line: bytes) -> bool:
    return bool(_KEY_CHAR.search(line)) or (len(line) >= 16 and not line.islower() and not line.isupper())


def _wrapped(data: bytes, spans: list[Span]) -> list[Span]:
    """A secret that ends its line takes the next line too when that line is one run of key
    characters with a digit, `+/=` or both cases in it: a key wrapped by a terminal or an editor."""
    out: list[Span] = []
    for start, end in spans:
        while (m := _CONTINUATION.match(data, end)) is not None and _key_like(m.group(1)):
            end = m.end(1)
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(end, out[-1][1]))
        else:
            out.append((start, end))
    return out
