"""The interface every embedding provider implements (the choice of one from settings: factory.py)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

Vector = list[float]

# What the default local model is called in settings and in the database.
DEFAULT_LOCAL_MODEL = "all-MiniLM-L6-v2"
# The names under which the bundled copy of that model is used (no model hub involved).
BUNDLED_NAMES = frozenset({DEFAULT_LOCAL_MODEL, f"sentence-transformers/{DEFAULT_LOCAL_MODEL}"})


class EmbeddingError(RuntimeError):
    """The provider gave no usable vectors. The message is safe to log (no keys, no texts)."""


class InputRejected(EmbeddingError):
    """The provider refused these texts (too long, too many, malformed): the input's fault, not the
    provider's, so it does not count as a provider failure."""


class Provider(ABC):
    """Turns texts into unit-length vectors of `dimensions` floats, in order.

    `model` names the vectors' space: two providers with the same `model` must produce
    comparable vectors, because it is what each stored vector records as its maker.
    """

    kind: ClassVar[str] = "provider"  # the metrics' `provider` label

    model: str
    dimensions: int
    # Texts per job of the embedding pool (queue.py): a query waits at most for one job per worker.
    job_texts: int = 64
    # Whether a query is embedded unlike a stored text (a model trained with a prefix for each):
    # then queries go through `embed_queries`, and their vectors are cached apart.
    asymmetric: bool = False

    def preload(self) -> None:  # noqa: B027 (optional hook)
        """Begin what `start` does on a thread of its own, before an event loop runs (a local model)."""

    async def start(self) -> None:  # noqa: B027 (optional hook)
        """Load the model or open connections; called once before the first `embed`."""

    @abstractmethod
    async def embed(self, texts: Sequence[str], *, attempts: int | None = None) -> list[Vector]:
        """One vector per text. `attempts` bounds tries of a remote call (default: the settings')."""

    async def embed_queries(self, texts: Sequence[str], *, attempts: int | None = None) -> list[Vector]:
        """One vector per query: the same as `embed` but for an `asymmetric` model."""
        return await self.embed(texts, attempts=attempts)

    async def close(self) -> None:  # noqa: B027 (optional hook)
        """Release what `start` took."""
