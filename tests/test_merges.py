"""Merges, aliases and the duplicate finder, through the real server and the SDK's client."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from app.auth.principal import ADMIN, READ, WRITE
from tests.support.client import error_code, ok
from tests.support.transfer import export, summary


async def _seed(c: Any, entities: list[dict[str, Any]]) -> dict[str, str]:
    made = ok(await c.call_tool("upsert_entities", {"entities": entities}))
    return {r["name"]: r["id"] for r in made["results"]}


async def _connect(c: Any, *triples: tuple[str, str, str], **extra: Any) -> None:
    rels = [{"from": a, "type": t, "to": b, **extra} for a, t, b in triples]
    ok(await c.call_tool("connect_entities", {"relations": rels}))


def _edges(entity: dict[str, Any]) -> list[tuple[str, str, str]]:
    return sorted((r["from"], r["type"], r["to"]) for r in entity["relations"])


@pytest.fixture
async def admin(db_settings) -> Any:
    conn = await asyncpg.connect(db_settings.admin_dsn())
    yield conn
    await conn.close()


# --- merge_entities ----------------------------------------------------------------------------------


async def test_merge_folds_duplicates_into_the_survivor(server, tenant):
    async with server.client(tenant, (READ, WRITE, ADMIN)) as c:
        ids = await _seed(
            c,
            [
                {
                    "name": "Robert Smith",
                    "type": "person",
                    "observations": ["o1", "o2"],
                    "properties": {"a": 1, "b": 2},
                },
                {
                    "name": "Bob Smith",
                    "type": "Person",
                    "observations": ["o2", "o3"],
                    "description": "developer",
                    "area": "eng",
                    "properties": {"b": 3, "c": 4},
                },
                {"name": "R. Smith", "type": "person", "observations": ["o4", "o1"]},
                {"name": "Acme", "type": "org"},
                {"name": "Zed", "type": "person"},
            ],
        )
        ok(await c.call_tool("add_aliases", {"name": "Bob Smith", "aliases": ["Bobby"]}))
        await _connect(c, ("Robert Smith", "works at", "Acme"), strength=0.5)
        await _connect(c, ("Bob Smith", "works at", "Acme"), notes="since 2020")
        await _connect(
            c,
            ("R. Smith", "works at", "Acme"),  # a third copy: folded
            ("Acme", "employs", "Bob Smith"),  # re-pointed
            ("Bob Smith", "same as", "Robert Smith"),  # becomes a self-loop
            ("Bob Smith", "knows", "R. Smith"),  # a cycle among the merged: self-loops
            ("R. Smith", "knows", "Bob Smith"),
            ("Zed", "knows", "Bob Smith"),
            ("Zed", "knows", "Robert Smith"),  # Zed's two relations fold into one
        )
        before = ok(await c.call_tool("get_entity", {"name": "Robert Smith"}))

        merged = ok(
            await c.call_tool(
                "merge_entities",
                {
                    "into": "Robert Smith",
                    "merge": ["Bob Smith", ids["R. Smith"]],
                    "expected_version": before["version"],
                },
            )
        )
        assert merged["entity"]["id"] == ids["Robert Smith"]
        assert merged["entity"]["version"] == before["version"] + 1
        assert [m["name"] for m in merged["merged"]] == ["Bob Smith", "R. Smith"]
        assert sorted(merged["aliases_added"]) == ["Bob Smith", "Bobby", "R. Smith"]
        assert merged["aliases_not_kept"] == []
        assert merged["observations_added"] == 2
        assert (merged["relations_moved"], merged["relations_folded"], merged["self_loops_dropped"]) == (1, 3, 3)
        assert merged["property_conflicts"] == ["b"]

        got = ok(await c.call_tool("get_entity", {"name": "Robert Smith"}))
        assert got["observations"] == ["o1", "o2", "o3", "o4"]  # the survivor's first, then each merged one's
        assert got["aliases"] == ["Bob Smith", "Bobby", "R. Smith"]
        assert got["properties"] == {"a": 1, "b": 2, "c": 4}  # the survivor wins on `b`
        assert (got["description"], got["area"], got["type"]) == ("developer", "eng", "person")
        assert _edges(got) == [
            ("Acme", "employs", "Robert Smith"),
            ("Robert Smith", "works at", "Acme"),
            ("Zed", "knows", "Robert Smith"),
        ]
        works = next(r for r in got["relations"] if r["type"] == "works at")
        assert (works["strength"], works["notes"]) == (0.5, "since 2020")  # the kept one, completed by the copy

        # Old names and old ids lead to the survivor; the merged entities no longer exist apart.
        for ref in ({"name": "Bob Smith"}, {"name": "bob smith"}, {"name": "BOBBY"}, {"id": ids["Bob Smith"]}):
            assert ok(await c.call_tool("get_entity", ref))["id"] == ids["Robert Smith"], ref
        listed = ok(await c.call_tool("find_entities", {"types": ["person", "Person"], "sort": "name"}))
        assert [e["name"] for e in listed["entities"]] == ["Robert Smith", "Zed"]
        assert error_code(await c.call_tool("restore_entities", {"ids": [ids["Bob Smith"]]})) == "conflict"

        # History on every entity involved; the audit log has the call.
        mine = ok(await c.call_tool("entity_history", {"name": "Robert Smith"}))["entries"]
        assert mine[0]["action"] == "merged"
        assert mine[0]["changes"]["merged"] == [
            {"id": ids["Bob Smith"], "name": "Bob Smith"},
            {"id": ids["R. Smith"], "name": "R. Smith"},
        ]
        assert {e["entity_id"] for e in mine if e["action"] == "merged_into"} == {ids["Bob Smith"], ids["R. Smith"]}
        for name in ("Bob Smith", "R. Smith"):
            theirs = ok(await c.call_tool("entity_history", {"id": ids[name]}))["entries"]
            assert theirs[0]["action"] == "merged_into"
            assert theirs[0]["changes"]["into"] == {"id": ids["Robert Smith"], "name": "Robert Smith"}
        audit = ok(await c.call_tool("audit_log", {"tool_name": "merge_entities"}))["entries"]
        assert len(audit) == 1 and ids["Bob Smith"] in audit[0]["affected"]

        # The neighbour sees one relation to the survivor.
        zed = ok(await c.call_tool("get_entity", {"name": "Zed"}))
        assert _edges(zed) == [("Zed", "knows", "Robert Smith")]


async def test_merge_tells_each_moved_or_folded_relation_in_the_other_ends_history(client_for, tenant):
    async with client_for(tenant, (READ, WRITE, ADMIN)) as c, client_for(tenant + "-other") as elsewhere:
        ids = await _seed(c, [{"name": n, "type": "t"} for n in ("A", "B", "C", "D")])
        await _connect(
            c,
            ("C", "knows", "A"),  # re-pointed to B
            ("C", "likes", "B"),
            ("C", "likes", "A"),  # becomes a copy of C→B: folded into it
            ("A", "uses", "D"),  # re-pointed, the merged entity at its start; D is deleted by then
            ("A", "same as", "B"),  # a self-loop: dropped
        )
        rel = {
            (r["from"], r["type"], r["to"]): r["id"]
            for r in ok(await c.call_tool("get_entity", {"name": "C"}))["relations"]
        }
        rel.update(
            {
                (r["from"], r["type"], r["to"]): r["id"]
                for r in ok(await c.call_tool("get_entity", {"name": "A"}))["relations"]
            }
        )
        ok(await c.call_tool("remove_entities", {"entities": [ids["D"]]}))
        await _seed(elsewhere, [{"name": "C", "type": "t"}])

        merged = ok(await c.call_tool("merge_entities", {"into": "B", "merge": ["A"]}))
        assert (merged["relations_moved"], merged["relations_folded"], merged["self_loops_dropped"]) == (2, 1, 1)

        into, was = {"id": ids["B"], "name": "B"}, {"id": ids["A"], "name": "A"}
        got = ok(await c.call_tool("get_entity", {"name": "C", "include_history": True}))
        assert {r["id"]: (r["type"], r["to"]) for r in got["relations"]} == {
            rel[("C", "knows", "A")]: ("knows", "B"),  # the same relation, now to the survivor
            rel[("C", "likes", "B")]: ("likes", "B"),
        }
        told = {e["action"]: e for e in got["history"] if e["action"].startswith("relation_")}
        assert told.keys() == {"relation_moved", "relation_folded"}
        moved, folded = told["relation_moved"], told["relation_folded"]
        assert (moved["entity_id"], moved["other_id"], moved["relation_id"]) == (
            ids["C"],
            ids["A"],
            rel[("C", "knows", "A")],
        )
        assert moved["changes"] == {"type": "knows", "from": "C", "to": "A", "merged": was, "into": into}
        assert (folded["entity_id"], folded["other_id"], folded["relation_id"]) == (
            ids["C"],
            ids["A"],
            rel[("C", "likes", "A")],
        )
        assert folded["changes"] == {
            "type": "likes",
            "from": "C",
            "to": "A",
            "merged": was,
            "into": into,
            "folded_into": rel[("C", "likes", "B")],
        }
        assert moved["actor"] == folded["actor"] == got["history"][0]["actor"] != ""

        # The other end may be deleted: its history (by id) tells it too, the merged entity at the start.
        d = ok(await c.call_tool("entity_history", {"id": ids["D"]}))["entries"]
        uses = next(e for e in d if e["action"] == "relation_moved")
        assert (uses["entity_id"], uses["other_id"], uses["relation_id"]) == (
            ids["D"],
            ids["A"],
            rel[("A", "uses", "D")],
        )
        assert (uses["changes"]["from"], uses["changes"]["to"]) == ("A", "D")

        # The merged entity's history shows where its relations went, ending with merged_into; the
        # survivor's holds one `merged` entry, counting the self-loop and naming it.
        a = ok(await c.call_tool("entity_history", {"id": ids["A"]}))["entries"]
        assert a[0]["action"] == "merged_into"
        assert sorted(e["relation_id"] for e in a if e["action"] in ("relation_moved", "relation_folded")) == sorted(
            [rel[("C", "knows", "A")], rel[("C", "likes", "A")], rel[("A", "uses", "D")]]
        )
        b = ok(await c.call_tool("entity_history", {"id": ids["B"]}))["entries"]
        assert b[0]["action"] == "merged" and not any(e["action"].startswith("relation_m") for e in b)
        assert b[0]["changes"]["self_loops_dropped_ids"] == [rel[("A", "same as", "B")]]

        audit = ok(await c.call_tool("audit_log", {"tool_name": "merge_entities"}))["entries"]
        assert {rel[("C", "knows", "A")], rel[("C", "likes", "A")], rel[("A", "uses", "D")]} <= set(
            audit[0]["affected"]
        )

        # Another tenant's entity of the same name is told nothing.
        theirs = ok(await elsewhere.call_tool("entity_history", {"name": "C"}))["entries"]
        assert [e["action"] for e in theirs] == ["created"]


async def test_merge_properties_rule_merged_takes_the_merged_values(client_for, tenant):
    async with client_for(tenant) as c:
        await _seed(
            c,
            [
                {"name": "Keep", "type": "t", "properties": {"k": "survivor", "s": 1}},
                {"name": "First", "type": "t", "properties": {"k": "first", "f": 1}},
                {"name": "Second", "type": "t", "properties": {"k": "second", "f": 2}},
            ],
        )
        merged = ok(
            await c.call_tool(
                "merge_entities", {"into": "Keep", "merge": ["First", "Second"], "properties_rule": "merged"}
            )
        )
        assert merged["property_conflicts"] == ["f", "k"]
        got = ok(await c.call_tool("get_entity", {"name": "Keep"}))
        assert got["properties"] == {"k": "first", "s": 1, "f": 1}


async def test_merges_that_cannot_be_are_refused_and_change_nothing(client_for, tenant, admin):
    async with client_for(tenant) as c:
        ids = await _seed(
            c,
            [{"name": "Ada", "type": "person"}, {"name": "Acme", "type": "org"}, {"name": "Gone", "type": "person"}],
        )
        ok(await c.call_tool("add_aliases", {"name": "Ada", "aliases": ["Countess"]}))
        ok(await c.call_tool("remove_entities", {"entities": ["Gone"]}))
        version = ok(await c.call_tool("get_entity", {"name": "Ada"}))["version"]
        history = await _count_history(admin, tenant)
        cases = [
            ({"into": "Ada", "merge": ["Ada"]}, "invalid"),
            ({"into": "Ada", "merge": ["countess"]}, "invalid"),  # itself, by an alias
            ({"into": ids["Ada"], "merge": ["ADA"]}, "invalid"),
            ({"into": "Ada", "merge": ["Acme"]}, "invalid"),  # another type
            ({"into": "Ada", "merge": ["Gone"]}, "not_found"),  # deleted: restore it first
            ({"into": "Ada", "merge": [ids["Gone"]]}, "not_found"),
            ({"into": "Nobody", "merge": ["Ada"]}, "not_found"),
            (
                {"into": "Ada", "merge": ["Acme"], "allow_type_mismatch": True, "expected_version": version + 1},
                "conflict",
            ),
        ]
        for args, code in cases:
            assert error_code(await c.call_tool("merge_entities", args)) == code, args
        assert await _count_history(admin, tenant) == history
        assert ok(await c.call_tool("get_entity", {"name": "Ada"}))["version"] == version

        merged = ok(
            await c.call_tool("merge_entities", {"into": "Ada", "merge": ["Acme"], "allow_type_mismatch": True})
        )
        assert merged["aliases_added"] == ["Acme"]
        assert ok(await c.call_tool("get_entity", {"name": "Ada"}))["type"] == "person"


async def _count_history(admin: asyncpg.Connection, tenant: str) -> int:
    schema = await admin.fetchval("SELECT schema_name FROM engram.tenants WHERE key = $1", tenant)
    return await admin.fetchval(f"SELECT count(*) FROM {schema}.history")


async def test_merge_bounds_refuse_with_limit(client_for, tenant):
    async with client_for(tenant) as c:
        await _seed(c, [{"name": f"N{i}", "type": "t"} for i in range(22)])
        too_many = {"into": "N0", "merge": [f"N{i}" for i in range(1, 22)]}
        assert error_code(await c.call_tool("merge_entities", too_many)) == "invalid"  # the schema's bound
        big = [
            {"name": f"N{i}", "type": "t", "observations": [f"fact {i} {j}" for j in range(100)]} for i in range(1, 12)
        ]
        ok(await c.call_tool("upsert_entities", {"entities": big[:10]}))
        ok(await c.call_tool("upsert_entities", {"entities": big[10:]}))
        over = {"into": "N0", "merge": [f"N{i}" for i in range(1, 12)]}  # 1,100 observations to move
        assert error_code(await c.call_tool("merge_entities", over)) == "limit"
        assert ok(await c.call_tool("get_entity", {"name": "N1"}))["observations_total"] == 100


# --- aliases -----------------------------------------------------------------------------------------


async def test_aliases_resolve_in_every_lookup_and_stay_unambiguous(client_for, tenant):
    async with client_for(tenant) as c:
        ids = await _seed(c, [{"name": "International Business Machines", "type": "org"}, {"name": "Ada", "type": "p"}])
        ibm = ids["International Business Machines"]
        added = ok(await c.call_tool("add_aliases", {"id": ibm, "aliases": ["IBM", "Big Blue", "ibm "]}))
        assert added["changed"] == ["IBM", "Big Blue"] and added["aliases"] == ["Big Blue", "IBM"]
        again = ok(await c.call_tool("add_aliases", {"id": ibm, "aliases": ["big blue"]}))
        assert again["changed"] == [] and again["unchanged"] == ["big blue"]

        # Refused: another entity's name (any case), another entity's alias (any case), its own name.
        for who, alias in (("Ada", "ibm"), ("Ada", "BIG BLUE"), ("Ada", "international business machines")):
            assert error_code(await c.call_tool("add_aliases", {"name": who, "aliases": [alias]})) == "conflict"
        assert error_code(await c.call_tool("add_aliases", {"id": ibm, "aliases": ["Ada"]})) == "conflict"

        # Exact, then case-insensitive; in reads, writes and walks.
        for ref in ("IBM", "ibm", "Big Blue", "big BLUE"):
            assert ok(await c.call_tool("get_entity", {"name": ref}))["id"] == ibm, ref
        ok(await c.call_tool("append_observations", {"items": [{"entity": "ibm", "observations": ["founded 1911"]}]}))
        ok(
            await c.call_tool(
                "connect_entities", {"relations": [{"from": "Ada", "to": "Big Blue", "type": "works at"}]}
            )
        )
        ok(await c.call_tool("update_entity", {"name": "IBM", "changes": {"area": "tech"}}))
        assert ok(await c.call_tool("neighbors", {"entity": "big blue"}))["start"]["id"] == ibm
        got = ok(await c.call_tool("get_entity", {"id": ibm}))
        assert got["observations"] == ["founded 1911"] and got["area"] == "tech"
        assert [r["to"] for r in got["relations"]] == ["International Business Machines"]
        history = ok(await c.call_tool("entity_history", {"name": "IBM"}))["entries"]
        assert any(e["action"] == "aliases_added" and e["changes"] == {"aliases": ["IBM", "Big Blue"]} for e in history)

        # A name created later shadows the alias exactly; ignoring case, both match: ambiguous.
        later = (await _seed(c, [{"name": "ibm", "type": "thing"}]))["ibm"]
        assert ok(await c.call_tool("get_entity", {"name": "ibm"}))["id"] == later
        assert ok(await c.call_tool("get_entity", {"name": "IBM"}))["id"] == ibm
        assert error_code(await c.call_tool("get_entity", {"name": "Ibm"})) == "ambiguous"

        removed = ok(await c.call_tool("remove_aliases", {"id": ibm, "aliases": ["big blue", "never had"]}))
        assert removed["changed"] == ["Big Blue"] and removed["unchanged"] == ["never had"]
        assert removed["aliases"] == ["IBM"]
        assert error_code(await c.call_tool("get_entity", {"name": "Big Blue"})) == "not_found"


async def test_a_deleted_entitys_aliases_stay_reserved_until_removed_by_its_id(client_for, tenant):
    async with client_for(tenant) as c:
        ids = await _seed(c, [{"name": "Old Co", "type": "org"}, {"name": "New Co", "type": "org"}])
        ok(await c.call_tool("add_aliases", {"name": "Old Co", "aliases": ["OC"]}))
        ok(await c.call_tool("remove_entities", {"entities": ["Old Co"]}))
        assert error_code(await c.call_tool("get_entity", {"name": "OC"})) == "not_found"
        assert error_code(await c.call_tool("add_aliases", {"name": "New Co", "aliases": ["oc"]})) == "conflict"
        freed = ok(await c.call_tool("remove_aliases", {"id": ids["Old Co"], "aliases": ["OC"]}))
        assert freed["changed"] == ["OC"] and freed["aliases"] == []
        ok(await c.call_tool("add_aliases", {"name": "New Co", "aliases": ["oc"]}))
        assert ok(await c.call_tool("get_entity", {"name": "OC"}))["id"] == ids["New Co"]


async def test_search_finds_entities_by_alias(client_for, tenant):
    async with client_for(tenant) as c:
        ids = await _seed(c, [{"name": "Ada Lovelace", "type": "person", "observations": ["wrote the first program"]}])
        ok(
            await c.call_tool(
                "add_aliases", {"name": "Ada Lovelace", "aliases": ["Countess of Lovelace", "Enchantress"]}
            )
        )
        for mode in ("keyword", "hybrid"):
            hits = ok(await c.call_tool("search", {"query": "Enchantress", "mode": mode}))["hits"]
            assert hits and hits[0]["entity"]["id"] == ids["Ada Lovelace"], mode
        typo = ok(await c.call_tool("search", {"query": "Enchantres", "mode": "hybrid"}))["hits"]
        assert typo and typo[0]["entity"]["id"] == ids["Ada Lovelace"]
        ok(await c.call_tool("remove_aliases", {"name": "Ada Lovelace", "aliases": ["Enchantress"]}))
        assert ok(await c.call_tool("search", {"query": "Enchantress", "mode": "keyword"}))["hits"] == []


async def _listing(c: Any, sort: str, limit: int, **filters: Any) -> tuple[list[dict[str, Any]], set[int]]:
    """Every page of a find_entities listing, followed through its cursors; and the totals the pages said."""
    args: dict[str, Any] = {"sort": sort, "limit": limit, **filters}
    found, totals = [], set()
    while True:
        page = ok(await c.call_tool("find_entities", args))
        found += page["entities"]
        totals.add(page["total"])
        if not page["next_cursor"]:
            return found, totals
        args["cursor"] = page["next_cursor"]


async def test_find_entities_matches_names_and_aliases_once(client_for, tenant):
    async with client_for(tenant) as c:
        ids = await _seed(
            c,
            [
                {"name": "Robert Smith", "type": "person", "certainty": 90},
                {"name": "Bob Jones", "type": "person", "certainty": 10},
                {"name": "Acme", "type": "org"},
                {"name": "Widgets", "type": "org", "certainty": 50},
                {"name": "Gone Co", "type": "org"},
                {"name": "R. Smith", "type": "person"},
                {"name": "Deal", "type": "offer"},
                {"name": "Other deal", "type": "offer"},
            ],
        )
        ok(await c.call_tool("add_aliases", {"name": "Robert Smith", "aliases": ["Bobby", "Bob S."]}))
        ok(await c.call_tool("add_aliases", {"name": "Bob Jones", "aliases": ["Bobcat"]}))  # name and alias match
        ok(await c.call_tool("add_aliases", {"name": "Acme", "aliases": ["Acme Bobbins Ltd"]}))
        ok(await c.call_tool("add_aliases", {"name": "Gone Co", "aliases": ["Bob's Old Firm"]}))
        ok(await c.call_tool("remove_entities", {"entities": ["Gone Co"]}))
        ok(await c.call_tool("add_aliases", {"name": "Deal", "aliases": ["50%_off"]}))
        ok(await c.call_tool("add_aliases", {"name": "Other deal", "aliases": ["500 off"]}))

        found = ok(await c.call_tool("find_entities", {"name_contains": "BOB", "sort": "name"}))
        assert found["total"] == 3
        assert [(e["name"], e["matched_alias"]) for e in found["entities"]] == [
            ("Acme", "Acme Bobbins Ltd"),
            ("Bob Jones", None),  # its name matched: listed once, no alias named
            ("Robert Smith", "Bob S."),  # the first of its matching aliases in key order
        ]
        # `%` and `_` are characters; other filters apply to alias matches too.
        deal = ok(await c.call_tool("find_entities", {"name_contains": "0%_"}))["entities"]
        assert [(e["name"], e["matched_alias"]) for e in deal] == [("Deal", "50%_off")]
        orgs = ok(await c.call_tool("find_entities", {"name_contains": "bob", "types": ["org"]}))
        assert [e["name"] for e in orgs["entities"]] == ["Acme"] and orgs["total"] == 1

        # A merged entity's old name is the survivor's alias: it finds the survivor, once.
        ok(await c.call_tool("merge_entities", {"into": "Robert Smith", "merge": ["R. Smith"]}))
        merged = ok(await c.call_tool("find_entities", {"name_contains": "r. smi"}))
        assert [(e["id"], e["matched_alias"]) for e in merged["entities"]] == [(ids["Robert Smith"], "R. Smith")]
        smiths = ok(await c.call_tool("find_entities", {"name_contains": "smith"}))
        assert [e["id"] for e in smiths["entities"]] == [ids["Robert Smith"]] and smiths["total"] == 1

        # Paged in every order, a page at a time: each match once, the total on every page.
        names = {"Acme", "Bob Jones", "Robert Smith"}
        for sort in ("name", "recent", "certainty"):
            whole = ok(await c.call_tool("find_entities", {"name_contains": "bob", "sort": sort}))["entities"]
            paged, totals = await _listing(c, sort, 1, name_contains="bob")
            assert [e["id"] for e in paged] == [e["id"] for e in whole], sort
            assert {e["name"] for e in paged} == names and len(paged) == 3 and totals == {3}, sort
        assert [e["name"] for e in whole] == ["Robert Smith", "Bob Jones", "Acme"]  # certainty, unknown last


async def test_find_entities_pages_through_many_alias_matches(client_for, tenant):
    """Name matches and alias matches interleave in every order; paging keeps each exactly once."""
    async with client_for(tenant) as c:
        await _seed(c, [{"name": f"Item {i:02d}", "type": "t", "certainty": i % 7} for i in range(30)])
        for i in range(0, 30, 3):
            ok(await c.call_tool("add_aliases", {"name": f"Item {i:02d}", "aliases": [f"Needle {i}", f"needle b{i}"]}))
        await _seed(c, [{"name": f"Needle entity {i}", "type": "t", "certainty": i} for i in range(5)])
        for sort in ("name", "recent", "certainty"):
            for limit in (1, 4, 50):
                paged, totals = await _listing(c, sort, limit, name_contains="needle")
                ids = [e["id"] for e in paged]
                assert len(ids) == len(set(ids)) == 15 and totals == {15}, (sort, limit)
                assert sum(e["matched_alias"] is not None for e in paged) == 10
        by_name = [e["name"] for e in (await _listing(c, "name", 4, name_contains="needle"))[0]]
        assert by_name == sorted(by_name)


async def test_another_tenants_aliases_never_match(client_for, tenant):
    async with client_for(tenant) as a:
        await _seed(a, [{"name": "Ada", "type": "person"}])
        ok(await a.call_tool("add_aliases", {"name": "Ada", "aliases": ["Countess of Lovelace"]}))
    async with client_for(tenant + "-other") as b:
        await _seed(b, [{"name": "Charles", "type": "person"}])
        ok(await b.call_tool("add_aliases", {"name": "Charles", "aliases": ["Countess impostor"]}))
        found = ok(await b.call_tool("find_entities", {"name_contains": "countess"}))
        assert [(e["name"], e["matched_alias"]) for e in found["entities"]] == [("Charles", "Countess impostor")]
        assert found["total"] == 1
        assert ok(await b.call_tool("find_entities", {"name_contains": "Lovelace"}))["total"] == 0
    async with client_for(tenant) as a:
        found = ok(await a.call_tool("find_entities", {"name_contains": "countess"}))
        assert [(e["name"], e["matched_alias"]) for e in found["entities"]] == [("Ada", "Countess of Lovelace")]
        assert ok(await a.call_tool("find_entities", {"name_contains": "impostor"}))["total"] == 0


async def test_the_dialects_see_no_aliases(server, client_for, tenant):
    async with client_for(tenant) as c:
        await _seed(c, [{"name": "Ada", "type": "person", "observations": ["o1"]}, {"name": "Bob", "type": "person"}])
        ok(await c.call_tool("add_aliases", {"name": "Ada", "aliases": ["Countess"]}))
    async with server.at("memory").client(tenant) as m:
        assert ok(await m.call_tool("open_nodes", {"names": ["Countess"]}))["entities"] == []
        assert ok(await m.call_tool("search_nodes", {"query": "Countess"}))["entities"] == []
        graph = ok(await m.call_tool("read_graph", {}))
        assert graph["entities"] == [
            {"name": "Ada", "entityType": "person", "observations": ["o1"]},
            {"name": "Bob", "entityType": "person", "observations": []},
        ]
        unknown = {"observations": [{"entityName": "Countess", "contents": ["x"]}]}
        assert error_code(await m.call_tool("add_observations", unknown)) == "not_found"
        rel = {"relations": [{"from": "Countess", "to": "Bob", "relationType": "knows"}]}
        assert error_code(await m.call_tool("create_relations", rel)) == "not_found"
    async with client_for(tenant) as c:
        # A merge keeps the old name as an alias: the dialects no longer find it by that name.
        ok(await c.call_tool("merge_entities", {"into": "Ada", "merge": ["Bob"]}))
    async with server.at("memory").client(tenant) as m:
        assert ok(await m.call_tool("open_nodes", {"names": ["Bob"]}))["entities"] == []


# --- find_duplicates -----------------------------------------------------------------------------------


async def test_find_duplicates_proposes_scored_pairs_with_reasons_a_page_at_a_time(client_for, tenant):
    async with client_for(tenant) as c:
        ids = await _seed(
            c,
            [
                {"name": "Acme Corporation", "type": "org"},
                {"name": "Acme Corporaton", "type": "org"},
                {"name": "Globex Industries", "type": "org"},
                {"name": "Globex Industry", "type": "org"},
                {"name": "Initech Software", "type": "org"},
                {"name": "Initech Softwares", "type": "vendor"},
                {"name": "Zebra", "type": "animal"},
                {"name": "Alice", "type": "person"},
                {"name": "Bob", "type": "person"},
            ],
        )
        await _connect(
            c,
            ("Alice", "works at", "Acme Corporation"),
            ("Alice", "works at", "Acme Corporaton"),
            ("Bob", "works at", "Acme Corporation"),
            ("Acme Corporaton", "employs", "Bob"),
        )
        page = ok(await c.call_tool("find_duplicates", {}))
        assert page["next_cursor"] is None and page["scanned"] == 9
        pairs = {frozenset((p["a"]["name"], p["b"]["name"])): p for p in page["pairs"]}
        assert set(pairs) == {
            frozenset(("Acme Corporation", "Acme Corporaton")),
            frozenset(("Globex Industries", "Globex Industry")),
            frozenset(("Initech Software", "Initech Softwares")),
        }
        acme = pairs[frozenset(("Acme Corporation", "Acme Corporaton"))]
        kinds = {r["kind"]: r for r in acme["reasons"]}
        assert kinds["name"]["similarity"] >= 0.5
        assert kinds["shared_neighbors"]["count"] == 2 and kinds["shared_neighbors"]["examples"] == ["Alice", "Bob"]
        best = max(r["similarity"] for r in acme["reasons"] if r["similarity"] is not None)
        assert acme["score"] == pytest.approx(0.8 * best + 0.2 * 2 / 5, abs=1e-3)  # shared neighbours add to it
        globex = pairs[frozenset(("Globex Industries", "Globex Industry"))]
        assert {r["kind"] for r in globex["reasons"]} == {"name", "semantic"}  # the server embeds entity texts
        assert all(0 < p["score"] <= 1 for p in page["pairs"])
        assert [p["score"] for p in page["pairs"]] == sorted((p["score"] for p in page["pairs"]), reverse=True)

        # Paged: each pair once, following the cursor.
        seen, cursor, pages = [], None, 0
        while True:
            args: dict[str, Any] = {"limit": 1} | ({"cursor": cursor} if cursor else {})
            got = ok(await c.call_tool("find_duplicates", args))
            assert len(got["pairs"]) <= 1
            seen += [frozenset((p["a"]["id"], p["b"]["id"])) for p in got["pairs"]]
            pages += 1
            cursor = got["next_cursor"]
            if cursor is None:
                break
        assert sorted(seen, key=sorted) == sorted(
            (frozenset((p["a"]["id"], p["b"]["id"])) for p in page["pairs"]), key=sorted
        )
        assert pages >= 3

        # By type: both ends of each pair.
        orgs = ok(await c.call_tool("find_duplicates", {"types": ["org"]}))
        assert {frozenset((p["a"]["name"], p["b"]["name"])) for p in orgs["pairs"]} == {
            frozenset(("Acme Corporation", "Acme Corporaton")),
            frozenset(("Globex Industries", "Globex Industry")),
        }
        # A cursor belongs to its listing (the same types).
        first = ok(await c.call_tool("find_duplicates", {"types": ["org"], "limit": 1}))
        assert first["next_cursor"]
        spoiled = {"types": ["vendor"], "cursor": first["next_cursor"]}
        assert error_code(await c.call_tool("find_duplicates", spoiled)) == "invalid"

        # Merged pairs are no longer proposed.
        ok(await c.call_tool("merge_entities", {"into": ids["Acme Corporation"], "merge": ["Acme Corporaton"]}))
        after = ok(await c.call_tool("find_duplicates", {"types": ["org"]}))
        assert [p["a"]["name"][:6] for p in after["pairs"]] == ["Globex"]


# --- export and import ---------------------------------------------------------------------------------


async def test_the_engram_format_carries_aliases_and_merges(server, client_for, tenant, tmp_path):
    async with client_for(tenant) as c:
        ids = await _seed(c, [{"name": "Ada", "type": "person"}, {"name": "Ada L.", "type": "person"}])
        ok(await c.call_tool("add_aliases", {"name": "Ada", "aliases": ["Countess"]}))
        ok(await c.call_tool("merge_entities", {"into": "Ada", "merge": ["Ada L."]}))
    data = export(server, tenant, tmp_path / "all.jsonl", "--include-deleted", "--history")
    assert b'"aliases":["Ada L.","Countess"]' in data
    assert f'"merged_into":"{ids["Ada"]}"'.encode() in data
    copy = tenant + "-copy"
    done = summary(server, copy, tmp_path / "all.jsonl")
    assert done["aliases_added"] == 2 and done["complete"]
    async with client_for(copy) as c:
        got = ok(await c.call_tool("get_entity", {"name": "countess"}))
        assert got["id"] == ids["Ada"] and got["aliases"] == ["Ada L.", "Countess"]
        assert ok(await c.call_tool("get_entity", {"id": ids["Ada L."]}))["id"] == ids["Ada"]
        history = ok(await c.call_tool("entity_history", {"id": ids["Ada"]}))["entries"]
        assert any(e["action"] == "merged" for e in history)
    # Exported again: the same entities, aliases and merge marks.
    again = export(server, copy, tmp_path / "again.jsonl", "--include-deleted")
    assert [x for x in again.splitlines() if b'"type":"entity"' in x] == [
        x for x in data.splitlines() if b'"type":"entity"' in x
    ]
    for fmt in ("memory", "neo4j"):
        assert b"Countess" not in export(server, tenant, tmp_path / f"{fmt}.json", "--format", fmt)


# --- tenants -------------------------------------------------------------------------------------------


async def test_aliases_and_merges_stay_in_their_tenant(client_for, tenant):
    other = tenant + "-other"
    async with client_for(tenant) as a, client_for(other) as b:
        mine = await _seed(a, [{"name": "Ada", "type": "person"}, {"name": "Ada L.", "type": "person"}])
        theirs = await _seed(b, [{"name": "Bob", "type": "person"}, {"name": "Ada L.", "type": "person"}])
        ok(await a.call_tool("add_aliases", {"name": "Ada", "aliases": ["Countess"]}))
        ok(await b.call_tool("add_aliases", {"name": "Bob", "aliases": ["Countess"]}))  # its own spelling
        ok(await a.call_tool("merge_entities", {"into": "Ada", "merge": ["Ada L."]}))
        assert ok(await a.call_tool("get_entity", {"name": "countess"}))["id"] == mine["Ada"]
        assert ok(await b.call_tool("get_entity", {"name": "countess"}))["id"] == theirs["Bob"]
        assert ok(await b.call_tool("get_entity", {"name": "Ada L."}))["id"] == theirs["Ada L."]  # untouched
        assert error_code(await b.call_tool("get_entity", {"id": mine["Ada L."]})) == "not_found"
        assert ok(await b.call_tool("find_duplicates", {}))["pairs"] == []


async def test_concurrent_merges_of_one_duplicate_fold_it_once(client_for, tenant):
    async with client_for(tenant) as a, client_for(tenant) as b:
        ids = await _seed(
            a, [{"name": n, "type": "t", "observations": [f"about {n}"]} for n in ("Left", "Right", "Dup")]
        )
        results = await asyncio.gather(
            a.call_tool("merge_entities", {"into": "Left", "merge": [ids["Dup"]]}),
            b.call_tool("merge_entities", {"into": "Right", "merge": [ids["Dup"]]}),
        )
        # The second waits for the first: then its id is gone (not_found), or leads to the survivor,
        # which it did not ask to merge (conflict).
        outcomes = sorted("ok" if not r.is_error else error_code(r) for r in results)
        assert outcomes in (["conflict", "ok"], ["not_found", "ok"])
        winner = ok(next(r for r in results if not r.is_error))["entity"]["name"]
        got = ok(await a.call_tool("get_entity", {"name": "Dup"}))
        assert got["name"] == winner and "about Dup" in got["observations"]
        loser = ok(await a.call_tool("get_entity", {"name": "Right" if winner == "Left" else "Left"}))
        assert loser["aliases"] == [] and len(loser["observations"]) == 1
