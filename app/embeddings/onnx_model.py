"""A sentence-embedding model in a directory of its own, on ONNX Runtime: the `local` provider when
ENGRAM_EMBEDDING_MODEL names such a directory (docs/search.md, "Stronger models: candidates").

The directory holds the model's ONNX graph (`model.onnx`, a BERT-like encoder whose first output is
each token's last hidden state), its `tokenizer.json`, and `engram-model.json`, which says what
the graph leaves to its caller: the pooling the model was trained with (`cls`: the first token's
state; `mean`: the mean of the states under the attention mask), the prefixes it was trained to
see before a query and before a stored text, and its window in tokens. Vectors are scaled to
length 1. scripts/candidate-models.py writes such directories from pinned wheels.

A model with prefixes is `asymmetric`: a query is embedded with the query prefix, every other
text with the text prefix. Batching, threads and the embedding pool are the local provider's
(local.py); only the graph and what surrounds it differ.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from app.embeddings.local import Encoder, LocalModel, session_options
from app.embeddings.provider import EmbeddingError

MANIFEST = "engram-model.json"
GRAPH = "model.onnx"
TOKENIZER = "tokenizer.json"


@dataclass(frozen=True, slots=True)
class Card:
    """What engram-model.json says about a model directory."""

    name: str
    kind: Literal["embedding", "reranker"]
    pooling: Literal["cls", "mean"] = "cls"
    query_prefix: str = ""
    text_prefix: str = ""
    max_tokens: int = 512

    @classmethod
    def read(cls, directory: Path, kind: str) -> Card:
        """The directory's card, checked: its files are there and it is a model of `kind`."""
        missing = [f for f in (MANIFEST, GRAPH, TOKENIZER) if not (directory / f).is_file()]
        if missing:
            raise EmbeddingError(f"{directory} is not a model directory: {', '.join(missing)} missing")
        try:
            raw = json.loads((directory / MANIFEST).read_text())
            card = cls(
                name=str(raw["name"]),
                kind=raw["kind"],
                pooling=raw.get("pooling", "cls"),
                query_prefix=str(raw.get("query_prefix", "")),
                text_prefix=str(raw.get("text_prefix", "")),
                max_tokens=int(raw.get("max_tokens", 512)),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingError(f"{directory / MANIFEST} is not readable: {exc}") from exc
        if card.kind != kind or card.pooling not in ("cls", "mean") or not 8 <= card.max_tokens <= 8192:
            raise EmbeddingError(f"{directory / MANIFEST} does not describe an {kind} model Engram can run")
        return card


def is_model_directory(model: str | None) -> bool:
    """Whether `model` names a directory of this kind (rather than a model of the bundled architecture)."""
    return model is not None and (Path(model) / MANIFEST).is_file()


def tokenizer(directory: Path, max_tokens: int) -> Any:
    """The directory's tokenizer, cutting at `max_tokens`, padding nothing (runs pad themselves)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(directory / TOKENIZER))
    tok.enable_truncation(max_tokens)
    tok.no_padding()
    return tok


def inference_session(directory: Path, threads: int) -> Any:
    import onnxruntime as ort

    return ort.InferenceSession(str(directory / GRAPH), session_options(threads), providers=["CPUExecutionProvider"])


def padded(ids: list[list[int]], types: list[list[int]] | None = None) -> dict[str, Any]:
    """A run's inputs: the sequences padded to the longest, their attention mask and token types."""
    import numpy as np

    width = max(map(len, ids))
    batch = np.zeros((len(ids), width), dtype=np.int64)
    mask = np.zeros((len(ids), width), dtype=np.int64)
    kinds = np.zeros((len(ids), width), dtype=np.int64)
    for row, seq in enumerate(ids):
        batch[row, : len(seq)] = seq
        mask[row, : len(seq)] = 1
        if types is not None:
            kinds[row, : len(seq)] = types[row]
    return {"input_ids": batch, "attention_mask": mask, "token_type_ids": kinds}


class OnnxSession:
    """A loaded model directory: texts in, unit vectors out (numpy), on the calling thread."""

    def __init__(self, directory: Path, card: Card, threads: int) -> None:
        self._card = card
        self._session = inference_session(directory, threads)
        self._inputs = {i.name for i in self._session.get_inputs()}
        self._tokenizer = tokenizer(directory, card.max_tokens)
        self.dimensions = int(self._session.get_outputs()[0].shape[-1])

    def token_ids(self, texts: list[str], query: bool = False) -> list[list[int]]:
        prefix = self._card.query_prefix if query else self._card.text_prefix
        return [e.ids for e in self._tokenizer.encode_batch([prefix + t for t in texts])]

    def run(self, ids: list[list[int]]) -> Any:
        """Unit vectors of these token sequences, pooled as the model was trained."""
        import numpy as np

        feed = {k: v for k, v in padded(ids).items() if k in self._inputs}
        states = self._session.run(None, feed)[0]
        if self._card.pooling == "cls":
            pooled = states[:, 0]
        else:
            mask = feed["attention_mask"][..., None].astype(np.float32)
            pooled = (states * mask).sum(axis=1) / mask.sum(axis=1)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return pooled / np.maximum(norms, 1e-12)


class OnnxModel(LocalModel):
    """The local provider running a model directory (engram-model.json beside its graph); its vectors
    are stored under the name the card gives."""

    def __init__(self, directory: str, **options: Any) -> None:
        super().__init__(directory, **options)
        self._directory = Path(directory)
        self._card = Card.read(self._directory, "embedding")
        self.model = self._card.name
        self.asymmetric = bool(self._card.query_prefix or self._card.text_prefix)

    def _files(self) -> Path:
        return self._directory

    def _open(self, files: Path) -> Encoder:
        return OnnxSession(files, self._card, self._threads)
