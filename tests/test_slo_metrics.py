"""What an SRE reads from a running server: every OAuth and console request under its own route
label (the route's template, so the label stays bounded whatever paths are asked for), the build's
revision, the embedding breaker's state and the event loop's lag; and the tracing resource as the
OpenTelemetry variables name it."""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid

import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.observability.tracing import resource
from tests.support.server import ROOT, serve_builtin


def _samples(env: dict[str, str], name: str) -> list[tuple[dict[str, str], float]]:
    text = httpx2.get(f"http://127.0.0.1:{env['ENGRAM_METRICS_PORT']}/metrics", timeout=5).text
    return [(s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]


def _routes(env: dict[str, str]) -> dict[str, float]:
    counts: dict[str, float] = {}
    for labels, value in _samples(env, "engram_http_requests_total"):
        counts[labels["route"]] = counts.get(labels["route"], 0) + value
    return counts


@pytest.fixture(scope="module")
def running(db_settings):
    with serve_builtin(db_settings, ENGRAM_REVISION="0123abcd") as server:
        yield server


def test_oauth_and_console_requests_have_bounded_route_labels(running):
    http = httpx2.Client(base_url=running.base, timeout=10, follow_redirects=False)
    asked = {
        "/.well-known/oauth-authorization-server": ("GET", None),
        "/.well-known/jwks.json": ("GET", None),
        "/.well-known/oauth-protected-resource": ("GET", None),
        "/.well-known/oauth-protected-resource/mcp": ("GET", None),
        "/authorize": ("GET", None),
        "/token": ("POST", {"grant_type": "nonsense"}),
        "/revoke": ("POST", {"token": "x"}),
        "/register": ("POST", None),
        "/oauth/consent": ("GET", None),
        "/oauth/sign-in": ("POST", {"x": "y"}),
        "/console": ("GET", None),
        "/console/sign-in": ("GET", None),
        "/console/callback": ("GET", None),
        "/console/find": ("GET", None),
        "/console/graph": ("GET", None),
        "/console/api/graph": ("GET", None),
        "/console/admin": ("GET", None),
    }
    for path, (method, form) in asked.items():
        http.request(method, path, data=form)
    # Paths carrying ids and versions: one label each, however many different ones are asked for.
    for _ in range(20):
        http.get(f"/console/entity/{uuid.uuid4()}")
        http.post(f"/console/entity/{uuid.uuid4()}/fields", data={"csrf": "x"})
        http.get(f"/console/static/{uuid.uuid4().hex[:12]}/console.css")
        http.get(f"/nothing-{uuid.uuid4().hex}")  # no route at all
    routes = _routes(running.env)
    for path in asked:
        assert routes.get(path, 0) >= 1, (path, sorted(routes))
    assert routes["/console/entity/{id}"] == 20
    assert routes["/console/entity/{id}/fields"] == 20
    assert routes["/console/static/{version}/{name}"] == 20
    assert routes["other"] == 20  # only the paths no route serves
    assert not [r for r in routes if "nothing" in r or r.count("-") > 4]


def test_build_info_names_the_revision(running):
    (info,) = _samples(running.env, "engram_build_info")
    assert info[0]["revision"] == "0123abcd" and info[0]["version"]


def test_breaker_and_event_loop_gauges_are_exported(running):
    breaker = {labels["state"]: value for labels, value in _samples(running.env, "engram_embedding_breaker_state")}
    # No provider here: nothing can trip it (the breaker's transitions: tests/test_embedder_breaker.py).
    assert breaker == {"closed": 1.0, "open": 0.0, "half_open": 0.0}
    assert _samples(running.env, "engram_embedding_breaker_failures") == [({}, 0.0)]
    # The first window of probes ends 5 s after start-up; then the gauge holds a measured lag.
    deadline = time.monotonic() + 30
    while not (lag := _samples(running.env, "engram_event_loop_lag_seconds")) or lag[0][1] == 0:
        assert time.monotonic() < deadline, lag
        time.sleep(0.5)
    assert 0 < lag[0][1] < 60


def test_the_tracing_resource_follows_the_otel_variables(monkeypatch):
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    plain = resource("1.2.3").attributes
    assert plain["service.name"] == "engram" and plain["service.version"] == "1.2.3"
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=prod,service.name=from-attributes")
    assert resource("1.2.3").attributes["service.name"] == "from-attributes"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "memory-eu")
    named = resource("1.2.3").attributes
    assert named["service.name"] == "memory-eu"  # OTEL_SERVICE_NAME wins over the attributes' own
    assert named["deployment.environment.name"] == "prod" and named["service.version"] == "1.2.3"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (scripts/system-deps.sh)")
def test_burn_rate_alerts_fire_on_synthetic_series():
    """tests/slo_test.yaml: a fast burn pages, a slow one opens a ticket, a spike that ended stops
    paging, and a deployment within its objectives stays quiet beside them."""
    tested = subprocess.run(
        ["promtool", "test", "rules", "slo_test.yaml"], cwd=ROOT / "tests", capture_output=True, text=True
    )
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr
