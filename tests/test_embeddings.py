"""The embedding providers: the real local model (ONNX Runtime) against the vectors
sentence-transformers makes, and the OpenAI-compatible client against an endpoint that serves the
local model's vectors (and fails on request)."""

from __future__ import annotations

import asyncio
import importlib.util
import math
import subprocess
import sys

import pytest

from app.config import Settings
from app.embeddings.embedder import Embedder, ProviderDown
from app.embeddings.factory import create_provider
from app.embeddings.local import LocalModel, batches
from app.embeddings.openai_compat import OpenAICompatible
from app.embeddings.provider import EmbeddingError, InputRejected
from app.embeddings.torch_model import SentenceTransformersModel
from app.lifespan import watch_breaker
from app.observability import metrics
from tests.support.minilm_reference import REFERENCE, texts
from tests.support.server import ROOT


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def openai_settings(url: str, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "embedding_provider": "openai",
        "embedding_model": "all-MiniLM-L6-v2",
        "embedding_dimensions": 384,
        "embedding_base_url": url,
        "embedding_api_key": "sk-test-key",
        "embedding_batch_size": 3,
        "embedding_timeout_seconds": 2,
        "embedding_max_retries": 2,
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


def openai_provider(url: str, **overrides: object) -> OpenAICompatible:
    """The provider `openai_settings(url)` configures, built directly, with `overrides` of its parameters."""
    params: dict[str, object] = {
        "base_url": url,
        "api_key": "sk-test-key",
        "batch_size": 3,
        "timeout_seconds": 2,
        "max_retries": 2,
    }
    params.update(overrides)
    return OpenAICompatible("all-MiniLM-L6-v2", 384, **params)  # type: ignore[arg-type]


async def test_local_model_embeds_meaning(local_model):
    assert local_model.model == "all-MiniLM-L6-v2" and local_model.dimensions == 384
    texts = [
        "the payment service charges credit cards",
        "card transactions are processed by the billing system",
        "my grandmother grows orchids on her windowsill",
    ]
    vectors = await local_model.embed(texts)
    assert [len(v) for v in vectors] == [384] * 3
    assert all(abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-4 for v in vectors)
    assert cosine(vectors[0], vectors[1]) > cosine(vectors[0], vectors[2]) + 0.3


async def test_local_model_batches_keep_order(local_model):
    texts = [f"observation number {i} about topic {i % 3}" for i in range(37)]  # batch size 16: 16 + 16 + 5
    together = await local_model.embed(texts)
    alone = [(await local_model.embed([t]))[0] for t in (texts[0], texts[20], texts[36])]
    for i, v in zip((0, 20, 36), alone, strict=True):
        assert cosine(together[i], v) > 0.9999


async def test_local_model_gives_the_reference_vectors(local_model):
    """The vectors sentence-transformers on torch made for a fixed set of texts (unicode, a text
    beyond the model's 256 tokens among them), stored in tests/data."""
    import numpy as np

    reference = np.load(REFERENCE)
    vectors = np.array(await local_model.embed(reference["texts"].tolist()))
    cosines = (vectors * reference["vectors"]).sum(axis=1)
    assert cosines.min() >= 0.999, f"lowest cosine {cosines.min()}"
    assert cosines.min() >= 0.99999  # as close as float32 arithmetic in another order allows


@pytest.mark.skipif(
    importlib.util.find_spec("sentence_transformers") is None, reason="the `torch` extra is not installed"
)
async def test_local_model_gives_the_vectors_of_sentence_transformers(local_model):
    """Both providers side by side: the same vectors, so stored vectors stay valid across them."""
    reference = SentenceTransformersModel(device="cpu", batch_size=16)
    await reference.start()
    try:
        fixed = texts()
        expected = await reference.embed(fixed)
    finally:
        await reference.close()
    assert reference.model == local_model.model and reference.dimensions == local_model.dimensions
    got = await local_model.embed(fixed)
    assert min(cosine(a, b) for a, b in zip(got, expected, strict=True)) >= 0.999


def test_the_graph_is_what_its_script_writes():
    if importlib.util.find_spec("onnx") is None:
        pytest.skip("the `onnx` package is not installed (it comes with the dev group)")
    check = subprocess.run(
        [sys.executable, str(ROOT / "scripts/minilm-graph.py"), "--check"], capture_output=True, text=True, cwd=ROOT
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_batches_group_similar_lengths_within_bounds():
    lengths = [5, 200, 7, 6, 180, 5, 40]
    runs = batches(lengths, texts_per_run=3, tokens_per_run=400)
    assert sorted(i for run in runs for i in run) == list(range(len(lengths)))  # each text once
    assert runs == [[0, 5, 3], [2, 6], [4, 1]]  # shortest first
    for run in runs:
        assert len(run) <= 3 and len(run) * max(lengths[i] for i in run) <= 400
    assert batches([300, 300], texts_per_run=8, tokens_per_run=100) == [
        [0],
        [1],
    ]  # one text beyond the budget runs alone
    assert batches([], texts_per_run=8) == []


async def test_local_model_embeds_texts_of_every_length_in_order(local_model):
    texts = ["short", "a " * 300, "a medium length text about the billing system", "x", "b " * 120]
    together = await local_model.embed(texts)
    for text, vector in zip(texts, together, strict=True):
        assert cosine(vector, (await local_model.embed([text]))[0]) > 0.9999
    assert await local_model.embed([]) == []


async def test_local_model_refuses_what_it_cannot_run(tmp_path):
    other = LocalModel("sentence-transformers/all-mpnet-base-v2")
    with pytest.raises(EmbeddingError, match="ENGRAM_EMBEDDING_PROVIDER=sentence-transformers"):
        await other.start()
    await other.close()
    wrong = LocalModel(dimensions=768)
    with pytest.raises(EmbeddingError, match="makes 384-d vectors, ENGRAM_EMBEDDING_DIMENSIONS says 768"):
        await wrong.start()
    await wrong.close()
    # A directory whose weights are not of this architecture (one layer's tensors missing).
    import numpy as np

    from app.embeddings.local import bundled_model_dir, map_weights

    bundled = bundled_model_dir()
    assert bundled is not None
    kept = {k: np.array(v) for k, v in map_weights(bundled / "model.safetensors").items() if "layer.5." not in k}
    _write_safetensors(tmp_path / "model.safetensors", kept)
    (tmp_path / "tokenizer.json").write_bytes((bundled / "tokenizer.json").read_bytes())
    broken = LocalModel(str(tmp_path))
    with pytest.raises(EmbeddingError, match=r"cannot load embedding model '.*': .*layer\.5\."):
        await broken.start()
    await broken.close()
    unloaded = LocalModel()
    with pytest.raises(EmbeddingError, match="not loaded"):
        await unloaded.embed(["x"])
    await unloaded.close()


def _write_safetensors(path, tensors) -> None:
    """The safetensors format: header size, JSON header of names, dtypes, shapes and offsets, data."""
    import json
    import struct

    header, offset = {}, 0
    for name, array in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    head = json.dumps(header).encode()
    path.write_bytes(
        struct.pack("<Q", len(head)) + head + b"".join(a.astype("<f4").tobytes() for a in tensors.values())
    )


async def test_local_model_runs_a_directory_of_its_architecture(local_model):
    """A copy of the model under another name (a fine-tuned one would be the same files): another
    model as far as stored vectors go, the same vectors here."""
    from app.embeddings.local import bundled_model_dir

    path = str(bundled_model_dir())
    copy = LocalModel(path)
    await copy.start()
    try:
        assert copy.model == path and copy.dimensions == 384
        text = ["the billing system charges cards"]
        assert cosine((await copy.embed(text))[0], (await local_model.embed(text))[0]) > 0.9999
    finally:
        await copy.close()


def test_providers_by_setting():
    assert isinstance(create_provider(Settings()), LocalModel)  # the default
    chosen = create_provider(Settings(embedding_provider="sentence-transformers", embedding_model="all-MiniLM-L6-v2"))
    assert isinstance(chosen, SentenceTransformersModel) and chosen.model == "all-MiniLM-L6-v2"


async def test_embedder_caches_per_scope_and_text(local_model):
    embedder = Embedder(local_model, cache_size=100)
    first = await embedder.embed(["alpha fact", "beta fact", "alpha fact"], scope="tenant-a")
    assert embedder.embedded == 2 and first[0] == first[2]
    await embedder.embed(["beta fact", "alpha fact"], scope="tenant-a")
    assert embedder.embedded == 2 and embedder.cache_hits == 2
    await embedder.embed(["alpha fact"], scope="tenant-b")  # another tenant's cache
    assert embedder.embedded == 3


async def test_openai_compatible_matches_the_local_model(local_model, embedding_server):
    provider = create_provider(openai_settings(embedding_server.url))
    assert isinstance(provider, OpenAICompatible)
    assert provider.model == "openai:all-MiniLM-L6-v2@384"
    await provider.start()
    try:
        texts = [f"fact {i}: the team ships on Tuesdays" for i in range(7)]
        remote = await provider.embed(texts)
        local = await local_model.embed(texts)
    finally:
        await provider.close()
    assert all(cosine(r, v) > 0.9999 for r, v in zip(remote, local, strict=True))
    sizes = [len(r["body"]["input"]) for r in embedding_server.requests]
    assert sizes == [3, 3, 1]  # batched by ENGRAM_EMBEDDING_BATCH_SIZE
    first = embedding_server.requests[0]
    assert first["headers"]["authorization"] == "Bearer sk-test-key"
    assert first["body"]["encoding_format"] == "float" and "dimensions" not in first["body"]


@pytest.mark.parametrize("status", [429, 503])
async def test_openai_compatible_retries_transient_errors(embedding_server, status):
    provider = openai_provider(embedding_server.url, request_dimensions=True)
    await provider.start()
    embedding_server.failures.extend([status, status])
    try:
        vectors = await provider.embed(["one text"])
    finally:
        await provider.close()
    assert len(vectors) == 1 and len(vectors[0]) == 384
    assert len(embedding_server.requests) == 3  # two failures, then success
    assert embedding_server.requests[-1]["body"]["dimensions"] == 384


async def test_openai_compatible_gives_up_clearly(embedding_server):
    provider = openai_provider(embedding_server.url, max_retries=1)
    await provider.start()
    try:
        embedding_server.failures.append(400)  # the texts refused: not retryable, and not the provider's failure
        with pytest.raises(InputRejected, match="refused the texts: HTTP 400: try later"):
            await provider.embed(["x"])
        assert len(embedding_server.requests) == 1
        embedding_server.failures.append(401)  # the request refused (a bad key): a provider failure
        with pytest.raises(EmbeddingError, match="refused the request: HTTP 401: try later") as refused:
            await provider.embed(["x"])
        assert not isinstance(refused.value, InputRejected) and len(embedding_server.requests) == 2

        embedding_server.down = True  # 503 on every try
        with pytest.raises(EmbeddingError, match=r"after 2 attempt\(s\): HTTP 503"):
            await provider.embed(["x"])
        embedding_server.down = False

        embedding_server.delay = 2.5  # longer than the 2 s timeout
        with pytest.raises(EmbeddingError, match="no answer within 2 s"):
            await provider.embed(["x"], attempts=1)
        embedding_server.delay = 0

        embedding_server.truncate = 100
        with pytest.raises(EmbeddingError, match="returned 100-d vectors"):
            await provider.embed(["x"])
    finally:
        await provider.close()


async def test_openai_compatible_cannot_reach_endpoint():
    from tests.support.server import free_port

    provider = openai_provider(f"http://127.0.0.1:{free_port()}/v1", max_retries=0)
    await provider.start()
    try:
        with pytest.raises(EmbeddingError, match="cannot reach the endpoint"):
            await provider.embed(["x"])
    finally:
        await provider.close()


async def test_embedder_pauses_a_failing_provider(embedding_server):
    provider = openai_provider(embedding_server.url, max_retries=0)
    await provider.start()
    embedder = Embedder(provider, cache_size=10, first_pause=5)  # the next call comes within it, however loaded
    watch_breaker(embedder)  # the metric reads the breaker at each scrape

    def state() -> str:
        sample = metrics.REGISTRY.get_sample_value
        gauge = {s: sample("engram_embedding_breaker_state", {"state": s}) for s in metrics.BREAKER_STATES}
        assert gauge[embedder.breaker] == 1 and sum(v or 0 for v in gauge.values()) == 1
        return embedder.breaker

    try:
        assert state() == "closed"
        embedding_server.down = True
        with pytest.raises(EmbeddingError):
            await embedder.embed(["first"], scope="t")
        assert not embedder.healthy and embedder.seconds_until_retry() > 0
        assert state() == "open" and metrics.REGISTRY.get_sample_value("engram_embedding_breaker_failures") == 1
        asked = len(embedding_server.requests)
        with pytest.raises(ProviderDown):  # fails at once: no request sent during the pause
            await embedder.embed(["second"], scope="t")
        assert len(embedding_server.requests) == asked
        await asyncio.sleep(embedder.seconds_until_retry() + 0.05)
        assert state() == "half_open"  # the next call tries the provider
        embedding_server.down = False
        assert len(await embedder.embed(["third"], scope="t")) == 1
        assert state() == "closed" and metrics.REGISTRY.get_sample_value("engram_embedding_breaker_failures") == 0
    finally:
        await provider.close()


def test_openai_provider_needs_model_and_dimensions():
    with pytest.raises(ValueError, match="needs ENGRAM_EMBEDDING_MODEL"):
        Settings(embedding_provider="openai", embedding_model="text-embedding-3-small")
    assert create_provider(Settings(embedding_provider="none")) is None


async def test_refused_texts_do_not_open_the_breaker(embedding_server):
    embedder = Embedder(openai_provider(embedding_server.url, max_retries=0), cache_size=0)
    await embedder.provider.start()
    try:
        embedding_server.max_chars = 10
        with pytest.raises(InputRejected):
            await embedder.embed(["far longer than ten characters"], scope="hostile")
        assert embedder.healthy and embedder.seconds_until_retry() == 0  # one caller's input, not an outage
        assert len(await embedder.embed(["short"], scope="other")) == 1
        embedding_server.down = True
        with pytest.raises(EmbeddingError):
            await embedder.embed(["short too"], scope="other")
        assert not embedder.healthy  # a provider failure does open it
    finally:
        await embedder.provider.close()


async def test_a_preloaded_provider_is_the_one_the_server_gets():
    """`engram serve` begins loading the model before importing the server; the server's indexer
    then takes that provider, loaded, rather than loading another."""
    from app.embeddings import factory

    settings = Settings(embedding_threads=1)
    factory.preload(settings)
    early = factory.create_provider(settings)
    assert isinstance(early, LocalModel)
    await early.start()
    try:
        assert early.dimensions == 384 and len((await early.embed(["x"]))[0]) == 384
        assert factory.create_provider(settings) is not early  # taken once
    finally:
        await early.close()
    factory.preload(settings)
    other = factory.create_provider(Settings(embedding_threads=2))  # other settings: a provider of their own
    taken = factory.create_provider(settings)
    assert isinstance(other, LocalModel) and isinstance(taken, LocalModel) and other is not taken
    for provider in (other, taken):
        await provider.close()
