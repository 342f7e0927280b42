"""The write path's decisions (`Writer.plan`), made from the stored rows a batch matches before
anything is written: no database needed (the writes themselves are tested through the tools and
imports in test_native_tools.py and test_transfer.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

from app.services.writer import EntityIn, FactIn, OnExisting, Writer, Written
from app.store.database import Tx
from app.store.entities import EntityRow, Stamps
from tests.support.rows import entity_row

NOW = datetime(2026, 11, 28, tzinfo=UTC)


def _row(
    name: str, *, id_: str = "11111111-1111-4111-8111-111111111111", deleted: bool = False, **given: Any
) -> EntityRow:
    """Ada as stored before this batch: version 3, a property, written by someone else."""
    stored: dict[str, Any] = {
        "gid": "844424930131969",
        "name_key": name.lower(),
        "properties": {"team": "a"},
        "version": 3,
        "created_at": NOW,
        "updated_at": NOW,
        "created_by": "someone",
        "updated_by": "someone",
        "deleted_at": NOW if deleted else None,
    }
    return entity_row(name, id_, **(stored | given))


def _writer(on_existing: OnExisting = "merge", origin: str | None = None) -> Writer:
    return Writer(cast(Tx, None), "alice", on_existing, origin=origin)  # planning reads no transaction


def test_a_new_name_is_created_with_its_facts_and_aliases() -> None:
    item = EntityIn("Ada", {"type": "person"}, [FactIn("wrote the first program")], aliases=["Countess"])
    plan = _writer(origin="engram").plan([item], {}, {})
    [new] = plan.new
    assert (new.name, new.type) == ("Ada", "person")
    assert [f.text for f in plan.facts] == ["wrote the first program"]
    assert [(e.entity_id, e.action, e.changes) for e in plan.events] == [
        (new.id, "created", {"name": "Ada", "type": "person", "import": "engram"})
    ]
    assert plan.aliases == [(new.id, "Countess")]
    assert plan.decisions == [Written("created", new.id, 1)]
    assert not plan.updates and not plan.changed


def test_a_stored_name_is_merged_field_by_field() -> None:
    row = _row("Ada")
    item = EntityIn("Ada", {"description": "mathematician", "properties": {"born": 1815}}, [FactIn("a fact")])
    plan = _writer().plan([item], {}, {"Ada": row})
    [update] = plan.updates
    assert update.description == "mathematician"
    assert update.properties == {"team": "a", "born": 1815}  # properties merge into the stored ones
    [event] = plan.events
    assert (event.action, set(event.changes)) == ("updated", {"description", "properties"})
    assert plan.changed == {row.id}
    assert [(f.entity_id, f.text) for f in plan.facts] == [(row.id, "a fact")]
    # `unchanged` until the writes move the entity's version (then `updated`)
    assert plan.decisions == [Written("unchanged", row.id, 3)]
    assert not plan.new


def test_the_same_fields_change_nothing_but_facts_still_go_in() -> None:
    row = _row("Ada")
    plan = _writer().plan([EntityIn("Ada", {"type": "person"}, [FactIn("x")])], {}, {"Ada": row})
    assert not plan.updates and not plan.events and not plan.changed
    assert len(plan.facts) == 1


def test_on_existing_skip_and_error_decide_without_writing() -> None:
    row = _row("Ada")
    item = EntityIn("Ada", {"description": "new"}, [FactIn("x")], aliases=["A"])
    for on_existing, status, why in (("skip", "skipped", "exist"), ("error", "conflict", "entity 'Ada' exists")):
        plan = _writer(on_existing).plan([item], {}, {"Ada": row})
        assert plan.decisions == [Written(status, row.id, 3, why=why)]
        assert not (plan.new or plan.updates or plan.facts or plan.events or plan.aliases)


def test_a_files_id_wins_over_the_name_and_renames() -> None:
    by_id = _row("Ada Lovelace", id_="22222222-2222-4222-8222-222222222222")
    other = _row("Ada")
    plan = _writer().plan([EntityIn("Ada", {}, id=by_id.id)], {by_id.id: by_id}, {"Ada": other})
    # another live entity holds the name: the rename would clash
    assert plan.decisions == [Written("conflict", by_id.id, 3, why="another entity is named 'Ada'")]
    plan = _writer().plan([EntityIn("Ada L.", {}, id=by_id.id)], {by_id.id: by_id}, {})
    assert [e.changes["name"] for e in plan.events] == [["Ada Lovelace", "Ada L."]]


def test_a_deleted_entity_and_a_live_record_are_not_merged() -> None:
    gone = _row("Ada", deleted=True)
    plan = _writer().plan([EntityIn("Ada", {}, id=gone.id)], {gone.id: gone}, {})
    assert plan.decisions == [Written("skipped", gone.id, 3, why="deleted here, live in the file")]


def test_a_deleted_record_keeps_what_it_was_merged_into() -> None:
    eid = "33333333-3333-4333-8333-333333333333"
    item = EntityIn("Old", {}, [FactIn("x")], id=eid, stamps=Stamps(deleted_at=NOW), merged_into="s")
    plan = _writer().plan([item], {}, {"Old": _row("Old")})  # a live namesake is not it: matched by id only
    assert plan.merged_into == [(eid, "s")]
    assert [(f.entity_id, f.live) for f in plan.facts] == [(eid, False)]  # a deleted entity's facts count for no quota
    assert plan.decisions == [Written("created", eid, 1)]
