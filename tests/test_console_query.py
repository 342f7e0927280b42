"""The console's query page: a reader asks the graph in Cypher (posted with the session's CSRF
token, under the strict CSP), gets the rows query_graph gives, and an invalid query back with where."""

from __future__ import annotations

import html
from collections.abc import Iterator
from typing import Any

import pytest

from app.config import Settings
from tests.support.auth import add_user
from tests.support.browser import ARTIFACTS, CHROMIUM, console_in_chromium
from tests.support.console import CSP, seed, serve_console, sign_in_with_browser, table
from tests.support.server import Server

QUERY = "MATCH (p:Entity)-[r:REL]->(m:Entity) WHERE r.type = 'designed' RETURN p.name AS who, m.name AS what"


@pytest.fixture(scope="module")
def builtin(db_settings: Settings) -> Iterator[Server]:
    with serve_console(db_settings) as running:
        yield running


@pytest.fixture(scope="module")
async def lab(builtin: Server) -> Any:
    return await seed(
        builtin,
        [{"name": "Charles Babbage", "type": "person"}, {"name": "Difference Engine", "type": "machine"}],
        [{"from": "Charles Babbage", "to": "Difference Engine", "type": "designed"}],
    )


async def test_a_reader_queries_the_graph(builtin, lab, browse):
    reader = add_user(builtin, lab.id, "reader")
    rita = await browse(reader, lab.id)
    shown = await rita.get("/console/query")
    assert shown.status_code == 200 and CSP in shown.headers["content-security-policy"]
    csrf = rita.csrf(shown.text)
    answer = await rita.post("/console/query", {"query": QUERY, "csrf": csrf})
    assert answer.status_code == 200 and CSP in answer.headers["content-security-policy"]
    rows = table(answer.text, "rows")
    assert "Charles Babbage" in rows and "Difference Engine" in rows and ">who<" in rows
    assert QUERY in html.unescape(answer.text)  # the query stays in the form
    # Refused with where; a write is refused like any other; nothing was written.
    bad = await rita.post("/console/query", {"query": "MATCH (n) DETACH DELETE n RETURN 1", "csrf": csrf})
    assert bad.status_code == 400 and "DETACH is not accepted" in bad.text and "column" in bad.text
    again = await rita.post("/console/query", {"query": "MATCH (n) RETURN count(n) AS n", "csrf": csrf})
    assert "<code>2</code>" in table(again.text, "rows")


async def test_the_query_needs_the_sessions_csrf_token(builtin, lab, browse):
    reader = add_user(builtin, lab.id, "reader")
    rita = await browse(reader, lab.id)
    for data in ({"query": QUERY}, {"query": QUERY, "csrf": "x" * 43}):
        answer = await rita.post("/console/query", data)
        assert answer.status_code == 403 and "did not come from this console" in answer.text
        assert "Difference Engine" not in answer.text


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (scripts/system-deps.sh)")
async def test_a_person_queries_in_chromium(builtin, lab):
    blocked: list[str] = []
    async with console_in_chromium(blocked) as page:
        await sign_in_with_browser(page, builtin, lab)
        await page.get_by_role("link", name="Query").click()
        await page.wait_for_url("**/console/query")
        await page.get_by_label("Query").fill(QUERY)
        await page.get_by_role("button", name="Run").click()
        await page.wait_for_url("**/console/query")
        rows = await page.locator("#rows").inner_text()
        assert "Charles Babbage" in rows and "Difference Engine" in rows
        await page.screenshot(path=ARTIFACTS / "query.png", full_page=True)
        await page.get_by_label("Query").fill("MATCH (a)-[*1..3]->(b) RETURN b")
        await page.get_by_role("button", name="Run").click()
        assert "variable-length" in await page.locator("#query-error").inner_text()
    assert blocked == []


async def test_every_refusal_is_a_page_under_the_policy(builtin, lab, browse):
    reader = add_user(builtin, lab.id, "reader")
    rita = await browse(reader, lab.id)
    csrf = rita.csrf((await rita.get("/console/query")).text)
    product = "UNWIND [0, 1, 2, 3, 4, 5, 6, 7, 8, 9] AS a "
    for query, status in (
        ("MATCH (a) RETURN exists((a)-[]-(zz))", 400),  # a pattern in exists
        ("RETURN {" + ", ".join(f"k{i}: {i}" for i in range(51)) + "}", 400),  # past AGE's map size
        ("UNWIND [1, 2] AS x RETURN x + {a: 1} - [1]", 400),  # refused by the database
        (f"WITH '{'x' * 3000}' AS s {product} {product.replace('a ', 'b ')} RETURN size(collect(s))", 429),
    ):
        answer = await rita.post("/console/query", {"query": query, "csrf": csrf})
        assert answer.status_code == status, (query, answer.status_code, answer.text[-500:])
        assert CSP in answer.headers["content-security-policy"]
        assert 'id="query-error"' in answer.text
