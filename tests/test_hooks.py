"""/hooks/claude-code against a real server and database: hook inputs in the shapes Claude Code's
hooks reference documents (code.claude.com/docs/en/hooks, "Hook input"), posted as its `"type":
"http"` hooks post them (a JSON body, `Content-Type: application/json`, the headers the settings
name: here `Authorization: Bearer …`)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import orjson
import pytest

from app.auth.principal import ADMIN, READ, WRITE
from tests.support.hooks import common, context, engram, kept, new_tenant, post, seed, session
from tests.support.server import ROOT, Server

pytestmark = pytest.mark.asyncio


async def test_every_event_as_documented(server: Server) -> None:
    tenant = new_tenant(server)
    await seed(server, tenant)
    token = server.token(tenant)
    sid = session()
    start = await post(server, token, common(sid, "SessionStart", source="startup", model="claude-sonnet-4-6"))
    brief = context(start)
    assert brief is not None and "Adyen" in brief  # the latest from other sessions
    assert "About shop:" in brief and "three times" in brief  # and what is known of the project (cwd)
    prompt = common(sid, "UserPromptSubmit", prompt="How many times does checkout retry a card payment?")
    injected = context(await post(server, token, prompt))
    assert injected is None or "three times" not in injected  # this session has it already
    elsewhere = common(session(), "UserPromptSubmit", prompt=prompt["prompt"])
    injected = context(await post(server, token, elsewhere))
    assert injected is not None and "three times" in injected and "Shop checkout" in injected
    stop = common(
        sid, "Stop", stop_hook_active=False, last_assistant_message="Checkout retries a card payment three times."
    )
    assert context(await post(server, token, stop)) is None
    sub = common(
        sid,
        "SubagentStop",
        stop_hook_active=False,
        agent_id="a1b2",
        agent_type="Explore",
        agent_transcript_path="/tmp/x.jsonl",
        last_assistant_message="Found the retry loop in checkout/payments.py.",
    )
    assert context(await post(server, token, sub)) is None
    compact = common(sid, "PreCompact", trigger="manual", custom_instructions="")
    assert context(await post(server, token, compact)) is None
    assert context(await post(server, token, common(sid, "SessionEnd", reason="prompt_input_exit"))) is None

    ours = {e["source"]: e["text"] for e in await kept(server, tenant, 4) if sid in (e.get("source") or "")}
    assert ours == {
        f"claude-code:{sid}:1:user": "How many times does checkout retry a card payment?",
        f"claude-code:{sid}:1:assistant": "Checkout retries a card payment three times.",
        f"claude-code:{sid}:1:subagent-explore": "Found the retry loop in checkout/payments.py.",
    }


async def test_a_prompt_gets_what_is_relevant_once_and_nothing_on_small_talk(server: Server) -> None:
    tenant = new_tenant(server)
    await seed(server, tenant)
    token = server.token(tenant)
    sid = session()
    ask = common(sid, "UserPromptSubmit", prompt="Which payment provider are we moving the shop to?")
    first = context(await post(server, token, ask))
    assert first is not None and "Adyen" in first
    assert len(first.encode()) <= 500 * 4  # the default budget
    # The same question again in this session: what it was given is in its history already.
    again = context(await post(server, token, common(sid, "UserPromptSubmit", prompt=ask["prompt"] + " again")))
    assert again is None or "Adyen" not in again
    # Another session is given it.
    other = context(await post(server, token, common(session(), "UserPromptSubmit", prompt=ask["prompt"])))
    assert other is not None and "Adyen" in other
    # Small talk gets nothing, and this session's own prompts are never echoed back.
    for small in ("thanks!", "ok", "great, go on"):
        assert context(await post(server, token, common(sid, "UserPromptSubmit", prompt=small))) is None


async def test_each_turn_is_kept_once_across_retries_and_resumes(server: Server) -> None:
    tenant = new_tenant(server)
    token = server.token(tenant)
    sid = session()
    prompt = common(sid, "UserPromptSubmit", prompt="Rename the pricing cache to price-store.")
    stop = common(sid, "Stop", stop_hook_active=False, last_assistant_message="Renamed it in 4 files.")
    for _ in range(3):  # a delivery retried
        await post(server, token, prompt)
    for _ in range(3):
        await post(server, token, stop)
    await post(server, token, common(sid, "SessionStart", source="resume"))  # the session resumed
    await post(server, token, stop)  # and its last turn's end delivered again
    await post(server, token, {**stop, "hook_event_name": "SessionEnd", "reason": "other"})  # the helper's copy
    nxt = common(sid, "UserPromptSubmit", prompt="Rename the pricing cache to price-store.")  # asked again, later
    await post(server, token, nxt)
    sources = sorted(e["source"] for e in await kept(server, tenant, 3))
    assert sources == [
        f"claude-code:{sid}:1:assistant",
        f"claude-code:{sid}:1:user",
        f"claude-code:{sid}:2:user",
    ]


async def test_hostile_inputs_are_refused_and_store_nothing(server: Server) -> None:
    tenant = new_tenant(server)
    token = server.token(tenant)
    sid = session()
    ok = common(sid, "UserPromptSubmit", prompt="hello")
    cases: list[tuple[Any, bytes | None, int]] = [
        (None, b"not json", 400),
        (None, b"[1, 2]", 400),
        ({**ok, "prompt": "a\x00b"}, None, 400),
        ({**ok, "prompt": ["a", "list"]}, None, 400),
        ({**ok, "session_id": 12345}, None, 400),
        ({**ok, "session_id": "../../etc/passwd"}, None, 400),
        ({**ok, "session_id": ""}, None, 400),
        ({**ok, "stop_hook_active": {"deep": [1]}}, None, 400),
        ({**ok, "hook_event_name": "Stop/../../x"}, None, 400),
        ({**ok, "prompt": "x" * 300_000}, None, 413),
        ({k: v for k, v in ok.items() if k != "session_id"}, None, 400),
    ]
    for body, raw, status in cases:
        r = await post(server, token, body, raw=raw)
        assert r.status_code == status, (body if raw is None else raw, r.status_code, r.text)
        assert r.json()["error"]
    deep = b'{"a":' * 2000 + b"1" + b"}" * 2000
    assert (await post(server, token, None, raw=deep)).status_code == 400
    # Credentials: none, made up, for no memory scope.
    assert (await post(server, None, ok)).status_code == 401
    assert (await post(server, "egk_aaaaaaaaaaaa_" + "b" * 43, ok)).status_code == 401
    assert (await post(server, "not.a.jwt", ok)).status_code == 401
    assert (await post(server, server.token(tenant, (ADMIN,)), ok)).status_code == 403
    # Paths are text: a transcript or working directory the server would have to open is never read.
    paths = common(sid, "SessionStart", source="startup", cwd="/etc/../../proc/self/environ")
    paths["transcript_path"] = "/etc/shadow"
    assert (await post(server, token, paths)).status_code == 200
    assert await kept(server, tenant) == []


async def test_unknown_events_and_fields_are_ignored(server: Server) -> None:
    tenant = new_tenant(server)
    token = server.token(tenant)
    sid = session()
    for event in ("PreToolUse", "Notification", "SomethingNew"):
        r = await post(server, token, common(sid, event, tool_name="Bash", tool_input={"command": "ls"}, message="hi"))
        assert r.status_code == 200 and r.json() == {}
    extra = common(sid, "UserPromptSubmit", prompt="note this down", future_field={"x": [1, 2]}, effort="high")
    assert (await post(server, token, extra)).status_code == 200
    assert [e["text"] for e in await kept(server, tenant, 1)] == ["note this down"]


async def test_secrets_are_redacted_before_storing(server: Server) -> None:
    tenant = new_tenant(server)
    engram(server, "hooks", "set", tenant, "--deny", "ACME-*,hunter?")
    token = server.token(tenant)
    sid = session()
    prompt = (
        "deploy with key sk-ant-api03-abcdefghijklmnopqrstuvwx and AKIAIOSFODNN7EXAMPLE, db at "
        "postgres://app:s3cretpass@db.internal/shop, header Authorization: Bearer abcdef123456789, ticket ACME-4411, "
        "password hunter2"
    )
    await post(server, token, common(sid, "UserPromptSubmit", prompt=prompt))
    pem = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----"
    await post(server, token, common(sid, "Stop", last_assistant_message=f"Use this key:\n{pem}\nthen retry."))
    texts = " ".join(e["text"] for e in await kept(server, tenant, 2))
    for secret in ("sk-ant-api03", "AKIAIOSFODNN7EXAMPLE", "s3cretpass", "abcdef123456789", "ACME-4411", "hunter2",
                   "b3BlbnNzaC1rZXkt"):  # fmt: skip
        assert secret not in texts
    assert texts.count("[redacted]") >= 7 and "postgres://app:[redacted]@db.internal/shop" in texts


async def test_capture_off_stores_nothing_and_events_can_be_switched_off(server: Server) -> None:
    tenant = new_tenant(server)
    await seed(server, tenant)
    engram(server, "hooks", "set", tenant, "--capture", "off", "--events", "UserPromptSubmit,Stop")
    assert "capture: False (set for this tenant)" in engram(server, "hooks", "show", tenant)
    token = server.token(tenant)
    sid = session()
    injected = context(await post(server, token, common(sid, "UserPromptSubmit", prompt="What does checkout retry?")))
    assert injected is not None and "three times" in injected  # reading still works
    await post(server, token, common(sid, "Stop", last_assistant_message="It retries card payments."))
    assert context(await post(server, token, common(sid, "SessionStart", source="startup"))) is None  # switched off
    assert not [e for e in await kept(server, tenant) if (e.get("source") or "").startswith("claude-code:")]


async def test_a_read_only_key_injects_but_never_stores(server: Server) -> None:
    tenant = new_tenant(server)
    await seed(server, tenant)
    key = engram(server, "apikey", "create", "--tenant", tenant, "--scope", READ, "--name", "hooks").strip()
    sid = session()
    injected = context(await post(server, key, common(sid, "UserPromptSubmit", prompt="What does checkout retry?")))
    assert injected is not None and "three times" in injected
    await post(server, key, common(sid, "Stop", last_assistant_message="Three times."))
    assert not [e for e in await kept(server, tenant) if (e.get("source") or "").startswith("claude-code:")]
    # A write-only token keeps turns and is given nothing.
    writer = server.token(tenant, (WRITE,))
    asked = common(sid, "UserPromptSubmit", prompt="What does checkout retry?")
    assert context(await post(server, writer, asked)) is None
    assert len([e for e in await kept(server, tenant, 2) if (e.get("source") or "").startswith("claude-code:")]) == 1


async def test_a_session_id_from_another_tenant_reaches_only_the_callers_tenant(server: Server) -> None:
    ours, theirs = new_tenant(server), new_tenant(server)
    sid = session()
    await post(server, server.token(theirs), common(sid, "UserPromptSubmit", prompt="their secret plan"))
    r = await post(server, server.token(ours), common(sid, "UserPromptSubmit", prompt="what is the plan?"))
    assert context(r) is None  # nothing of theirs
    await post(server, server.token(ours), common(sid, "Stop", last_assistant_message="No plan is known."))
    assert sorted(e["text"] for e in await kept(server, theirs, 1)) == ["their secret plan"]
    assert sorted(e["text"] for e in await kept(server, ours, 2)) == ["No plan is known.", "what is the plan?"]


def run_helper(server: Server, key: str, event: dict[str, Any], url: str | None = None) -> Any:
    """The plugin's local helper as Claude Code runs a command hook: the input on standard input."""
    return subprocess.run(
        [sys.executable, str(ROOT / "clients" / "claude-code" / "scripts" / "engram_hook.py")],
        input=orjson.dumps(event).decode(),
        env={"PATH": "/usr/bin:/bin", "ENGRAM_URL": url or server.base, "ENGRAM_API_KEY": key},
        capture_output=True,
        text=True,
        timeout=30,
    )


async def test_the_local_helper_keeps_the_last_answer_from_the_transcript(server: Server, tmp_path: Any) -> None:
    tenant = new_tenant(server)
    key = engram(server, "apikey", "create", "--tenant", tenant, "--scope", READ, "--scope", WRITE).strip()
    sid = session()
    transcript = tmp_path / f"{sid}.jsonl"
    entries = [
        {"type": "user", "uuid": "u1", "sessionId": sid, "message": {"role": "user", "content": "Fix the flaky test"}},
        {
            "type": "assistant",
            "uuid": "a1",
            "sessionId": sid,
            "message": {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "pytest"}},
                    {"type": "text", "text": "The test raced the clock; it now waits for the event."},
                ],
            },
        },
        {"type": "summary", "summary": "flaky test"},
    ]
    transcript.write_text("\n".join(orjson.dumps(e).decode() for e in entries) + "\n")
    event = {**common(sid, "SessionEnd", reason="prompt_input_exit"), "transcript_path": str(transcript)}
    for _ in range(2):  # sent twice (PreCompact, then SessionEnd): kept once
        done = run_helper(server, key, event)
        assert done.returncode == 0 and done.stdout == "", done.stderr
    assert [e["text"] for e in await kept(server, tenant, 1, token=key)] == [  # the key's own, privately
        "The test raced the clock; it now waits for the event."
    ]
    # Another session's start through the helper prints what Claude Code reads (the brief).
    start = run_helper(server, key, common(session(), "SessionStart", source="startup"))
    assert start.returncode == 0 and orjson.loads(start.stdout)["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    # No server: nothing printed, exit 0 (the session goes on).
    gone = run_helper(server, key, event, url="http://127.0.0.1:9")
    assert gone.returncode == 0 and gone.stdout == ""


async def test_long_answers_and_ids_at_their_bounds_are_kept_clipped(server: Server) -> None:
    tenant = new_tenant(server)
    token = server.token(tenant)
    sid = "s" + "x" * 127  # the longest session id taken
    answer = "word " * 5000  # 25,000 characters: more than an episode keeps
    sub = common(sid, "SubagentStop", agent_type="A" * 200, last_assistant_message=answer)
    assert (await post(server, token, sub)).status_code == 200
    (e,) = await kept(server, tenant, 1)
    assert len(e["text"]) <= 8000 and e["text"].startswith("word word") and e["text"].endswith("chars]")
    assert e["source"] == f"claude-code:{sid}:0:subagent-{'a' * 30}" and len(e["source"]) <= 200
    assert (await post(server, token, {**sub, "session_id": "s" * 129})).status_code == 400


async def test_hook_settings_refuse_what_they_cannot_mean(server: Server) -> None:
    tenant = new_tenant(server)
    for flags in (["--events", "Stop,Nope"], ["--capture", "maybe"], ["--deny", "*"], ["--min-score", "2"],
                  ["--prompt-tokens", "-1"], ["--deny", ",".join(f"p{i}" for i in range(101))]):  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-m", "app.cli", "hooks", "set", tenant, *flags],
            env=server.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2 and "error:" in done.stderr, (flags, done.stderr)
    engram(server, "hooks", "set", tenant, "--prompt-tokens", "0", "--min-score", "0.5")
    shown = engram(server, "hooks", "show", tenant)
    assert "prompt_tokens: 0 (set for this tenant)" in shown and "min_score: 0.5 (set for this tenant)" in shown
    engram(server, "hooks", "set", tenant, "--prompt-tokens", "default")
    assert "prompt_tokens: 500 (default)" in engram(server, "hooks", "show", tenant)
