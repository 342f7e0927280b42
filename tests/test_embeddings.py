"""The embedding providers: the real local model, and the OpenAI-compatible client against an
endpoint that serves that model's vectors (and fails on request)."""

from __future__ import annotations

import math

import pytest

from app.config import Settings
from app.embeddings.embedder import Embedder, ProviderDown
from app.embeddings.factory import create_provider
from app.embeddings.openai_compat import OpenAICompatible
from app.embeddings.provider import EmbeddingError, InputRejected


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
    from tests.conftest import free_port

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
    embedder = Embedder(provider, cache_size=10)
    try:
        embedding_server.down = True
        with pytest.raises(EmbeddingError):
            await embedder.embed(["first"], scope="t")
        assert not embedder.healthy and embedder.seconds_until_retry() > 0
        asked = len(embedding_server.requests)
        with pytest.raises(ProviderDown):  # fails at once: no request sent during the pause
            await embedder.embed(["second"], scope="t")
        assert len(embedding_server.requests) == asked
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
