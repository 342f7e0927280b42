"""Which names a text mentions: the keys (case-folded runs of up to four words) that an entity's
name or alias must equal to be mentioned. Names are matched whole, as written between word breaks;
a possessive ('s) or closing punctuation does not hide one ("Ada's", "Babbage.")."""

from __future__ import annotations

import re

MAX_WORDS = 4  # names longer than this are not found in text (they are still found by words)
MAX_KEYS = 12000  # keys per text: a bound on the lookup (an 8,000-character episode stays under it)
_TOKEN = re.compile(r"\S+")
_EDGES = "\"'\u201c\u201d\u2018\u2019()[]{}<>«»,;:!?*"  # quotes (straight and curly), brackets, punctuation


def keys(text: str) -> list[str]:
    """The candidate name keys of `text`, in order of appearance, each once."""
    raw = [t.strip(_EDGES) for t in _TOKEN.findall(text)]
    bare = [_bare(t) for t in raw]
    out: dict[str, None] = {}
    for words in (raw, bare):
        for i in range(len(words)):
            for n in range(1, MAX_WORDS + 1):
                if i + n > len(words):
                    break
                run = words[i : i + n]
                if not run[0] or not run[-1]:
                    continue
                out.setdefault(" ".join(run).casefold(), None)
                if len(out) >= MAX_KEYS:
                    return list(out)
    return list(out)


def _bare(token: str) -> str:
    """A token without a possessive or a closing full stop."""
    for suffix in ("'s", "\u2019s"):
        if token.endswith(suffix):
            token = token[: -len(suffix)]
    return token.rstrip(".")
