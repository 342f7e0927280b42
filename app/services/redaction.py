"""Secrets taken out of a text before it is stored: what a hook captures is whatever a person typed
or an assistant printed, keys and passwords included.

Two kinds of pattern:
- built in (always on): private keys, bearer tokens and Authorization headers, AWS access keys and
  secrets, well-known API key shapes (OpenAI/Anthropic `sk-`, GitHub, Slack, Google, Stripe,
  Engram's own `egk_`), JSON Web Tokens, passwords in URLs (`scheme://user:password@host`), and
  `password=`/`secret:`/`token=`/`api_key=` assignments. Each is a linear regular expression.
- the tenant's own deny-list: globs matched against each whitespace-separated word (`*` any run,
  `?` one character, as in `fnmatch`), e.g. `ACME-*`, `*.corp.example.com`, `hunter2`. Globs, not
  regular expressions, so that a pattern cannot make matching slow (no backtracking blow-up).

What matches becomes `[redacted]`.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from functools import lru_cache

MARK = "[redacted]"
MAX_PATTERNS = 100
MAX_PATTERN_CHARS = 200
_WORD = re.compile(r"\S+")

BUILT_IN: tuple[tuple[str, re.Pattern[str], str], ...] = tuple(
    (name, re.compile(pattern), replacement)
    for name, pattern, replacement in (
        (
            "private_key",
            r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z0-9 ]{0,40}PRIVATE KEY-----|\Z)",
            MARK,
        ),
        (
            "authorization",
            r"(?i)\b(authorization\s*[:=]\s*)(?:bearer|basic|token)?\s*[A-Za-z0-9._~+/=-]{8,}",
            r"\1" + MARK,
        ),
        ("bearer", r"(?i)\bbearer\s+[A-Za-z0-9._~+/-]{8,}=*", "Bearer " + MARK),
        ("aws_access_key", r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b", MARK),
        ("aws_secret", r"(?i)\b(aws_?secret_?(?:access_?)?key\s*[:=]\s*)\S+", r"\1" + MARK),
        ("api_key", r"\b(?:sk|pk|rk)-(?:ant-|proj-|live-|test-)?[A-Za-z0-9_-]{16,}", MARK),
        ("stripe_key", r"\b(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{16,}", MARK),
        ("github_token", r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})", MARK),
        ("slack_token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}", MARK),
        ("google_key", r"\bAIza[0-9A-Za-z_-]{35}\b", MARK),
        ("engram_key", r"\begk_[a-z0-9]{12}_[A-Za-z0-9_-]{20,}", MARK),
        ("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", MARK),
        ("url_password", r"\b([a-z][a-z0-9+.-]{0,30}://[^\s:/@]{1,200}):[^\s@/]{1,200}@", r"\1:" + MARK + "@"),
        (
            "assignment",
            r"(?i)\b((?:password|passwd|pwd|secret|client_secret|api[_-]?key|access[_-]?token|auth[_-]?token)"
            r"[\"']?\s*[:=]\s*[\"']?)[^\s\"',;]{4,}",
            r"\1" + MARK,
        ),
    )
)


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


@lru_cache(maxsize=256)
def _globs(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    # fnmatch's translation keeps runs of `*` from backtracking (atomic groups), one pattern per word.
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns)) if patterns else None


def redact(text: str, deny: Sequence[str] = ()) -> tuple[str, int]:
    """`text` with every secret the built-in patterns or `deny` find replaced; and how many were."""
    count = 0
    for _, pattern, replacement in BUILT_IN:
        text, n = pattern.subn(replacement, text)
        count += n
    globs = _globs(tuple(deny))
    if globs is not None:

        def word(m: re.Match[str]) -> str:
            nonlocal count
            if globs.fullmatch(m.group()):
                count += 1
                return MARK
            return m.group()

        text = _WORD.sub(word, text)
    return text, count
