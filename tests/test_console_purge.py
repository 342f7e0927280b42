"""Erasing for good in the console: an administrator's post shows what would go (under the strict
CSP, nothing erased yet), a second post with that count erases it; a writer may not."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from app.config import Settings
from tests.support.auth import add_user
from tests.support.console import CSP, seed, serve_console
from tests.support.server import Server


@pytest.fixture(scope="module")
def builtin(db_settings: Settings) -> Iterator[Server]:
    with serve_console(db_settings) as running:
        yield running


async def test_an_administrator_erases_for_good(builtin, browse):
    lab: Any = await seed(
        builtin,
        [
            {"name": "Secret Person", "type": "person", "observations": ["leaked secret zqxj"]},
            {"name": "Keep", "type": "t"},
        ],
        [{"from": "Secret Person", "to": "Keep", "type": "knows"}],
    )
    eid = lab.ids["Secret Person"]
    writer = add_user(builtin, lab.id, "writer")
    wanda = await browse(writer, lab.id)
    page = await wanda.get(f"/console/entity/{eid}")
    assert 'id="purge-start"' not in page.text
    refused = await wanda.post(f"/console/entity/{eid}/purge", {"csrf": wanda.csrf(page.text)})
    assert refused.status_code == 403 and CSP in refused.headers["content-security-policy"]

    ada = await browse(lab.admin, lab.id)
    page = await ada.get(f"/console/entity/{eid}")
    assert 'id="purge-start"' in page.text
    preview = await ada.post(f"/console/entity/{eid}/purge", {"csrf": ada.csrf(page.text)})
    assert preview.status_code == 200 and CSP in preview.headers["content-security-policy"]
    assert "Would erase 1 entities" in preview.text and "Secret Person" in preview.text
    assert (await ada.get(f"/console/entity/{eid}")).status_code == 200  # nothing erased yet
    # Without the session's token, nothing happens; with it and the count, it is gone.
    forged = await ada.post(f"/console/entity/{eid}/purge", {"confirm": "1"})
    assert forged.status_code == 403
    done = await ada.post(f"/console/entity/{eid}/purge", {"csrf": ada.csrf(preview.text), "confirm": "1"})
    assert done.status_code == 200 and str(done.url).endswith("/console/find"), done.status_code  # redirected
    assert "Erased for good: 1 entities" in done.text
    gone = await ada.get(f"/console/entity/{eid}")
    assert gone.status_code == 404 and "zqxj" not in gone.text
    assert "Keep" in (await ada.get(f"/console/entity/{lab.ids['Keep']}")).text
