"""Progress of the CLI's long work (docs/operations.md, "Progress"): import, export, backup,
restore and reindex draw a bar at a terminal (a pty here), and print no progress at all when
their output is a pipe, as in a script or a CI job. Tenant moves: tests/test_moves.py."""

from __future__ import annotations

import re
from pathlib import Path

from app.config import Settings
from tests.support.server import Server, engram, free_port, scratch_database, server_env
from tests.support.terminal import at_a_terminal
from tests.support.transfer import write_lines

# What a tqdm bar draws: a count of a total, and a rate per second ("12.3lines/s", "4.5kB/s").
BAR = re.compile(rb"\r[^\r\n]*\d+/\d+ \[|[\d.]+ ?[kMG]?(B|lines|tables|texts|it)/s")


def _quiet(done: object) -> None:
    """A command run with pipes for outputs: its own lines, and no progress among them."""
    assert done.returncode == 0, done.stderr  # type: ignore[attr-defined]
    for stream in (done.stdout, done.stderr):  # type: ignore[attr-defined]
        assert "\r" not in stream and not BAR.search(stream.encode()), stream


def _drawn(env: dict[str, str], *args: str, stage: bytes, total: bytes | None) -> bytes:
    code, shown = at_a_terminal(env, *args)
    assert code == 0, shown.decode(errors="replace")[-2000:]
    assert b"\r" in shown and stage in shown and BAR.search(shown), shown[-2000:]
    if total is not None:
        assert b"/" + total in shown, shown[-2000:]
    return shown


def test_import_export_backup_and_restore_draw_progress_at_a_terminal_only(
    server: Server, tenant: str, tmp_path: Path
) -> None:
    env = {**server.env, "ENGRAM_EMBEDDING_PROVIDER": "none"}
    rows = [{"type": "entity", "name": f"E{i}", "entityType": "t", "observations": [f"o{i}"]} for i in range(600)]
    path = write_lines(tmp_path / "a.jsonl", rows)

    _quiet(engram(env, "import", "--tenant", tenant, str(path)))
    _drawn(env, "import", "--tenant", tenant + "-tty", str(path), stage=b"entities", total=b"600")

    _quiet(engram(env, "export", "--tenant", tenant, "-o", str(tmp_path / "plain.jsonl")))
    _drawn(
        env,
        "export",
        "--tenant",
        tenant,
        "-o",
        str(tmp_path / "tty.jsonl"),
        stage=b"export " + tenant.encode(),
        total=None,
    )
    assert (tmp_path / "plain.jsonl").read_bytes() == (tmp_path / "tty.jsonl").read_bytes()

    _quiet(engram(env, "backup", str(tmp_path / "plain.tar"), "--tenant", tenant))
    _drawn(env, "backup", str(tmp_path / "tty.tar"), "--tenant", tenant, stage=b"tables written", total=None)

    for file, shown in (("plain.tar", False), ("tty.tar", True)):
        assert engram(env, "tenant", "delete", tenant).returncode == 0
        if shown:
            _drawn(env, "restore", str(tmp_path / file), stage=b"tables loaded", total=None)
        else:
            _quiet(engram(env, "restore", str(tmp_path / file)))
    back = engram(env, "export", "--tenant", tenant, "-o", str(tmp_path / "back.jsonl"))
    assert back.returncode == 0 and (tmp_path / "back.jsonl").read_bytes() == (tmp_path / "plain.jsonl").read_bytes()


async def test_reindex_draws_a_bar_per_tenant_at_a_terminal_only(db_settings: Settings, tmp_path: Path) -> None:
    """With the local model, in a database of its own that no server fills: each tenant's texts
    embedded by the command, a bar per tenant named by its key."""
    rows = [{"type": "entity", "name": f"R{i}", "entityType": "t", "observations": [f"r{i}"]} for i in range(20)]
    path = write_lines(tmp_path / "r.jsonl", rows)
    async with scratch_database(db_settings, "progress") as (runtime, owner):
        env = server_env(db_settings, free_port(), ENGRAM_DATABASE_URL=runtime, ENGRAM_ADMIN_DATABASE_URL=owner)
        for key in ("plain", "tty"):
            imported = engram({**env, "ENGRAM_EMBEDDING_PROVIDER": "none"}, "import", "--tenant", key, str(path))
            assert imported.returncode == 0, imported.stderr
        env["ENGRAM_EMBEDDING_PROVIDER"] = "local"
        _quiet(engram(env, "reindex", "--tenant", "plain"))
        _drawn(env, "reindex", "--tenant", "tty", stage=b"tty", total=None)
