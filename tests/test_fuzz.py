"""Every tool of every endpoint, called with arguments generated from its own input schema (as
tools/list gives it) against a real server over HTTP: no internal error, no 5xx, no ERROR or
traceback in the server's log, a stable code on every refusal, and nothing changed by a refused
write (the tenant's digest before and after). `make test` runs a quick profile; `make fuzz` runs
ENGRAM_FUZZ_CALLS (50,000) and writes its figures (docs/benchmarks.md, "Fuzzing")."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.shared.exceptions import MCPError

from app.auth.devkeys import mint_token
from app.auth.principal import ADMIN, READ, WRITE
from app.config import Settings
from tests.support.client import connect, ok
from tests.support.fuzz import ENDPOINTS, Harness, arguments, calls_wanted, log_errors
from tests.support.server import free_port, server_env, start_server

QUICK_CALLS = 400
pytestmark = pytest.mark.timeout(4 * 3600)

# Arguments that once broke a tool, replayed first on every run: (endpoint, tool, arguments).
REGRESSIONS: list[tuple[str, str, dict[str, Any]]] = [
    ("/mcp", "query_graph", {"query": "MATCH (a) RETURN exists((a)-[]-(zz))"}),
    ("/mcp", "query_graph", {"query": "RETURN {" + ", ".join(f"k{i}: {i}" for i in range(51)) + "}"}),
    ("/mcp", "query_graph", {"query": "UNWIND [1, 2] AS x RETURN x + {a: 1} - [1]"}),
]


@pytest.fixture(scope="module")
def fuzzed(db_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Harness, Path]]:
    log = tmp_path_factory.mktemp("fuzz") / "server.log"
    port = free_port()
    env = server_env(
        db_settings,
        port,
        ENGRAM_EMBEDDING_PROVIDER="none",
        ENGRAM_TENANT_RATE="100000",
        ENGRAM_TENANT_BURST="100000",
        ENGRAM_TENANT_MAX_CONCURRENT="100",
        ENGRAM_TOKEN_RATE="100000",  # the calls are one credential's: its request rate is not what is tested
        ENGRAM_TOKEN_BURST="100000",
    )
    settings_ = db_settings.model_copy(update={"port": port})
    tenant = f"fuzz-{uuid.uuid4().hex[:10]}"
    token = mint_token(settings_, tenant=tenant, scopes=(READ, WRITE, ADMIN))
    with open(log, "wb") as out:
        process = start_server(env, stdout=out)
    harness = Harness(
        f"http://127.0.0.1:{port}",
        dict.fromkeys(ENDPOINTS, token),
        db_settings.admin_dsn(),
        dict.fromkeys(ENDPOINTS, tenant),
    )
    try:
        harness.run(_seed(f"http://127.0.0.1:{port}/mcp", token))
        harness.start()
        yield harness, log
    finally:
        harness.stop()
        process.terminate()
        process.wait(timeout=30)


async def _seed(url: str, token: str) -> None:
    async with connect(url, token) as c:
        entities = [
            {"name": "Ada Lovelace", "type": "person", "observations": ["wrote the first program"]},
            {"name": "Charles Babbage", "type": "person", "observations": ["designed the engine"]},
            {"name": "Analytical Engine", "type": "machine"},
        ]
        ok(await c.call_tool("upsert_entities", {"entities": entities}))
        relations = [{"from": "Charles Babbage", "type": "designed", "to": "Analytical Engine"}]
        ok(await c.call_tool("connect_entities", {"relations": relations}))


def _tool(harness: Harness, endpoint: str, name: str) -> Any:
    return next(t for t in harness.tools[endpoint] if t.name == name)


def test_the_regressions_stay_fixed(fuzzed):
    harness, log = fuzzed
    for endpoint, name, args in REGRESSIONS:
        harness.call(endpoint, _tool(harness, endpoint, name), args)
    assert not harness.findings, "\n".join(map(str, harness.findings))
    assert not log_errors(log), log_errors(log)[:5]


def test_every_tool_survives_its_own_schema(fuzzed):
    harness, log = fuzzed
    plan = [(endpoint, tool) for endpoint in ENDPOINTS for tool in harness.tools[endpoint]]
    wanted = calls_wanted(QUICK_CALLS)
    started, first = time.monotonic(), harness.calls

    @settings(
        max_examples=wanted,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )
    @given(st.data())
    def one_call(data: st.DataObject) -> None:
        endpoint, tool = data.draw(st.sampled_from(plan))
        harness.call(endpoint, tool, data.draw(arguments(tool)))

    one_call()
    calls, seconds = harness.calls - first, time.monotonic() - started
    errors = log_errors(log)
    figures = {
        "calls": calls,
        "seconds": round(seconds, 1),
        "tools": len(plan),
        "in_calls_and_digests": {k: round(v, 1) for k, v in harness.seconds.items()},
        "digest_reconnects": harness.reconnects,
        "findings": [str(f) for f in harness.findings],
        "log_errors": errors[:20],
        "statuses": {str(s): harness.statuses.count(s) for s in sorted(set(harness.statuses))},
    }
    print(orjson.dumps(figures, option=orjson.OPT_INDENT_2).decode())
    assert calls >= wanted * 0.9  # Hypothesis may stop short only when it runs out of distinct draws
    assert not harness.findings, "\n".join(map(str, harness.findings[:20]))
    assert not errors, errors[:5]


def test_prompts_get_with_bad_arguments_is_refused_quietly(fuzzed):
    harness, log = fuzzed

    async def ask(c: Any) -> list[int]:
        codes = []
        for name, args in (("use_memory", {"x": "1"}), ("nope", None), ("use_memory", {"": "\u0000"})):
            try:
                await c.get_prompt(name, args)
            except MCPError as exc:
                codes.append(exc.error.code)
        assert (await c.get_prompt("use_memory")).messages
        return codes

    assert harness.run(harness._on("/mcp", ask)) == [-32602, -32602, -32602]
    assert not log_errors(log), log_errors(log)[:5]
