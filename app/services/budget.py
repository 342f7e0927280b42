"""An answer's room: how many of its items, best first, fit in the tokens its caller gives it.

A model reads every answer into its context window, so a caller may say how much of it an answer
may take (`max_tokens`). Tokens are counted as UTF-8 bytes ÷ 4: no tokenizer of the models that
read Engram's answers installs offline from a registry, and bytes ÷ 4 is what a reader can check
(docs/tools.md, "Answers"). The services decide what is left out (they know the order and write the
cursor that fetches the rest); the transport says how large each item is as it will print it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

BYTES_PER_TOKEN = 4
# Bytes of an answer kept for what is not an item: its first line and its last (what was left out,
# the cursor that fetches it, notices). A signed cursor is about 80 bytes.
FRAME_BYTES = 320
CUT = "…[+{} chars]"  # the visible marker of a shortened text

T = TypeVar("T")


def tokens(text: str) -> int:
    """The tokens `text` counts for, by the rule above."""
    return -(-len(text.encode()) // BYTES_PER_TOKEN)


@dataclass(frozen=True, slots=True)
class Budget:
    """At most `max_tokens` of an answer's text. `sizes` says how many bytes each item adds to the
    text, in order (an item's size may depend on the items before it, e.g. a heading printed once)."""

    max_tokens: int
    sizes: Callable[[Sequence[Any]], Sequence[int]]

    @property
    def room(self) -> int:
        """Bytes the items may take."""
        return max(self.max_tokens * BYTES_PER_TOKEN - FRAME_BYTES, 64)

    def fit(self, items: Sequence[T]) -> int:
        """How many leading items fit."""
        total = 0
        for n, size in enumerate(self.sizes(items)):
            total += size
            if total > self.room:
                return n
        return len(items)

    def take(self, items: Sequence[T], text: Callable[[T], str], shorten: Callable[[T, str], T]) -> list[T]:
        """The leading items that fit; when not even the first does, the first with the longest
        shortening of its text that fits, ending in a visible marker of how much was cut (at the
        least, the marker alone: an answer with items shows one)."""
        n = self.fit(items)
        if n or not items:
            return list(items[:n])
        # Found by trying, since an item may print shorter than its text (a listing clips a long
        # description): a handful of sizes, by bisection.
        whole = text(items[0])
        low, high, best = 0, len(whole.encode()), shorten(items[0], clip(whole, 0))
        while low <= high:
            mid = (low + high) // 2
            item = shorten(items[0], clip(whole, mid))
            if self.fit([item]):
                best, low = item, mid + 1
            else:
                high = mid - 1
        return [best]


def clip(text: str, max_bytes: int) -> str:
    """`text` in at most `max_bytes` UTF-8 bytes (never splitting a character), with the marker of
    what was cut when anything was."""
    data = text.encode()
    if len(data) <= max_bytes:
        return text
    keep = max(max_bytes - len(CUT.format(len(text))) - 1, 0)
    head = data[:keep].decode(errors="ignore")
    return head + CUT.format(len(text) - len(head))
