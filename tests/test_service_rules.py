"""The services' pure rules, without a database: which entity a reference means, how a batch
folds, cursors, the fusion of rankings, and the entity field list the store and models share."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from app.errors import EngramError
from app.services import models
from app.services.cursors import Cursors
from app.services.entities import _fold, hash_filters
from app.services.filters import EntityFilters, Scope
from app.services.refs import choose
from app.services.search import Query, fused_entities
from app.services.shapes import summary
from app.services.writer import apply
from app.store import entities
from app.store.entities import Candidate, EntityRow
from app.store.rankings import Ranked
from tests.support.rows import entity_row as row

# --- which entity a reference means ----------------------------------------------------------------


def test_an_exact_name_or_id_wins_over_case_insensitive_matches() -> None:
    ada, loud = row("Ada"), row("ADA")
    assert choose(["Ada"], [loud, ada]) == {"Ada": ada}
    assert choose([loud.id], [ada, loud]) == {loud.id: loud}


def test_a_unique_case_insensitive_match_is_taken() -> None:
    ada = row("Ada Lovelace")
    assert choose(["ada lovelace"], [ada]) == {"ada lovelace": ada}


def test_several_case_insensitive_matches_are_ambiguous() -> None:
    a, b = row("Ada"), row("ADA")
    with pytest.raises(EngramError) as caught:
        choose(["ada"], [a, b])
    assert caught.value.code == "ambiguous"
    assert caught.value.message == "'ada' matches several entities by name; use the exact name or id"
    assert caught.value.details == {
        "ref": "ada",
        "candidates": [{"id": r.id, "name": r.name, "type": r.type} for r in (a, b)],
    }


def test_no_match_is_not_found_unless_missing_is_allowed() -> None:
    with pytest.raises(EngramError) as caught:
        choose(["Nobody"], [row("Ada")])
    assert caught.value.code == "not_found"
    assert caught.value.message == "no entity with id or name 'Nobody'"
    assert choose(["Nobody", "Ada"], [row("Ada")], missing_ok=True).keys() == {"Ada"}


def test_exact_references_are_names_matched_exactly() -> None:
    ada = row("Ada")
    with pytest.raises(EngramError) as caught:
        choose(["ada"], [ada], exact=True)
    assert caught.value.code == "not_found"
    with pytest.raises(EngramError):
        choose([ada.id], [ada], exact=True)  # an id is not a name
    assert choose(["Ada"], [ada], exact=True) == {"Ada": ada}


# --- a batch folded by name ------------------------------------------------------------------------


def test_a_batch_folds_by_name_later_fields_win_properties_merge_observations_concatenate() -> None:
    items = [
        models.EntityIn(name="Ada", type="person", observations=["a", "b"], properties={"x": 1, "y": 1}),
        models.EntityIn(name="Bob", type="person"),
        models.EntityIn(name="Ada", type="mathematician", observations=["b", "c"], properties={"y": 2}),
    ]
    folded = _fold(items, "a client")
    assert [m.name for m in folded] == ["Ada", "Bob"]
    assert folded[0].fields == {"type": "mathematician", "properties": {"x": 1, "y": 2}}
    assert [f.text for f in folded[0].facts] == ["a", "b", "c"]  # in order, each once


def test_a_folded_observation_keeps_the_interval_of_the_first_entry_that_gave_it() -> None:
    early, late = datetime(2019, 1, 1, tzinfo=UTC), datetime(2021, 1, 1, tzinfo=UTC)
    items = [
        models.EntityIn(name="Ada", type="person", observations=["a", "b"], valid_from=early),
        models.EntityIn(
            name="Ada",
            type="person",
            observations=["b", "c"],
            valid_from=late,
            valid_until=datetime(2022, 1, 1, tzinfo=UTC),
        ),
    ]
    (ada,) = _fold(items, "a client")
    intervals = {f.text: (f.provenance.valid_from, f.provenance.valid_until) for f in ada.facts}
    assert intervals == {"a": (early, None), "b": (early, None), "c": (late, datetime(2022, 1, 1, tzinfo=UTC))}


def test_applying_fields_merges_properties_and_reports_changes() -> None:
    stored = row("Ada", properties={"x": 1}, area="maths")
    values, changes = apply(stored, {"properties": {"y": 2}, "area": "maths", "topic": "logic"})
    assert values["properties"] == {"x": 1, "y": 2}
    assert changes == {"properties": [{"x": 1}, {"x": 1, "y": 2}], "topic": [None, "logic"]}
    assert set(values) == set(entities.FIELDS)


# --- cursors ---------------------------------------------------------------------------------------


def cursors(max_age: float = 60) -> Cursors:
    return Cursors(max_age, [("cursor", b"k" * 32, 3600.0)])


def test_a_cursor_returns_its_position_to_its_own_tenant_and_listing() -> None:
    c = cursors()
    token = c.encode("tenant-a", "find:name:1", ["Ada", "id"])
    assert c.decode(token, "tenant-a", "find:name:1") == ["Ada", "id"]
    for tenant, listing in (("tenant-b", "find:name:1"), ("tenant-a", "find:name:2")):
        with pytest.raises(EngramError) as caught:
            c.decode(token, tenant, listing)
        assert caught.value.code == "invalid"


def test_an_edited_or_foreign_cursor_is_refused() -> None:
    token = cursors().encode("t", "graph", 5)
    body, _, mac = token.partition(".")
    for bad in (body[:-1] + ("A" if body[-1] != "A" else "B") + "." + mac, token + "x", "x.y"):
        with pytest.raises(EngramError):
            cursors().decode(bad, "t", "graph")
    other = Cursors(60, [("cursor", b"o" * 32, 3600.0)])
    with pytest.raises(EngramError):
        other.decode(token, "t", "graph")


def test_an_old_cursor_expires() -> None:
    token = cursors().encode("t", "graph", 5)
    with pytest.raises(EngramError) as caught:
        cursors(max_age=-1000).decode(token, "t", "graph")
    assert "expired" in caught.value.message


def test_a_listing_fingerprint_depends_on_every_filter() -> None:
    base = EntityFilters(name_contains="a")
    assert hash_filters(base) == hash_filters(EntityFilters(name_contains="a"))
    assert hash_filters(base) != hash_filters(EntityFilters(name_contains="a", area="x"))
    assert Query("q").fingerprint() != Query("q", scope=Scope(types=["person"])).fingerprint()


# --- fusion of rankings ----------------------------------------------------------------------------


def test_fusion_favours_entities_ranked_well_by_several_rankings() -> None:
    rankings = {
        "semantic": [Ranked(1, 0.9, entity_id="a"), Ranked(2, 0.8, entity_id="b")],
        "keyword": [Ranked(3, 1.0, entity_id="b"), Ranked(4, 0.5, entity_id="c")],
    }
    fused = fused_entities(rankings, None)
    assert [c.key for c in fused] == ["b", "a", "c"]
    assert {leg: rank for leg, (rank, _) in fused[0].legs.items()} == {"semantic": 2, "keyword": 1}
    assert {leg: r.doc_id for leg, (_, r) in fused[0].legs.items()} == {"semantic": 2, "keyword": 3}


def test_fusion_scales_first_place_everywhere_to_one_and_drops_weak_hits() -> None:
    rankings = {
        "semantic": [Ranked(1, 1.0, entity_id="a"), Ranked(2, 0.2, entity_id="b")],
        "name": [Ranked(None, 1.0, entity_id="a")],
    }
    fused = fused_entities(rankings, None)
    assert fused[0].key == "a" and fused[0].score == pytest.approx(1.0)
    assert [c.key for c in fused_entities(rankings, 0.5)] == ["a"]


# --- one entity field list -------------------------------------------------------------------------


def test_the_store_row_carries_every_field_the_models_and_writes_use() -> None:
    stored = {f.name for f in dataclasses.fields(EntityRow)}
    assert set(models.EntitySummary.model_fields) <= stored
    assert set(models.Entity.model_fields) - stored == {
        "aliases",
        "observations",
        "observations_total",
        "observation_records",
        "relations",
        "relations_truncated",
        "history",
    }
    assert set(entities.FIELDS) <= stored
    assert entities.COLUMNS.count(",") + 1 == len(stored)


def test_a_summary_reads_the_row() -> None:
    ada = row("Ada", area="maths", certainty=90)
    assert summary(ada).model_dump() == {
        "id": ada.id,
        "name": "Ada",
        "type": "person",
        "description": "",
        "area": "maths",
        "topic": None,
        "subtopic": None,
        "certainty": 90,
    }


# --- aliases and merged ids in the reference rule ----------------------------------------------------


def test_an_alias_is_meant_after_names_and_ids_and_before_case_insensitive_matches() -> None:
    ibm, loud = row("International Business Machines"), row("ibm")
    known = Candidate(ibm, aliases=("IBM",))
    assert choose(["IBM"], [loud, known]) == {"IBM": ibm}  # exact alias
    assert choose(["ibm"], [loud, known]) == {"ibm": loud}  # exact name first
    with pytest.raises(EngramError) as caught:
        choose(["Ibm"], [loud, known])  # names and aliases alike, ignoring case
    assert caught.value.code == "ambiguous"
    assert choose(["iBm"], [known]) == {"iBm": ibm}


def test_the_id_of_a_merged_entity_means_its_survivor() -> None:
    survivor, gone = row("Robert"), row("Bob")
    assert choose([gone.id], [Candidate(survivor, merged_ids=(gone.id,))]) == {gone.id: survivor}


def test_the_dialects_rule_ignores_aliases() -> None:
    ibm = row("International Business Machines")
    assert choose(["IBM"], [Candidate(ibm, aliases=("IBM",))], exact=True, missing_ok=True) == {}
