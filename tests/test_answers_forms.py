"""The forms of the answers a budget cuts (app/answers/form.py), without a server: each item is
measured as it prints, a budget keeps what fits its tokens and shortens what alone does not, and a
tool that takes `max_tokens` cannot be registered without a form.

What every read tool answers through a real server, byte for byte: tests/test_answers_same.py.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from app.answers import entities, graph, recall, search
from app.answers.brief import BRIEF
from app.answers.form import Form
from app.mcp.toolset import READ_ONLY, ToolSet
from app.services import models
from app.services.budget import BYTES_PER_TOKEN, FRAME_BYTES, tokens
from app.services.hook_models import Brief
from app.services.recall_models import Episode, EpisodePage, Fact, RecallResult, RecallScores
from app.services.search_models import Match, Scores, SearchHit, SearchResult

AT = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
LONG = "Ada wrote the first program — «Note G» — for Bernoulli numbers. " * 40


def _entity(name: str, description: str = "") -> models.EntitySummary:
    return models.EntitySummary(id=f"id-{name}", name=name, type="person", description=description)


def _relation(a: str, b: str, notes: str | None = None) -> models.Relation:
    return models.Relation.model_validate(
        {"id": f"r-{a}-{b}", "type": "knows", "from": a, "to": b, "from_id": f"id-{a}", "to_id": f"id-{b}"}
        | {"notes": notes}
    )


def _fact(text: str, who: str = "Ada") -> Fact:
    ref = {"id": f"id-{who}", "name": who, "type": "person"}
    scores = RecallScores(fused=0.5)
    return Fact.model_validate({"kind": "observation", "text": text, "entity": ref, "valid_from": AT, "scores": scores})


def _relation_fact(notes: str) -> Fact:
    ends = [{"id": f"id-{n}", "name": n, "type": "person"} for n in ("Ada", "Grace")]
    relation = {"id": "r-1", "type": "knows", "notes": notes}
    fields = {"kind": "relation", "text": "Ada knows Grace", "entity": ends[0], "to": ends[1], "relation": relation}
    return Fact.model_validate(fields | {"valid_from": AT, "scores": RecallScores(fused=0.5)})


def _episode(n: int, text: str) -> Episode:
    return Episode(id=n, text=text, at=AT, created_by="dev", created_at=AT, source=f"D{n}")


def _whole_entity() -> models.Entity:
    records = [models.ObservationRecord(text=t, created_by="dev", created_at=AT) for t in ("paints", LONG, "sings")]
    entry = models.HistoryEntry(id=1, at=AT, actor="dev", action="updated", entity_id="id-Ada", changes={"x": [1, 2]})
    return models.Entity.model_validate(
        _entity("Ada", LONG).model_dump()
        | {"observations": [r.text for r in records], "observations_total": 5, "observation_records": records}
        | {"version": 2, "created_at": AT, "updated_at": AT, "created_by": "dev", "updated_by": "dev"}
        | {"relations": [_relation("Ada", "Grace", LONG)], "history": [entry]}
    )


def _hit(name: str, text: str) -> SearchHit:
    return SearchHit(entity=_entity(name, LONG), match=Match(kind="observation", text=text), scores=Scores(fused=1))


def _walk() -> models.NeighborsResult:
    near = [
        models.Neighbor(entity=_entity(b, LONG if b == "Lin" else ""), depth=d, via=_relation(a, b, "met"))
        for a, b, d in (("Ada", "Grace", 1), ("Ada", "Lin", 1), ("Grace", "Tomás", 2))
    ]
    return models.NeighborsResult(start=_entity("Ada", LONG), neighbors=near, truncated=False)


RESULTS: list[tuple[Form[Any, Any], Any]] = [
    (recall.RECALL, RecallResult(mode="hybrid", facts=[_fact("paints"), _fact(LONG), _fact("keeps bees", "Grace")])),
    (recall.RECALL, RecallResult(mode="hybrid", facts=[_relation_fact(LONG), _fact("paints")])),
    (recall.EPISODES, EpisodePage(episodes=[_episode(1, "Hello!"), _episode(2, LONG)])),
    (search.HITS, SearchResult(mode="hybrid", hits=[_hit("Ada", "paints"), _hit("Grace", LONG)])),
    (entities.ENTITY, _whole_entity()),
    (graph.NEIGHBORS, _walk()),
    (graph.SUBGRAPH, models.SubgraphResult(entities=[_entity("Ada", LONG)], relations=[], truncated=False)),
    (BRIEF, Brief(heading="Memory:", episodes=[_episode(3, LONG)], facts=[_fact("paints")], facts_heading="About:")),
]


@pytest.mark.parametrize(("form", "result"), RESULTS)
def test_each_item_is_measured_as_it_prints(form: Form[Any, Any], result: Any) -> None:
    """The measure is the bytes of the chunks the printer prints, each found in the text in order."""
    items = form.items(result)
    chunks = form.chunks(items)
    assert form.sizes(items) == [len(c.encode()) for c in chunks]
    printed, at = form(result), 0
    for chunk in filter(None, chunks):
        at = printed.index(chunk.rstrip("\n"), at) + len(chunk.rstrip("\n"))
    assert sum(form.sizes(items)) <= len(printed.encode()) + 1


@pytest.mark.parametrize(("form", "result"), RESULTS)
@pytest.mark.parametrize("max_tokens", [200, 300, 1000])
def test_a_budget_keeps_what_fits_and_shortens_a_first_item_too_large(
    form: Form[Any, Any], result: Any, max_tokens: int
) -> None:
    items = form.items(result)
    budget = form.budget(max_tokens, "concise")
    kept = budget.take(items)
    assert kept, "an answer with items shows one"
    assert sum(form.sizes(kept)) <= max_tokens * BYTES_PER_TOKEN - FRAME_BYTES - form.reserve
    if budget.fit(items) == 0:
        assert "…[+" in kept[0].clip_text()
    else:
        assert kept == list(items[: len(kept)])


def test_the_full_form_measures_each_record_as_json() -> None:
    budget = recall.RECALL.budget(200, "full")
    facts = [_fact("paints"), _fact(LONG)]
    assert budget.take(facts) == facts[:1]
    assert budget.sizes(facts)[0] == len(facts[0].model_dump_json(exclude_none=True)) + 1


def test_tokens_are_utf8_bytes_over_four() -> None:
    assert tokens("abcd") == 1 and tokens("abcde") == 2 and tokens("記") == 1 and tokens("記憶") == 2


def test_a_tool_that_takes_max_tokens_needs_a_form() -> None:
    tool = ToolSet(tenant_claims=["tenant"])

    async def listing(who: Any, max_tokens: int = 1000) -> Any:
        """A listing."""

    with pytest.raises(ValueError, match="its answer must be a Form"):
        tool("memory:read", READ_ONLY, title="Listing", answer=str)(listing)
    tool("memory:read", READ_ONLY, title="Listing", answer=recall.RECALL)(listing)
    assert [t.name for t in tool.tools] == ["listing"]
