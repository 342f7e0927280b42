"""Metrics scraped by a real Prometheus, alert rules checked by promtool, the dashboard's queries
answered, audit rows, and JSON logs without secrets."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx2
import orjson
import pytest
from joserfc import jwt
from joserfc.jwk import ECKey
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.client import MUTATING, READS, connect, error_code, ok
from tests.support.local_http import ThreadedServer
from tests.support.server import ROOT, free_port, serve, server_env, start_server

PROMETHEUS, PROMTOOL = shutil.which("prometheus"), shutil.which("promtool")
needs_prometheus = pytest.mark.skipif(
    not (PROMETHEUS and PROMTOOL), reason="Debian's prometheus is not installed (scripts/system-deps.sh installs it)"
)
RULES = ROOT / "helm/engram/files/prometheus-rules.yaml"
DASHBOARD = ROOT / "helm/engram/files/grafana-dashboard.json"
SECRET_TEXT = "the launch code is 0000"


@dataclass
class Observed:
    base: str
    metrics_url: str
    log: Path
    env: dict[str, str]
    token: Callable[..., str]

    @property
    def url(self) -> str:
        return f"{self.base}/mcp"


@pytest.fixture(scope="module")
def observed(db_settings, tmp_path_factory) -> Iterator[Observed]:
    port, metrics_port = free_port(), free_port()
    env = server_env(db_settings, port, ENGRAM_METRICS_PORT=str(metrics_port), ENGRAM_LOG_LEVEL="INFO")
    log = tmp_path_factory.mktemp("logs") / "engram.jsonl"
    from app.auth.devkeys import mint_token

    settings = db_settings.model_copy(update={"port": port})
    with log.open("wb") as out:
        process = start_server(env, stdout=out)
        try:
            yield Observed(
                f"http://127.0.0.1:{port}",
                f"http://127.0.0.1:{metrics_port}/metrics",
                log,
                env,
                lambda tenant, **kw: mint_token(settings, tenant=tenant, **kw),
            )
        finally:
            process.terminate()
            process.wait(timeout=30)


async def _traffic(o: Observed, tenant: str) -> str:
    token = o.token(tenant)
    async with connect(o.url, token) as c:
        ok(
            await c.call_tool(
                "upsert_entities",
                {
                    "entities": [
                        {"name": "Vault", "type": "place", "observations": [SECRET_TEXT]},
                        {"name": "Guard", "type": "person"},
                    ]
                },
            )
        )
        ok(await c.call_tool("connect_entities", {"relations": [{"from": "Guard", "to": "Vault", "type": "protects"}]}))
        ok(await c.call_tool("get_entity", {"name": "Vault"}))
        ok(await c.call_tool("neighbors", {"entity": "Guard"}))
        assert error_code(await c.call_tool("get_entity", {"name": "Nobody"})) == "not_found"
        assert (await c.call_tool("get_entity", {"max_observations": -1, "name": "x"})).is_error
    assert httpx2.post(o.url, headers={"Authorization": "Bearer nonsense"}, timeout=5).status_code == 401
    assert httpx2.post(o.url, timeout=5).status_code == 401
    return token


def test_metrics_exposition_passes_promtool(observed):
    if not PROMTOOL:
        pytest.skip("promtool is not installed (scripts/system-deps.sh installs it)")
    text = httpx2.get(observed.metrics_url, timeout=5).text
    assert "engram_build_info" in text and "engram_db_pool_connections" in text
    checked = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert httpx2.get(observed.base + "/metrics", timeout=5).status_code == 404  # not on the public port


@needs_prometheus
def test_alert_rules_check_and_unit_tests():
    checked = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert checked.returncode == 0 and "SUCCESS: 26 rules found" in checked.stdout, checked.stdout + checked.stderr
    tested = subprocess.run(
        [PROMTOOL, "test", "rules", "alerts_test.yaml", "slo_test.yaml"],
        cwd=ROOT / "tests",
        capture_output=True,
        text=True,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def _query(prometheus: str, expr: str) -> list[dict]:
    answer = httpx2.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=10).json()
    assert answer["status"] == "success", (expr, answer)
    return answer["data"]["result"]


def _wait_for(prometheus: str, expr: str, seconds: float = 60) -> list[dict]:
    deadline = time.monotonic() + seconds
    while True:
        result = _query(prometheus, expr)
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.5)


@needs_prometheus
async def test_real_prometheus_scrapes_tool_metrics_and_dashboard_panels_have_data(observed, tenant, tmp_path):
    prom_port = free_port()
    target = observed.metrics_url.removeprefix("http://").removesuffix("/metrics")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{RULES}']\n"
        f"scrape_configs: [{{job_name: engram, static_configs: [{{targets: ['{target}']}}]}}]\n"
    )
    prometheus = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    api = f"http://127.0.0.1:{prom_port}"
    try:
        await _traffic(observed, tenant)
        calls = _wait_for(api, 'engram_tool_calls_total{tool="upsert_entities", outcome="ok"}')
        assert calls and float(calls[0]["value"][1]) >= 1
        assert _wait_for(api, 'engram_tool_calls_total{tool="get_entity", outcome="tool_error"}')
        assert _wait_for(api, 'engram_tool_calls_total{tool="get_entity", outcome="invalid"}')
        buckets = _wait_for(api, 'engram_tool_call_duration_seconds_bucket{tool="neighbors", outcome="ok"}')
        assert {"tool", "outcome", "le", "job", "instance"} <= set(buckets[0]["metric"])
        assert _wait_for(api, 'engram_mcp_requests_total{method="tools/call", outcome="ok"}')
        assert _wait_for(api, 'engram_auth_failures_total{reason="missing"}')
        assert _wait_for(api, 'engram_db_query_duration_seconds_count{operation="entities.resolve"}')
        assert not _query(api, '{__name__=~"engram_.*", tenant!=""}')  # no tenant labels unless allow-listed
        # The objectives' ratios are recorded from the real exposition (its le="1.0" included).
        for sli in ("availability", "latency"):
            (ratio,) = _wait_for(api, f'engram:slo_{sli}_errors:ratio_rate5m{{job="engram"}}')
            assert 0 <= float(ratio["value"][1]) <= 1, ratio

        await asyncio.sleep(2.5)  # rate() needs two samples in its window
        dashboard = orjson.loads(DASHBOARD.read_bytes())
        # The namespace and job variables set to "All", as Grafana sends them.
        variables = {v["name"]: v["allValue"] for v in dashboard["templating"]["list"] if v["type"] == "query"}
        assert set(variables) == {"namespace", "job"}
        panels = dashboard["panels"]
        assert len(panels) >= 8
        for panel in panels:
            for target_ in panel["targets"]:
                expr = target_["expr"]
                for name, value in variables.items():
                    expr = expr.replace(f"${name}", value)
                assert _wait_for(api, expr, 30), (panel["title"], expr)
        groups = httpx2.get(f"{api}/api/v1/rules", timeout=10).json()["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        assert {r["name"] for r in rules} >= {"EngramErrorBudgetBurn", "EngramDatabaseUnreachable"}
        assert all(r["health"] == "ok" for r in rules), rules
    finally:
        prometheus.terminate()
        prometheus.wait(timeout=30)


async def test_audit_rows_for_every_mutation_and_none_for_reads_or_failures(server, tenant, db_settings):
    async with server.client(tenant) as c, server.at("memory").client(tenant) as m:
        drop_in = {t.name for t in (await m.list_tools()).tools}  # the server-memory tools, at /mcp/memory
        for tool, args in MUTATING.items():
            ok(await (m if tool in drop_in else c).call_tool(tool, args))
        restored = ok(await c.call_tool("find_entities", {"name_contains": "A"}))["entities"][0]["id"]
        for tool, args in READS.items():
            ok(await (m if tool in drop_in else c).call_tool(tool, args))
        assert (
            error_code(await c.call_tool("update_entity", {"name": "Missing", "changes": {"type": "x"}})) == "not_found"
        )
        assert (
            error_code(
                await c.call_tool("connect_entities", {"relations": [{"from": "A", "to": "Nowhere", "type": "r"}]})
            )
            == "not_found"
        )
    conn = await asyncpg.connect(db_settings.admin_dsn())
    try:
        s = await conn.fetchval("SELECT schema_name FROM engram.tenants WHERE key = $1", tenant)
        rows = await conn.fetch(f"SELECT * FROM {s}.audit ORDER BY id")
    finally:
        await conn.close()
    assert [r["tool"] for r in rows] == list(MUTATING)  # one row per mutation, in order; none for reads or failures
    assert all(r["subject"] == "dev-user" and r["client_id"] == "engram-cli" and r["outcome"] == "ok" for r in rows)
    assert all(r["affected"] and r["request_id"] != "-" and r["duration_ms"] > 0 for r in rows)
    assert restored in rows[0]["affected"]


async def test_admin_tool_reads_the_tenants_audit(server, tenant):
    from app.auth.principal import ADMIN, READ, WRITE

    async with connect(server.url, server.token(tenant, scopes=(READ, WRITE, ADMIN))) as c:
        ok(await c.call_tool("upsert_entities", {"entities": [{"name": "Audited", "type": "t"}]}))
        page = ok(await c.call_tool("audit_log", {}))
        assert [e["tool"] for e in page["entries"]] == ["upsert_entities"]


async def test_logs_are_json_with_request_ids_and_no_secrets(observed, tenant):
    token = await _traffic(observed, tenant)
    echoed = httpx2.get(observed.base + "/healthz", headers={"X-Request-ID": "trace-123"}, timeout=5)
    assert echoed.headers["x-request-id"] == "trace-123"
    generated = httpx2.get(observed.base + "/healthz", headers={"X-Request-ID": "bad id\twith tab"}, timeout=5)
    assert generated.headers["x-request-id"] != "bad id\twith tab" and len(generated.headers["x-request-id"]) == 32
    await asyncio.sleep(0.5)
    text = observed.log.read_text()
    lines = [orjson.loads(line) for line in text.splitlines() if line.strip()]  # every line is JSON
    assert all({"time", "level", "logger", "message", "request_id"} <= set(line) for line in lines)
    access = [line for line in lines if line["logger"] == "engram.access"]
    assert any(line["request_id"] == "trace-123" and line["status"] == 200 for line in access)
    tools = [line for line in lines if line["logger"] == "engram.tools"]
    assert {"tool", "outcome", "duration_ms", "tenant"} <= set(tools[0])
    assert any(
        line["tool"] == "upsert_entities" and line["outcome"] == "ok" and line["tenant"] == tenant for line in tools
    )
    started = next(line for line in lines if line["message"].startswith("engram "))
    assert started["config"]["database_url"] == "***"
    assert token not in text and token.split(".")[2] not in text
    assert SECRET_TEXT not in text
    assert "password" not in text.lower() or "***" in text


# --- failed fetches of authentication documents ---------------------------------------------


class FailingDocuments:
    """A real HTTP server on loopback that plays an identity provider and a client's document host,
    and answers what a test sets: discovery 503 until `discovery_up`, a JWKS that is always 500,
    and no client metadata document at all (404)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.discovery_up = False
        self.requests: list[str] = []
        self._server = ThreadedServer(
            Starlette(
                routes=[
                    Route("/.well-known/openid-configuration", self._discovery),
                    Route("/jwks", self._jwks),
                    Route("/{path:path}", self._missing),
                ]
            ),
            self.port,
        )

    async def _discovery(self, request: Request) -> Response:
        self.requests.append(request.url.path)
        if not self.discovery_up:
            return JSONResponse({"error": "unavailable"}, status_code=503)
        return JSONResponse({"issuer": self.url, "jwks_uri": f"{self.url}/jwks"})

    async def _jwks(self, request: Request) -> Response:
        self.requests.append(request.url.path)
        return JSONResponse({"error": "internal"}, status_code=500)

    async def _missing(self, request: Request) -> Response:
        self.requests.append(request.url.path)
        return JSONResponse({"error": "not found"}, status_code=404)

    def __enter__(self) -> FailingDocuments:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()


def _fetch_failures(env: dict[str, str]) -> dict[tuple[str, str], float]:
    """engram_auth_fetch_failures_total by (kind, reason), read from the server's /metrics."""
    text = httpx2.get(f"http://127.0.0.1:{env['ENGRAM_METRICS_PORT']}/metrics", timeout=5).text
    return {
        (sample.labels["kind"], sample.labels["reason"]): sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "engram_auth_fetch_failures"
        for sample in family.samples
        if sample.name == "engram_auth_fetch_failures_total"
    }


def _signed_token(issuer: str, audience: str) -> str:
    key = ECKey.generate_key("P-256", auto_kid=True)
    now = int(time.time())
    claims = {"iss": issuer, "aud": audience, "sub": "u", "tenant_id": "t", "iat": now, "exp": now + 300}
    return jwt.encode({"alg": "ES256", "kid": key.kid}, claims, key)


def test_failed_discovery_and_jwks_fetches_are_counted(db_settings):
    with (
        FailingDocuments() as idp,
        serve(
            db_settings,
            ENGRAM_AUTH_MODE="oidc",
            ENGRAM_OIDC_ISSUER=idp.url,
            ENGRAM_JWKS_MIN_REFRESH_SECONDS="1",
            ENGRAM_EMBEDDING_PROVIDER="none",
        ) as server,
    ):
        env, url = server.env, server.url
        before = _fetch_failures(env)
        # Every pair is exported from the start, at 0.
        assert before == {pair: 0.0 for pair in before}
        assert {("jwks", "http_status"), ("discovery", "unreachable"), ("client_metadata", "busy")} <= set(before)
        token = _signed_token(idp.url, url)
        headers = {"Authorization": f"Bearer {token}"}

        # The identity provider's metadata answers 503: a failed discovery.
        assert httpx2.post(url, headers=headers, timeout=10).status_code == 401
        assert "/.well-known/openid-configuration" in idp.requests
        after_discovery = _fetch_failures(env)
        assert after_discovery[("discovery", "http_status")] == 1
        assert after_discovery[("jwks", "http_status")] == 0

        # Discovery works now, but the JWKS answers 500: a failed key fetch.
        idp.discovery_up = True
        time.sleep(1.1)  # ENGRAM_JWKS_MIN_REFRESH_SECONDS
        assert httpx2.post(url, headers=headers, timeout=10).status_code == 401
        assert "/jwks" in idp.requests
        after_jwks = _fetch_failures(env)
        assert after_jwks[("jwks", "http_status")] == 1
        assert after_jwks[("discovery", "http_status")] == 1
        assert sum(after_jwks.values()) == 2


def test_failed_client_metadata_document_fetches_are_counted(db_settings):
    closed_port = free_port()  # nothing listens there
    with (
        FailingDocuments() as host,
        serve(
            db_settings,
            ENGRAM_AUTH_MODE="builtin",
            ENGRAM_EMBEDDING_PROVIDER="none",
            ENGRAM_CLIENT_METADATA_ALLOW_HTTP_LOOPBACK="true",
            ENGRAM_AUTHORIZE_PER_MINUTE="1000",
        ) as running,
    ):

        def authorize(client_id: str) -> httpx2.Response:
            return httpx2.get(
                f"{running.base}/authorize",
                params={
                    "response_type": "code",
                    "client_id": client_id,
                    "redirect_uri": "http://127.0.0.1:33418/callback",
                    "code_challenge": "x" * 43,
                    "code_challenge_method": "S256",
                    "resource": running.url,
                },
                timeout=10,
            )

        assert authorize(f"{host.url}/clients/missing.json").status_code == 400
        assert "/clients/missing.json" in host.requests
        assert authorize(f"http://127.0.0.1:{closed_port}/clients/app.json").status_code == 400
        # A refusal is remembered briefly: asking again fetches (and counts) nothing.
        assert authorize(f"{host.url}/clients/missing.json").status_code == 400
        assert host.requests.count("/clients/missing.json") == 1
        counted = _fetch_failures(running.env)
        assert counted[("client_metadata", "http_status")] == 1
        assert counted[("client_metadata", "unreachable")] == 1
        assert sum(counted.values()) == 2
