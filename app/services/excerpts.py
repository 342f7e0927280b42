"""The part of a long text that answers a question: its sentences that hold the question's words.

A concise recall answer shows a long episode (a message, a chat turn, a note) by this excerpt, the
sentences left out marked `…`, so a budget holds more of the facts that answer; `detail="full"`
has every text whole. Words are compared by their first five letters (a crude stem that serves
English and its inflections), the question's common words left out.
"""

from __future__ import annotations

import re

EXCERPT_CHARS = 120  # a text longer than this is shown by its excerpt (measured: docs/benchmarks.md, "Context")
_SENTENCE = re.compile(r"(?<=[.!?…])\s+|\n+")
_WORD = re.compile(r"\w+")
_COMMON = frozenset(
    _WORD.findall(
        """a an the and or but of to in on at for with from by is are was were be been do does did have has had i
        you he she it we they me him her us them my your his its our their this that these those what when where
        who whom which why how not no so as if then than too very can could would should will just about into over
        after before up down out off again once here there all any both each few more most other some such only
        own same"""
    )
)


def _stems(text: str) -> set[str]:
    return {w[:5] for w in _WORD.findall(text.lower()) if w not in _COMMON}


def excerpt(text: str, question: str, size: int | None = None) -> str | None:
    """The sentences of `text` that hold most of the question's words, in their order, within about
    `size` characters, `…` where sentences were left out; None when the text is short enough whole."""
    size = size or EXCERPT_CHARS
    if len(text) <= size:
        return None
    wanted = _stems(question)
    parts = [p for p in _SENTENCE.split(text.strip()) if p]
    held = [len(_stems(p) & wanted) for p in parts]
    # The sentences holding most of the question's words; when none holds any, the text's beginning.
    order = sorted((i for i in range(len(parts)) if held[i]), key=lambda i: (-held[i], i)) or range(len(parts))
    keep: set[int] = set()
    used = 0
    for i in order:
        if keep and used + len(parts[i]) > size:
            continue
        keep.add(i)
        used += len(parts[i]) + 1
    out: list[str] = []
    last = -1
    for i in sorted(keep):
        if i != last + 1:
            out.append("…")
        out.append(parts[i])
        last = i
    if last != len(parts) - 1:
        out.append("…")
    shown = " ".join(out)
    return shown if len(shown) < len(text) else None
