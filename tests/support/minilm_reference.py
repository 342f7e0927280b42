"""all-MiniLM-L6-v2's vectors as sentence-transformers on torch computes them, for a fixed set of
texts: the reference the `local` provider (ONNX Runtime) is checked against where torch is not
installed. Written once by the `sentence-transformers` provider:

    python -m tests.minilm_reference     # needs the `torch` extra; rewrites tests/data/minilm-reference.npz
"""

from __future__ import annotations

import asyncio
import json

from tests.support.server import ROOT

REFERENCE = ROOT / "tests/data/minilm-reference.npz"
# Beside a sample of the relevance texts: the edges of tokenization and truncation.
EDGES = [
    "a",
    "Zürich, São Paulo, Ærøskøbing: naïve café façades",
    "東京の会議は火曜日に行われます",
    "deploys 🚀 on Fridays 🙈 and rolls back on Mondays",
    "   spaces\tand\nnew lines   ",
    "UPPER CASE AND lower case AND MiXeD",
    "word " * 400,  # beyond the model's 256 tokens: cut there
]


def texts() -> list[str]:
    """Every seventh text the server indexes for tests/data/relevance.json, then the edges."""
    from app.store.index import texts_of

    data = json.loads((ROOT / "tests/data/relevance.json").read_text())
    indexed = [
        t for e in data["entities"] for t in texts_of(e["name"], e["type"], e.get("description"), e["observations"])
    ]
    return indexed[::7] + [q["query"] for q in data["queries"]][::7] + EDGES


async def _write() -> None:
    import numpy as np

    from app.embeddings.torch_model import SentenceTransformersModel

    model = SentenceTransformersModel(device="cpu")
    await model.start()
    try:
        fixed = texts()
        vectors = np.array(await model.embed(fixed), dtype=np.float32)
    finally:
        await model.close()
    np.savez_compressed(REFERENCE, texts=np.array(fixed), vectors=vectors)
    print(f"wrote {REFERENCE}: {len(fixed)} texts")


if __name__ == "__main__":
    asyncio.run(_write())
