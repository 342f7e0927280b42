"""Cursors expire and their signing key rotates; a deleted tenant does not linger in a server's cache."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import asyncpg
import pytest

from app.errors import EngramError
from app.services import cursors as cursors_module
from app.services.cursors import KEY_REFRESH, Cursors
from app.store import cursor_keys, tenants
from tests.support.client import error_code, ok
from tests.support.server import ROOT, serve

OLD, NEW = b"o" * 32, b"n" * 32


def _invalid(c: Cursors, cursor: str, tenant: str = "t1", listing: str = "find") -> str:
    with pytest.raises(EngramError) as caught:
        c.decode(cursor, tenant, listing)
    assert caught.value.code == "invalid"
    return caught.value.message


def test_a_cursor_expires_after_its_max_age(monkeypatch):
    c = Cursors(max_age=60, keys=[("cursor", OLD, 1000.0)])
    cursor = c.encode("t1", "find", ["a", 1])
    assert c.decode(cursor, "t1", "find") == ["a", 1]
    now = time.time()
    monkeypatch.setattr(cursors_module.time, "time", lambda: now + 59)
    assert c.decode(cursor, "t1", "find") == ["a", 1]
    monkeypatch.setattr(cursors_module.time, "time", lambda: now + 61)
    assert "expired" in _invalid(c, cursor)
    monkeypatch.setattr(cursors_module.time, "time", lambda: now - 3600)  # issued "in the future"
    assert "expired" in _invalid(c, cursor)


def test_a_new_key_signs_once_every_replica_has_it_and_old_cursors_still_verify():
    fresh = Cursors(keys=[("cursor", OLD, 1000.0), ("cursor-0000000a", NEW, 10.0)])
    by_old = fresh.encode("t1", "find", 1)  # the new key is too young to sign: some replica may not know it
    settled = Cursors(keys=[("cursor", OLD, 1000.0), ("cursor-0000000a", NEW, KEY_REFRESH + 1)])
    by_new = settled.encode("t1", "find", 2)
    assert by_old != by_new
    for c in (fresh, settled):  # both keys verify on every replica
        assert c.decode(by_old, "t1", "find") == 1
        assert c.decode(by_new, "t1", "find") == 2
    retired = Cursors(keys=[("cursor-0000000a", NEW, 10 * KEY_REFRESH)])
    assert retired.decode(by_new, "t1", "find") == 2
    _invalid(retired, by_old)  # its key is gone


def test_edited_foreign_or_malformed_cursors_are_invalid():
    c = Cursors(keys=[("cursor", OLD, 1000.0)])
    other = Cursors(keys=[("cursor", NEW, 1000.0)])
    cursor = c.encode("t1", "find", 1)
    body, _, mac = cursor.partition(".")
    for bad in [
        other.encode("t1", "find", 1),  # another key under the same id
        f"{body}.{mac[:-1]}é",
        f"{body}.ü",
        "é.é",
        f"{body[:-2]}.{mac}",
        "",
        ".",
        "not a cursor",
        Cursors(keys=[("cursor-ffffffff", OLD, 1000.0)]).encode("t1", "find", 1),  # unknown key id
    ]:
        _invalid(c, bad)
    _invalid(c, cursor, tenant="t2")
    _invalid(c, cursor, listing="history:x")


async def test_rotation_keeps_old_cursors_working_and_retires_keys_once_their_cursors_expired(db_settings):
    with serve(db_settings, ENGRAM_EMBEDDING_PROVIDER="none") as server:
        async with server.client("cursor-rotation") as c:
            ok(await c.call_tool("upsert_entities", {"entities": [{"name": f"E{i}", "type": "t"} for i in range(3)]}))
            before = ok(await c.call_tool("find_entities", {"limit": 1}))["next_cursor"]
            rotated = subprocess.run(
                [sys.executable, "-m", "app.cli", "cursor-key", "rotate"],
                env=server.env,
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=True,
            )
            assert "added cursor key cursor-" in rotated.stdout
            # The running server accepts its earlier cursor, and so does a server started after the rotation.
            assert ok(await c.call_tool("find_entities", {"limit": 1, "cursor": before}))["entities"]
    with serve(db_settings, ENGRAM_EMBEDDING_PROVIDER="none") as later:
        async with later.client("cursor-rotation") as c:
            page = ok(await c.call_tool("find_entities", {"limit": 1, "cursor": before}))
            assert page["entities"] and page["next_cursor"]
    admin = await asyncpg.connect(db_settings.admin_dsn())
    try:
        keys = await admin.fetch("SELECT name FROM engram.server_secrets WHERE name LIKE 'cursor%' ORDER BY created_at")
        assert len(keys) >= 2 and keys[0]["name"] == "cursor"
        # A key goes once its successor is older than the cursors it signed can live (here: at once);
        # the key that signed until this rotation stays, since its successor is brand new.
        newest, retired = await cursor_keys.rotate(admin, retire_after_seconds=0)
        assert sorted(retired) == sorted(r["name"] for r in keys[:-1])
        left = await admin.fetch("SELECT name FROM engram.server_secrets WHERE name LIKE 'cursor%' ORDER BY created_at")
        assert [r["name"] for r in left] == [keys[-1]["name"], newest]
    finally:
        await admin.close()


async def test_cursors_expire_on_the_server(db_settings):
    with serve(db_settings, ENGRAM_CURSOR_MAX_AGE_SECONDS="4", ENGRAM_EMBEDDING_PROVIDER="none") as server:
        async with server.client("cursor-expiry") as c:
            ok(await c.call_tool("upsert_entities", {"entities": [{"name": f"E{i}", "type": "t"} for i in range(3)]}))
            cursor = ok(await c.call_tool("find_entities", {"limit": 1}))["next_cursor"]
            assert ok(await c.call_tool("find_entities", {"limit": 1, "cursor": cursor}))["entities"]
            await asyncio.sleep(5.1)  # issue times are whole seconds
            expired = await c.call_tool("find_entities", {"limit": 1, "cursor": cursor})
            assert error_code(expired) == "invalid" and "expired" in expired.content[0].text  # type: ignore[union-attr]


async def test_a_deleted_tenant_leaves_the_servers_cache(db_settings, server, tenant):
    async with server.client(tenant) as c:
        ok(await c.call_tool("upsert_entities", {"entities": [{"name": "Old", "type": "t"}]}))
        admin = await asyncpg.connect(db_settings.admin_dsn())
        try:
            await tenants.delete(admin, tenant)
        finally:
            await admin.close()
        gone = await c.call_tool("get_entity", {"name": "Old"})
        assert error_code(gone) == "forbidden" and "deleted" in gone.content[0].text  # type: ignore[union-attr]
        # The next call resolves the tenant again: under the `auto` policy a new, empty one.
        assert error_code(await c.call_tool("get_entity", {"name": "Old"})) == "not_found"
        assert ok(await c.call_tool("graph_stats", {}))["entities"] == 0
