"""The detectors redaction runs, all compiled with RE2, whose matching time is linear in the text by
construction (an automaton, no backtracking), whatever the pattern and whatever the input.

Where they come from (docs/security.md, "Redaction"):
- detect-secrets' regex plugins (its `denylist` patterns, read from the installed package, so a new
  release brings its new detectors): AWS, Artifactory, Azure storage, basic auth in URLs, Cloudant,
  Discord, GitHub, GitLab, IBM, JWT, Mailchimp, npm, OpenAI, private key headers, PyPI, SendGrid,
  Slack, SoftLayer, Square, Stripe, Telegram, Twilio. Their few Python-only constructs are rewritten
  to RE2 (`_to_re2`); its public IP detector is left out (an address is not a secret in a chat).
- keyword = value forms, from detect-secrets' keyword list (`password`, `secret`, `token`,
  `api_key`, `account_key`, ...) written as one RE2 pattern (its own regexes use back-references).
- shapes the package lacks: Anthropic/OpenAI `sk-` keys, Hugging Face, DigitalOcean, Databricks,
  Google API keys, Shopify, Engram's `egk_`, Authorization/Bearer headers, whole private key blocks (the
  plugin matches only their first line), passwords in URLs of any scheme case.
High entropy strings are judged in redaction.py with detect-secrets' own entropy measure.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

import re2
from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.plugins.keyword import DENYLIST as KEYWORDS

logger = logging.getLogger(__name__)

OPTIONS = re2.Options()
OPTIONS.max_mem = 64 << 20  # room for the DFA of the larger patterns; past it RE2 falls back to its NFA, still linear
LEFT_OUT = {"IPPublicDetector"}


@dataclass(frozen=True)
class Rule:
    """One detector, and which part of its match is the secret."""

    name: str
    regex: re2._Regexp
    plugin: bool = False  # detect-secrets' own pattern (its groups are not named)
    judge: str = ""  # "prose": the value must look like a key, not a word; "reference": not `$X`, `<x>`, `...`

    def span(self, m: re2._Match) -> tuple[int, int]:
        """A plugin's secret is its last group that matched, unless that group opens the match (as
        GitHub's `ghp`): then, as for a rule of ours without a `secret` group, the whole match."""
        if not self.plugin:
            secret = self.regex.groupindex.get(b"secret")
            return m.span(secret) if secret is not None and m.start(secret) >= 0 else m.span()
        for group in range(self.regex.groups, 0, -1):
            start, end = m.span(group)
            if start >= 0:
                return (start, end) if start > m.start() else m.span()
        return m.span()


def _compile(name: str, pattern: str, plugin: bool = False, judge: str = "") -> Rule:
    return Rule(name, re2.compile(pattern.encode(), options=OPTIONS), plugin, judge)


# Python-only constructs in detect-secrets' patterns, and their RE2 stand-ins. Each stand-in matches
# at least what the original does (a lookaround dropped widens a match by nothing but its context).
_REWRITES = (
    (re.compile(r"\(\?:\(\?<=\\W\)\|\(\?<=\^\)\)"), ""),  # after a non-word character or at the start
    (re.compile(r"\(\?![^()]*\)"), ""),  # not followed by a word character, or by one of a class
    (re.compile(r"\{(\d+),(\d{4,})\}"), r"{\1,1000}"),  # RE2 counts repetitions up to 1000
)


def _to_re2(pattern: re.Pattern[str]) -> str:
    text = pattern.pattern
    for old, new in _REWRITES:
        text = old.sub(new, text)
    flags = "i" if pattern.flags & re.IGNORECASE else ""
    return f"(?{flags}:{text})" if flags else text


def plugin_rules() -> tuple[list[Rule], list[str]]:
    """detect-secrets' regex detectors that RE2 compiles, and the names of those it refused."""
    rules: list[Rule] = []
    refused: list[str] = []
    classes: list[type[Any]] = sorted(get_mapping_from_secret_type_to_class().values(), key=lambda c: c.__name__)
    for cls in classes:
        denylist = getattr(cls, "denylist", None)
        if cls.__name__ in LEFT_OUT or not denylist:
            continue
        for i, pattern in enumerate(denylist):
            name = f"detect_secrets.{cls.__name__}.{i}"
            try:
                rules.append(_compile(name, _to_re2(pattern), plugin=True))
            except re2.error:
                refused.append(name)
    if refused:
        logger.warning("secret detectors RE2 cannot compile are not used", extra={"detectors": refused})
    return rules, refused


# detect-secrets' keywords (lower case regex fragments: api_?key, password, secret, ...) and a few the
# plain-text scan needs: header, token and credential names, and `api-key`.
EXTRA_KEYWORDS = ("authorization", "token", "credential", "api[_.-]?key", "access_?key")
_KEYWORD = "|".join((*KEYWORDS, *EXTRA_KEYWORDS))
# A keyword inside an identifier (DB_PASSWORD, SecretAccessKey, X_API_KEY), an optional closing quote
# or bracket, and an assignment (= : := => ==): RE2 finds these heads (no groups, so its DFA alone
# does it); the value after one is read by redaction.py within a bounded window.
KEYWORD_HEAD = rf"(?i)(?:{_KEYWORD})\w*[\]'\"]{{0,2}}[ \t]*(?::=|=>|==|=|:)[ \t]*"

OWN: tuple[tuple[str, str], ...] = (
    (
        "private_key_block",
        r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----(?s:.*?)"
        r"(?:-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----|\z)",
    ),
    (
        "authorization",
        r"(?i)\bauthorization[ \t]*[:=][ \t]*(?:(?:bearer|basic|token)[ \t]+)?(?P<secret>[\w.~+/=-]{8,})",
    ),
    ("bearer", r"(?i)\bbearer[ \t]+(?P<secret>[\w.~+/-]{8,}=*)"),
    ("anthropic_openai_key", r"\b(?:sk|pk|rk)-(?:ant-|proj-|live-|test-|svcacct-|admin-)?[\w-]{16,}"),
    ("stripe_key", r"\b(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"),
    ("github_token", r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,})"),
    ("gitlab_token", r"\bgl[a-z]{2,6}-[\w-]{20,}"),
    ("shopify_token", r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"),
    ("npm_token", r"\bnpm_[A-Za-z0-9]{30,}"),
    ("pypi_token", r"\bpypi-[\w-]{40,}"),
    ("huggingface_token", r"\bhf_[A-Za-z0-9]{30,}"),
    ("digitalocean_token", r"\bdo[opr]_v1_[a-f0-9]{64}"),
    ("databricks_token", r"\bdapi[a-f0-9]{32}(?:-\d)?"),
    ("slack_token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    ("google_key", r"\bAIza[\w-]{35}"),
    ("aws_access_key", r"\b(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[0-9A-Z]{16}\b"),
    ("engram_key", r"\begk_[a-z0-9]{12}_[\w-]{20,}"),
    ("jwt", r"\beyJ[\w-]{8,}\.[\w-]{8,}\.[\w-]{8,}"),
    ("url_password", r"(?i)\b[a-z][a-z0-9+.-]{0,30}://[^\s:/@]{0,200}:(?P<secret>[^\s@/]{1,200})@"),
)


JUDGE = {"authorization": "prose", "bearer": "prose", "url_password": "reference"}


def own_rules() -> list[Rule]:
    return [_compile(name, pattern, judge=JUDGE.get(name, "")) for name, pattern in OWN]
