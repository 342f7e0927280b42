"""The chart's operational contract, beyond what tests/test_deploy.py checks for every value set:
renders that never change by themselves, the chart as a subchart, the CloudNativePG example, the
alert rules as the chart narrows them, runbook links, and a dashboard that never sums across
deployments."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml
from helm_python import _native

from tests.support.chart import (
    CHART,
    CNPG_EXAMPLE,
    CUSTOM_GROUPS,
    EXTERNAL_DB,
    ISSUER,
    NAMESPACE,
    VALUE_SETS,
    crd_schemas,
    lint,
    loaded_chart,
    merge,
    promtool,
    render,
    rendered,
    validate_custom_resource,
)
from tests.support.server import ROOT

RULES = CHART / "files" / "prometheus-rules.yaml"
DASHBOARD = CHART / "files" / "grafana-dashboard.json"
OPERATIONS = ROOT / "docs" / "operations.md"


# --- nothing changes from one render to the next -------------------------------------------


@pytest.mark.parametrize("name", VALUE_SETS)
def test_every_render_is_the_same(name: str) -> None:
    """No generated password, timestamp or random name: a GitOps tool rendering the chart again
    finds nothing to change, and the pods' checksums roll them only when a setting changed."""
    again = render(VALUE_SETS[name])
    assert again.objects == rendered(name).objects
    assert again.notes == rendered(name).notes


def test_chart_has_no_random_or_time_functions() -> None:
    templates = "".join(p.read_text() for p in sorted((CHART / "templates").iterdir()))
    actions = [a for a in re.findall(r"\{\{(.*?)\}\}", templates, re.S) if not a.strip("- ").startswith("/*")]
    assert actions
    called = re.compile(r"\b(rand\w*|uuidv4|now|date\w*|genCA|genPrivateKey|genSelfSignedCert)\b")
    code = [re.sub(r'"(?:[^"\\]|\\.)*"', '""', a) for a in actions]  # string literals are not calls
    assert not [a for a in code if called.search(a)]


def test_bundled_database_needs_its_passwords() -> None:
    """Without passwords, a Secret of one's own, or the Secret an earlier install left (which
    `lookup` finds; nothing here has a cluster), the chart refuses rather than invent passwords
    that the next render would change."""
    values = {"auth": {"oidc": {"issuer": ISSUER}}, "postgresql": {"enabled": True}}
    with pytest.raises(helm.HelmError) as caught:
        render(values)
    assert "postgresql.auth.existingSecret" in str(caught.value)
    with pytest.raises(helm.HelmError):
        render(merge(values, {"postgresql": {"auth": {"adminPassword": "only-one"}}}))
    render(merge(values, {"postgresql": {"auth": {"existingSecret": "engram-db-passwords"}}}))


# --- every Kubernetes minor the chart supports -----------------------------------------------

# tests/test_deploy.py lints and validates every value set for the oldest and newest; the minors
# between get the value sets that render the most kinds of object.
BETWEEN = [f"1.{minor}.0" for minor in range(29, 35)]
RICHEST = ["ingress-bundled-monitoring-hpa", "extras", "httproute", "cloudnative-pg-example"]


@pytest.mark.parametrize("kube", BETWEEN)
@pytest.mark.parametrize("name", RICHEST)
def test_lints_and_validates_for_every_minor(name: str, kube: str) -> None:
    lint(VALUE_SETS[name], kube)
    for obj in rendered(name).objects:
        if obj["apiVersion"].split("/")[0] in CUSTOM_GROUPS:
            continue
        try:
            kubernetes_validate.validate(obj, kube, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} is not valid for {kube}: {exc.message}")


# --- the chart as a subchart ---------------------------------------------------------------


def _chart_version() -> str:
    return yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]


def test_renders_as_a_subchart_with_globals(tmp_path: Path) -> None:
    """A parent chart's `global` values reach every subchart; the schema must accept them."""
    parent = tmp_path / "platform"
    shutil.copytree(CHART, parent / "charts" / "engram")
    (parent / "Chart.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v2",
                "name": "platform",
                "version": "1.0.0",
                "dependencies": [{"name": "engram", "version": _chart_version()}],
            }
        )
    )
    (parent / "values.yaml").write_text(
        yaml.safe_dump(
            {
                "global": {"imageRegistry": "registry.example.com", "storageClass": "fast"},
                "engram": {"auth": {"oidc": {"issuer": ISSUER}}, "database": EXTERNAL_DB},
            }
        )
    )
    chart = helm.Chart.load(parent)
    options = {"name": "platform", "namespace": NAMESPACE, "is_install": True, "kube_version": "v1.35.0"}
    files = json.loads(_native.call_string("helm_render", chart._raw(), json.dumps({}), json.dumps(options)))
    objects = [doc for path, text in files.items() if path.endswith(".yaml") for doc in yaml.safe_load_all(text) if doc]
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    assert deployment["metadata"]["name"] == "platform-engram"
    # And the chart alone accepts `global` too.
    loaded_chart().validate_schema({"global": {"imageRegistry": "registry.example.com"}})


# --- custom resources ----------------------------------------------------------------------


def test_custom_resource_check_refuses_what_the_api_server_would() -> None:
    """The released CRD schemas catch a misspelt field, a wrong type, a missing parent."""
    route = rendered("httproute").one("HTTPRoute")
    validate_custom_resource(route)
    for broken in (
        {**route, "spec": {**route["spec"], "hostname": ["memory.example.com"]}},  # misspelt
        {**route, "spec": {**route["spec"], "parentRefs": [{"namespace": "x"}]}},  # no name
        {**route, "spec": {**route["spec"], "rules": [{"backendRefs": [{"name": "engram", "port": "http"}]}]}},
    ):
        with pytest.raises(pytest.fail.Exception):
            validate_custom_resource(broken)
    assert {kind for _, kind in crd_schemas()} >= {"HTTPRoute", "ServiceMonitor", "PrometheusRule", "Cluster"}


def test_http_route_needs_a_gateway() -> None:
    with pytest.raises(helm.HelmError) as caught:
        render(merge(VALUE_SETS["noingress-nobundled-nomonitoring-nohpa"], {"httpRoute": {"enabled": True}}))
    assert "httpRoute.parentRefs" in str(caught.value)


# --- the CloudNativePG example ---------------------------------------------------------------


def test_cloudnative_pg_example_fits_its_values() -> None:
    """The Cluster is valid for CloudNativePG, and the chart's values name the Secrets it makes."""
    documents = [d for d in yaml.safe_load_all((CNPG_EXAMPLE / "cluster.yaml").read_text()) if d]
    (cluster,) = [d for d in documents if d["kind"] == "Cluster"]
    (owner,) = [d for d in documents if d["kind"] == "Secret"]
    validate_custom_resource(cluster)
    values = VALUE_SETS["cloudnative-pg-example"]
    spec = cluster["spec"]
    namespace = cluster["metadata"]["namespace"]
    # The server: the operator's Secret for the database's initial owner, key `uri`.
    assert values["existingSecret"] == f"{cluster['metadata']['name']}-app"
    assert values["existingSecretKeys"]["databaseUrl"] == "uri"
    assert values["existingSecretEnvFrom"] is False
    initdb = spec["bootstrap"]["initdb"]
    assert initdb["owner"] == "engram_app"
    # ... which keeps no ownership: no CREATE on the database, as Engram's run-time role must.
    assert f"ALTER DATABASE {initdb['database']} OWNER TO postgres" in initdb["postInitApplicationSQL"]
    for extension in ("age", "vector", "pg_trgm"):
        assert f"CREATE EXTENSION IF NOT EXISTS {extension}" in initdb["postInitApplicationSQL"]
    assert spec["postgresql"]["shared_preload_libraries"] == ["age"]
    # Migrations: the superuser, from your Secret, which is also the cluster's superuserSecret.
    assert spec["enableSuperuserAccess"] is True
    assert spec["superuserSecret"]["name"] == owner["metadata"]["name"] == values["migrations"]["existingSecret"]
    assert owner["metadata"]["namespace"] == namespace
    assert owner["stringData"]["username"] == "postgres"
    owner_url = owner["stringData"][values["migrations"]["existingSecretKey"]]
    assert owner_url.endswith(f"@{cluster['metadata']['name']}-rw.{namespace}:5432/{initdb['database']}")
    # The network policy lets the server reach the cluster's instances.
    egress = values["networkPolicy"]["egress"]
    assert egress["enabled"] and any(
        peer.get("podSelector", {}).get("matchLabels") == {"cnpg.io/cluster": cluster["metadata"]["name"]}
        for rule in egress["extra"]
        for peer in rule["to"]
    )
    # The image is the database image of this repository (uid 999), with AGE and pgvector.
    assert spec["imageName"].endswith("/engram-postgres:17") and spec["postgresUID"] == 999
    assert "postgresql-17-age" in (ROOT / "sql" / "Dockerfile").read_text()


# --- alert rules -------------------------------------------------------------------------------


def _rule_groups(name: str) -> list[dict[str, Any]]:
    return rendered(name).one("PrometheusRule")["spec"]["groups"]


@pytest.mark.parametrize("name", ["noingress-nobundled-monitoring-nohpa", "httproute", "cloudnative-pg-example"])
def test_rendered_rules_pass_promtool(name: str, tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": _rule_groups(name)}))
    result = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_rendered_rules_alert_for_their_own_release_only(tmp_path: Path) -> None:
    """Two releases in two namespaces, both down: each PrometheusRule speaks for its own."""
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": _rule_groups("noingress-nobundled-monitoring-nohpa")}))
    runbook = "https://github.com/engram-graph/engram-graph/blob/main/docs/operations.md#engramdown"
    down = {
        "summary": "Engram instance a is not being scraped",
        "description": (
            "Prometheus cannot scrape a for 2 minutes: the process is down or its metrics port is unreachable."
        ),
        "runbook_url": runbook,
    }
    test = {
        "rule_files": [str(path)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": f'up{{namespace="{NAMESPACE}", job="engram", instance="a"}}', "values": "0x10"},
                    {"series": 'up{namespace="other", job="engram", instance="b"}', "values": "0x10"},
                    {"series": f'engram_database_up{{namespace="{NAMESPACE}", job="engram"}}', "values": "1x10"},
                    {"series": 'engram_database_up{namespace="other", job="engram"}', "values": "0x10"},
                ],
                "alert_rule_test": [
                    {
                        "eval_time": "5m",
                        "alertname": "EngramDown",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "critical",
                                    "namespace": NAMESPACE,
                                    "job": "engram",
                                    "instance": "a",
                                },
                                "exp_annotations": down,
                            }
                        ],
                    },
                    {"eval_time": "5m", "alertname": "EngramDatabaseUnreachable", "exp_alerts": []},
                ],
            }
        ],
    }
    test_file = tmp_path / "test.yaml"
    test_file.write_text(yaml.safe_dump(test))
    result = subprocess.run([promtool(), "test", "rules", str(test_file)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def _slug(heading: str) -> str:
    """The anchor a Markdown renderer (GitHub, GitLab) gives a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_alert_links_to_its_runbook_section() -> None:
    """By default to the project's own docs/operations.md; the chart to where the operator publishes it."""
    rules = [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]
    anchors = {_slug(line.lstrip("#")) for line in OPERATIONS.read_text().splitlines() if line.startswith("#")}
    rules = [rule for rule in rules if "alert" in rule]  # recording rules have no runbook
    for rule in rules:
        url = rule["annotations"]["runbook_url"]
        base, _, anchor = url.partition("#")
        assert base == "https://github.com/engram-graph/engram-graph/blob/main/docs/operations.md", rule["alert"]
        assert anchor == rule["alert"].lower() and anchor in anchors, f"{rule['alert']}: no section #{anchor}"
        assert rule["labels"]["severity"] in {"critical", "warning"}
    # The chart points them where the operator publishes the runbook.
    base = VALUE_SETS["httproute"]["metrics"]["prometheusRule"]["runbookBaseUrl"]
    for group in _rule_groups("httproute"):
        for rule in group["rules"]:
            if "alert" in rule:
                assert rule["annotations"]["runbook_url"] == f"{base}#{rule['alert'].lower()}"
    assert 'namespace="memory", job="engram-pods"' in _rule_groups("httproute")[0]["rules"][0]["expr"]


def test_notes_warn_when_alerts_select_series_nothing_scrapes() -> None:
    values = merge(
        VALUE_SETS["noingress-nobundled-monitoring-nohpa"], {"metrics": {"serviceMonitor": {"enabled": False}}}
    )
    assert 'the alerts select namespace="memory", job="engram"' in render(values).notes
    assert "the alerts select" not in rendered("noingress-nobundled-monitoring-nohpa").notes
    own = merge(values, {"metrics": {"prometheusRule": {"selector": 'job="kubernetes-pods"'}}})
    assert "the alerts select" not in render(own).notes


_AGGREGATION = re.compile(r"\b(sum|min|max|avg|count|topk|bottomk|quantile|stddev)\b\s*(by\s*\(([^)]*)\))?\s*\(")


def _groupings(expr: str) -> list[set[str] | None]:
    """The labels of each aggregation in a PromQL expression (None: aggregated over everything)."""
    return [
        {label.strip() for label in match.group(3).split(",")} if match.group(2) else None
        for match in _AGGREGATION.finditer(expr)
    ]


def test_alerts_never_aggregate_across_deployments() -> None:
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            expr, name = rule["expr"], rule.get("alert") or rule["record"]
            if "absent(" in expr:  # absence is of the whole selector: nothing to group
                continue
            for grouping in _groupings(expr):
                assert grouping is not None and {"namespace", "job"} <= grouping, (name, expr)
            assert 'job=~".*engram.*"' in expr, name


def _slo_rules() -> dict[str, dict[str, Any]]:
    (group,) = [g for g in yaml.safe_load(RULES.read_text())["groups"] if g["name"] == "engram-slo"]
    return {r.get("alert") or r["record"]: r for r in group["rules"]}


def test_availability_leaves_out_probes_and_scrapes() -> None:
    for name, rule in _slo_rules().items():
        if name.startswith("engram:slo_availability"):
            selectors = re.findall(r"engram_http_requests_total\{([^}]*)\}", rule["expr"])
            assert selectors and all('route!~"/healthz|/readyz|/metrics"' in s for s in selectors), name


def test_every_window_records_the_same_ratio() -> None:
    """The seven windows of each objective differ in their window alone, and each burn-rate alert
    pairs a long window with one a twelfth as long, at the workbook's burn rates."""
    rules = _slo_rules()
    windows = ["5m", "30m", "1h", "2h", "6h", "1d", "3d"]
    for sli in ("availability", "latency"):
        first = rules[f"engram:slo_{sli}_errors:ratio_rate5m"]["expr"]
        for window in windows:
            assert rules[f"engram:slo_{sli}_errors:ratio_rate{window}"]["expr"] == first.replace("[5m]", f"[{window}]")
    pairs = {
        "EngramErrorBudgetBurn": ("availability", "0.999", [("1h", "5m", "14.4"), ("6h", "30m", "6")]),
        "EngramErrorBudgetBurnSlow": ("availability", "0.999", [("1d", "2h", "3"), ("3d", "6h", "1")]),
        "EngramLatencyBudgetBurn": ("latency", "0.99", [("1h", "5m", "14.4"), ("6h", "30m", "6")]),
        "EngramLatencyBudgetBurnSlow": ("latency", "0.99", [("1d", "2h", "3"), ("3d", "6h", "1")]),
    }
    for alert, (sli, objective, windows_) in pairs.items():
        found = re.findall(
            rf"engram:slo_{sli}_errors:ratio_rate(\w+)\{{[^}}]*\}} > \(([\d.]+) \* \(1 - ([\d.]+)\)\)",
            rules[alert]["expr"],
        )
        expected = [(w, factor, objective) for long, short, factor in windows_ for w in (long, short)]
        assert found == expected, alert


def test_the_chart_sets_the_objectives(tmp_path: Path) -> None:
    values = merge(
        VALUE_SETS["noingress-nobundled-monitoring-nohpa"],
        {"metrics": {"prometheusRule": {"objectives": {"availability": 0.99, "latency": 0.999}}}},
    )
    groups = render(values).one("PrometheusRule")["spec"]["groups"]
    rules = {r.get("alert"): r["expr"] for g in groups for r in g["rules"]}
    assert "(1.0 - 0.99)" in rules["EngramErrorBudgetBurn"] and "0.999" not in rules["EngramErrorBudgetBurn"]
    assert (
        "(1.0 - 0.999)" in rules["EngramLatencyBudgetBurn"] and "(1.0 - 0.99)" not in rules["EngramLatencyBudgetBurn"]
    )
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    result = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    for refused in ({"availability": 1}, {"latency": "99%"}, {"other": 0.9}):
        with pytest.raises(helm.HelmError):
            render(merge(values, {"metrics": {"prometheusRule": {"objectives": refused}}}))


# --- dashboard ---------------------------------------------------------------------------------


def test_dashboard_is_per_deployment() -> None:
    """Every panel is filtered by the namespace and job variables and keeps them apart."""
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    for name in ("namespace", "job"):
        assert variables[name]["type"] == "query" and variables[name]["includeAll"] is True
        assert variables[name]["allValue"] == ".*"
    assert "$namespace" in variables["job"]["definition"]  # jobs of the chosen namespaces
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for selector in re.findall(r"\{([^}]*)\}", expr):
                if "$" in selector or "=" in selector:
                    assert 'namespace=~"$namespace", job=~"$job"' in selector, (panel["title"], expr)
            groupings = _groupings(expr)
            assert groupings, (panel["title"], expr)
            for grouping in groupings:
                assert grouping is not None and {"namespace", "job"} <= grouping, (panel["title"], expr)
            assert "{{namespace}}/{{job}}" in target["legendFormat"], panel["title"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_schema_accepts_the_documented_kubernetes_objects() -> None:
    """extraEnv, extraVolumes, sidecars ... are Kubernetes objects: the rendered pods carry them as given."""
    pod = rendered("extras").one("Deployment")["spec"]["template"]["spec"]
    extras = VALUE_SETS["extras"]
    assert pod["initContainers"] == extras["initContainers"]
    assert pod["containers"][1:] == extras["sidecars"]
    job = rendered("extras").one("Job")["spec"]["template"]["spec"]
    assert job["volumes"][1:] == extras["extraVolumes"]
    assert "initContainers" not in job and len(job["containers"]) == 1  # the Job runs the migrator only
    jsonschema.validate(extras["extraEnv"], {"type": "array"})
