"""An answer's room: how many of its items, best first, fit in the tokens its caller gives it.

A model reads every answer into its context window, so a caller may say how much of it an answer
may take (`max_tokens`). Tokens are counted as UTF-8 bytes ÷ 4: no tokenizer of the models that
read Engram's answers installs offline from a registry, and bytes ÷ 4 is what a reader can check
(docs/tools.md, "Answers").

Three parties, each saying what only it knows: the services decide what is left out (they know
the order, and write the cursor that fetches the rest); the form an answer prints in
(app/answers/form.py) measures each item as it prints it; and each item says how it may be cut
(`Clip`), for when not even the first one fits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Generic, Protocol, Self, TypeVar

from pydantic import BaseModel

BYTES_PER_TOKEN = 4
# Bytes of an answer kept for what is not an item: its first line and its last (what was left out,
# the cursor that fetches it, notices). A signed cursor is about 80 bytes.
FRAME_BYTES = 320
CUT = "…[+{} chars]"  # the visible marker of a shortened text


def tokens(text: str) -> int:
    """The tokens `text` counts for, by the rule above."""
    return byte_tokens(len(text.encode()))


def byte_tokens(size: int) -> int:
    """The tokens `size` bytes of UTF-8 count for."""
    return -(-size // BYTES_PER_TOKEN)


class Clip(Protocol):
    """An item a budget may shorten: the text it cuts, and the item with that text shortened."""

    def clip_text(self) -> str: ...

    def clipped(self, text: str) -> Self: ...


class Clipped(BaseModel):
    """A model that is a `Clip` by one of its fields, `clip_field`: a text, or a model that is a `Clip`
    itself (a neighbour is cut by its entity). None named: it is never shortened."""

    clip_field: ClassVar[str] = ""

    def clip_text(self) -> str:
        value = getattr(self, self.clip_field) if self.clip_field else None
        return value.clip_text() if isinstance(value, Clipped) else value or ""

    def clipped(self, text: str) -> Self:
        if not self.clip_field:
            return self
        value = getattr(self, self.clip_field)
        return self.model_copy(update={self.clip_field: value.clipped(text) if isinstance(value, Clipped) else text})


C = TypeVar("C", bound=Clip)


@dataclass(frozen=True, slots=True)
class Budget(Generic[C]):
    """At most `max_tokens` of an answer's text, of which `frame` bytes are kept for what is not an
    item. `sizes` says how many bytes each item adds to the text, in order (an item's size may
    depend on the items before it, e.g. a heading printed once): a form's measure."""

    max_tokens: int
    sizes: Callable[[Sequence[C]], Sequence[int]]
    frame: int = FRAME_BYTES

    @property
    def room(self) -> int:
        """Bytes the items may take."""
        return max(self.max_tokens * BYTES_PER_TOKEN - self.frame, 64)

    def fit(self, items: Sequence[C]) -> int:
        """How many leading items fit."""
        total = 0
        for n, size in enumerate(self.sizes(items)):
            total += size
            if total > self.room:
                return n
        return len(items)

    def take(self, items: Sequence[C]) -> list[C]:
        """The leading items that fit; when not even the first does, the first with the longest
        shortening of its text that fits, ending in a visible marker of how much was cut (at the
        least, the marker alone: an answer with items shows one)."""
        n = self.fit(items)
        if n or not items:
            return list(items[:n])
        # Found by trying, since an item may print shorter than its text (a listing clips a long
        # description): a handful of sizes, by bisection.
        first = items[0]
        whole = first.clip_text()
        low, high, best = 0, len(whole.encode()), first.clipped(clip(whole, 0))
        while low <= high:
            mid = (low + high) // 2
            item = first.clipped(clip(whole, mid))
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
