"""The Helm chart and the Dockerfiles, checked without a cluster.

Helm's own Go code (helm-python-sdk) lints and renders the chart for a matrix of value sets; every
rendered object is validated against the Kubernetes 1.28 and 1.35 API schemas (kubernetes-validate,
strict), custom resources against their projects' released CRD schemas (tests/data/crds), and its
security and operability properties are asserted. hadolint checks both Dockerfiles, promtool the
alert rules and the dashboard's queries. tests/test_chart_*.py check single features further.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from pydantic import ValidationError

from app.config import ENDPOINT_PATHS, Settings
from tests.support.chart import (
    BUNDLED_PASSWORDS,
    CHART,
    CUSTOM_GROUPS,
    EXTERNAL_DB,
    ISSUER,
    KUBE_VERSIONS,
    NAMESPACE,
    VALUE_SETS,
    lint,
    loaded_chart,
    merge,
    promtool,
    render,
    rendered,
    validate_custom_resource,
)
from tests.support.server import ROOT

MONITORING_APIS = (
    "monitoring.coreos.com/v1",
    "monitoring.coreos.com/v1/ServiceMonitor",
    "monitoring.coreos.com/v1/PrometheusRule",
)
SECRET_KEYS = {
    "ENGRAM_DATABASE_URL",
    "ENGRAM_ADMIN_DATABASE_URL",
    "ENGRAM_EMBEDDING_API_KEY",
    "ENGRAM_OIDC_CLIENT_SECRET",
    "ENGRAM_UPSTREAM_PROVIDERS",
}
# Settings the chart writes that app/config.py may not read yet (identity provider, metrics port,
# embeddings); any other ENGRAM_* name the chart writes must be a field of Settings.
AHEAD_OF_SERVER = {
    *(f"ENGRAM_EMBEDDING_{n}" for n in ("PROVIDER", "MODEL", "BASE_URL", "API_KEY", "DIMENSIONS")),
}

_PROVIDER = {"name": "idp", "label": "IdP", "issuer": ISSUER, "clientId": "engram", "clientSecret": "s"}


def secret_data(secret: dict[str, Any]) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}


def is_bundled(name: str) -> bool:
    return bool(VALUE_SETS[name].get("postgresql", {}).get("enabled"))


# --- helm lint and the Kubernetes API schemas ---------------------------------------------


@pytest.mark.parametrize("kube", KUBE_VERSIONS)
@pytest.mark.parametrize("name", VALUE_SETS)
def test_lint_strict(name: str, kube: str) -> None:
    lint(VALUE_SETS[name], kube)


@pytest.mark.parametrize("kube", KUBE_VERSIONS)
@pytest.mark.parametrize("name", VALUE_SETS)
def test_manifests_match_kubernetes_schemas(name: str, kube: str) -> None:
    objects = rendered(name).objects
    assert objects
    for obj in objects:
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["apiVersion"].split("/")[0] in CUSTOM_GROUPS:  # kubernetes-validate has no schemas for these
            validate_custom_resource(obj)
            continue
        try:
            kubernetes_validate.validate(obj, kube, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{where} is not valid for Kubernetes {kube}: {exc.message} at {list(exc.path)}")


# --- what every workload must be ----------------------------------------------------------


@pytest.mark.parametrize("name", VALUE_SETS)
def test_pods_are_locked_down(name: str) -> None:
    for where, pod in rendered(name).pod_specs():
        assert pod["securityContext"]["runAsNonRoot"] is True, where
        assert pod["securityContext"]["runAsUser"] != 0, where
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, where
        assert pod["automountServiceAccountToken"] is False, where
        for container in pod["containers"] + pod.get("initContainers", []):
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True, where
            assert security["allowPrivilegeEscalation"] is False, where
            assert security["capabilities"]["drop"] == ["ALL"], where
            assert "add" not in security["capabilities"], where
            assert security.get("privileged", False) is False, where
            resources = container["resources"]
            assert {"cpu", "memory"} <= resources["requests"].keys(), where
            assert "memory" in resources["limits"], where


@pytest.mark.parametrize("name", VALUE_SETS)
def test_images_are_pinned(name: str) -> None:
    for where, pod in rendered(name).pod_specs():
        for container in pod["containers"] + pod.get("initContainers", []):
            image = container["image"]
            reference = image.split("@", 1)[0]
            tag = reference.rsplit("/", 1)[-1].partition(":")[2]
            assert tag, f"{where}: {image} has no tag"
            assert tag != "latest", f"{where}: {image}"


@pytest.mark.parametrize("name", VALUE_SETS)
def test_server_deployment(name: str) -> None:
    r = rendered(name)
    deployment = r.one("Deployment", "engram")
    pod = deployment["spec"]["template"]["spec"]
    server, *sidecars = pod["containers"]
    assert server["name"] == "engram" and server["args"] == ["serve"]
    assert [c["name"] for c in sidecars] == [c["name"] for c in VALUE_SETS[name].get("sidecars", [])]
    assert [c["name"] for c in pod.get("initContainers", [])] == [
        c["name"] for c in VALUE_SETS[name].get("initContainers", [])
    ]
    assert server["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert server["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert server["startupProbe"]["httpGet"]["path"] == "/healthz"
    ports = {p["name"]: p["containerPort"] for p in server["ports"]}
    assert ports["http"] == 8000
    config = r.one("ConfigMap", "engram")["data"]
    assert config["ENGRAM_PORT"] == "8000" and config["ENGRAM_HOST"] == "0.0.0.0"  # noqa: S104 (in a pod)
    assert ports.get("metrics", 0) == int(config["ENGRAM_METRICS_PORT"])
    assert config["ENGRAM_AUTH_MODE"] == VALUE_SETS[name].get("auth", {}).get("mode", "oidc")
    # Settings come from the release's ConfigMap and a Secret, whichever provides it, the secret
    # ones of your Secret key by key.
    values = VALUE_SETS[name]
    configmap, *secrets = server["envFrom"]
    assert configmap == {"configMapRef": {"name": "engram"}}
    extra_sources = values.get("extraEnvFrom", [])
    assert secrets[len(secrets) - len(extra_sources) :] == extra_sources
    own = secrets[: len(secrets) - len(extra_sources)]
    env = {e["name"]: e for e in server.get("env", [])}
    existing = values.get("existingSecret")
    if existing:
        assert own == ([{"secretRef": {"name": existing}}] if values.get("existingSecretEnvFrom", True) else [])
        key = values.get("existingSecretKeys", {}).get("databaseUrl", "ENGRAM_DATABASE_URL")
        ref = env["ENGRAM_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": existing, "key": key}  # required: a pod without it does not start
        optional = {n for n, e in env.items() if e.get("valueFrom", {}).get("secretKeyRef", {}).get("optional")}
        keys = values.get("existingSecretKeys", {})
        expected = {"ENGRAM_OIDC_CLIENT_SECRET", "ENGRAM_EMBEDDING_API_KEY", "ENGRAM_UPSTREAM_PROVIDERS"}
        assert optional == {n for n in expected if keys.get(_SECRET_KEY_VALUES[n], n)}
    else:
        assert own == [{"secretRef": {"name": "engram"}}]
        r.one("Secret", "engram")
    for extra in values.get("extraEnv", []):
        assert env[extra["name"]] == extra
    # Writable /tmp, and what the operator mounts.
    mounts = [m["mountPath"] for m in server["volumeMounts"]]
    assert mounts == ["/tmp", *(m["mountPath"] for m in values.get("extraVolumeMounts", []))]
    volumes = [v["name"] for v in pod["volumes"]]
    assert volumes == ["tmp", *(v["name"] for v in values.get("extraVolumes", []))]
    # Draining: the endpoint is withdrawn during preStop, then the app gets its grace period.
    sleep = int(server["lifecycle"]["preStop"]["exec"]["command"][1])
    grace = int(config["ENGRAM_SHUTDOWN_GRACE_SECONDS"])
    assert pod["terminationGracePeriodSeconds"] > sleep + grace
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert "checksum/config" in annotations
    strategy = deployment["spec"]["strategy"]["rollingUpdate"]
    assert strategy["maxUnavailable"] == 0
    service = r.one("Service", "engram")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= set(ports)


_SECRET_KEY_VALUES = {
    "ENGRAM_OIDC_CLIENT_SECRET": "oidcClientSecret",
    "ENGRAM_EMBEDDING_API_KEY": "embeddingApiKey",
    "ENGRAM_UPSTREAM_PROVIDERS": "upstreamProviders",
}


@pytest.mark.parametrize("name", VALUE_SETS)
def test_secrets_stay_out_of_configmaps(name: str) -> None:
    r = rendered(name)
    for configmap in r.of_kind("ConfigMap"):
        keys = set(configmap.get("data") or {})
        assert not keys & SECRET_KEYS, configmap["metadata"]["name"]
        # Names that sound secret, except numbers about tokens (lifetimes, rates).
        secretive = [k for k in keys if re.search("PASSWORD|SECRET|TOKEN|API_KEY", k)]
        assert not [k for k in secretive if not re.search("_(SECONDS|PER_MINUTE)$", k)], configmap["metadata"]["name"]
    secrets = [value for s in r.of_kind("Secret") for value in secret_data(s).values()]
    exposed = [o for o in r.objects if o["kind"] != "Secret" for v in secrets if v and v in json.dumps(o)]
    assert not exposed, [f"{o['kind']}/{o['metadata']['name']}" for o in exposed]
    if VALUE_SETS[name].get("existingSecret"):
        assert not [s for s in r.of_kind("Secret") if s["metadata"]["name"].startswith("engram")]
        return
    # The server gets its own URL, never the owner's.
    server = secret_data(r.one("Secret", "engram"))
    assert "ENGRAM_ADMIN_DATABASE_URL" not in server
    if "database" in VALUE_SETS[name]:
        assert server["ENGRAM_DATABASE_URL"] == EXTERNAL_DB["url"]


@pytest.mark.parametrize("name", VALUE_SETS)
def test_migration_job_is_a_hook(name: str) -> None:
    r = rendered(name)
    jobs = r.of_kind("Job")
    values = VALUE_SETS[name]
    if name == "defaults" or values.get("migrations", {}).get("enabled") is False:
        assert not jobs  # no database configured, or migrations run by the operator
        return
    job = r.one("Job", "engram-migrate")
    annotations = job["metadata"]["annotations"]
    # With the bundled database the Job must wait for it, which exists only after install.
    events = "post-install,pre-upgrade" if is_bundled(name) else "pre-install,pre-upgrade"
    assert annotations["helm.sh/hook"] == events
    assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    assert container["args"] == ["migrate"]
    env = {e["name"]: e for e in container["env"]}
    for extra in values.get("extraEnv", []):
        assert env[extra["name"]] == extra
    extra_sources = values.get("extraEnvFrom", [])
    sources = container.get("envFrom", [])
    assert sources[len(sources) - len(extra_sources) :] == extra_sources
    own = sources[: len(sources) - len(extra_sources)]
    migrations = values.get("migrations", {})
    mine = migrations.get("existingSecret") or values.get("existingSecret")
    bundled_secret = values.get("postgresql", {}).get("auth", {}).get("existingSecret")
    if mine:
        # Your Secret, read key by key: the Job needs the owner's URL and nothing else.
        assert not own
        ref = env["ENGRAM_ADMIN_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
        assert ref["name"] == mine
        assert ref["key"] == migrations.get("existingSecretKey", "ENGRAM_ADMIN_DATABASE_URL")
        assert ref.get("optional", False) is not bool(migrations.get("existingSecret"))
        assert not [s for s in r.of_kind("Secret") if s["metadata"]["name"] == "engram-migrate"]
    elif bundled_secret:
        # Composed in the pod from your password Secret: the chart never sees the password.
        assert not own
        password = env["BUNDLED_POSTGRES_PASSWORD"]["valueFrom"]["secretKeyRef"]
        assert password == {"name": bundled_secret, "key": "POSTGRES_PASSWORD"}
        url = env["ENGRAM_ADMIN_DATABASE_URL"]["value"]
        assert url == "postgresql://postgres:$(BUNDLED_POSTGRES_PASSWORD)@engram-postgresql:5432/engram"
        assert not [s for s in r.of_kind("Secret") if s["metadata"]["name"] == "engram-migrate"]
    else:
        (source,) = own
        secret_name = source["secretRef"]["name"]
        # A hook Secret made just before the Job (the release's own are not there at pre-install),
        # deleted once it succeeded: the owner's URL is in the cluster only while migrations run.
        hook_secret = r.one("Secret", secret_name)
        hook = hook_secret["metadata"]["annotations"]
        assert hook["helm.sh/hook"] == events
        assert int(hook["helm.sh/hook-weight"]) < int(annotations["helm.sh/hook-weight"])
        assert hook["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        admin_url = secret_data(hook_secret)["ENGRAM_ADMIN_DATABASE_URL"]
        assert admin_url == EXTERNAL_DB["adminUrl"] or is_bundled(name)
    assert "serviceAccountName" not in pod  # the release's ServiceAccount may not exist yet


@pytest.mark.parametrize("name", [n for n in VALUE_SETS if is_bundled(n)])
def test_bundled_database_credentials_agree(name: str) -> None:
    r = rendered(name)
    service = r.one("Service", "engram-postgresql")["metadata"]["name"]
    own_secret = VALUE_SETS[name]["postgresql"]["auth"].get("existingSecret")
    if own_secret:
        # The pods compose the URLs from your Secret; the chart holds no password at all.
        assert not [s for s in r.of_kind("Secret") if s["metadata"]["name"] in ("engram-postgresql", "engram-migrate")]
        assert "ENGRAM_DATABASE_URL" not in secret_data(r.one("Secret", "engram"))
        (server,) = r.one("Deployment", "engram")["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e for e in server["env"]}
        ref = env["BUNDLED_POSTGRES_APP_PASSWORD"]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": own_secret, "key": "ENGRAM_APP_PASSWORD"}
        url = env["ENGRAM_DATABASE_URL"]["value"]
        assert url == f"postgresql://engram_app:$(BUNDLED_POSTGRES_APP_PASSWORD)@{service}:5432/engram"
        secret_name = own_secret
    else:
        passwords = secret_data(r.one("Secret", "engram-postgresql"))
        assert passwords == {
            "POSTGRES_PASSWORD": BUNDLED_PASSWORDS["adminPassword"],
            "ENGRAM_APP_PASSWORD": BUNDLED_PASSWORDS["appPassword"],
        }
        # Kept on uninstall, like the volume whose data it unlocks.
        assert r.one("Secret", "engram-postgresql")["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        app = urlsplit(secret_data(r.one("Secret", "engram"))["ENGRAM_DATABASE_URL"])
        admin = urlsplit(secret_data(r.one("Secret", "engram-migrate"))["ENGRAM_ADMIN_DATABASE_URL"])
        assert (app.username, unquote(app.password or "")) == ("engram_app", passwords["ENGRAM_APP_PASSWORD"])
        assert (admin.username, unquote(admin.password or "")) == ("postgres", passwords["POSTGRES_PASSWORD"])
        assert app.hostname == admin.hostname == service
        secret_name = "engram-postgresql"
    statefulset = r.one("StatefulSet", "engram-postgresql")
    (db,) = statefulset["spec"]["template"]["spec"]["containers"]
    # The database image each release publishes, of the chart's own release (tests/test_release.py).
    app_version = yaml.safe_load((ROOT / "helm/engram/Chart.yaml").read_text())["appVersion"]
    assert db["image"] == f"ghcr.io/engram-graph/engram-postgres:{app_version}"
    env = {e["name"]: e.get("valueFrom", {}).get("secretKeyRef", {}).get("name") for e in db["env"]}
    assert env["POSTGRES_PASSWORD"] == env["ENGRAM_APP_PASSWORD"] == secret_name
    claim = statefulset["spec"]["volumeClaimTemplates"][0]
    assert claim["spec"]["resources"]["requests"]["storage"] == "8Gi"
    policy = r.one("NetworkPolicy", "engram-postgresql")
    assert policy["spec"]["ingress"][0]["ports"] == [{"port": 5432, "protocol": "TCP"}]


@pytest.mark.parametrize("name", VALUE_SETS)
def test_scaling_and_disruption(name: str) -> None:
    r = rendered(name)
    deployment = r.one("Deployment", "engram")
    autoscaled = VALUE_SETS[name].get("autoscaling", {}).get("enabled", False)
    if autoscaled:
        hpa = r.one("HorizontalPodAutoscaler", "engram")
        assert "replicas" not in deployment["spec"]  # the autoscaler owns the count
        assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "engram"}
        assert {m["resource"]["name"] for m in hpa["spec"]["metrics"]} == {"cpu", "memory"}
    else:
        assert not r.of_kind("HorizontalPodAutoscaler")
        assert deployment["spec"]["replicas"] == VALUE_SETS[name].get("replicaCount", 2)
    pod = deployment["spec"]["template"]["spec"]
    if name == "no-extras":
        assert not r.of_kind("PodDisruptionBudget") and not r.of_kind("NetworkPolicy")
        assert "topologySpreadConstraints" not in pod
        return
    pdb = r.one("PodDisruptionBudget", "engram")
    assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    keys = [c["topologyKey"] for c in pod["topologySpreadConstraints"]]
    assert keys == ["topology.kubernetes.io/zone", "kubernetes.io/hostname"]
    policy = r.one("NetworkPolicy", "engram")
    assert policy["spec"]["podSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]} <= {"http", "metrics"}


def expected_public_url(values: dict[str, Any]) -> str:
    if values.get("ingress", {}).get("enabled"):
        return "https://memory.example.com"
    route = values.get("httpRoute", {})
    if route.get("enabled") and not route["hostnames"][0].startswith("*"):
        return f"https://{route['hostnames'][0]}"
    return f"http://engram.{NAMESPACE}.svc"


@pytest.mark.parametrize("name", VALUE_SETS)
def test_ingress_and_public_url(name: str) -> None:
    r = rendered(name)
    public_url = r.one("ConfigMap", "engram")["data"]["ENGRAM_PUBLIC_URL"]
    if VALUE_SETS[name].get("ingress", {}).get("enabled"):
        ingress = r.one("Ingress", "engram")
        assert ingress["spec"]["tls"] == [{"hosts": ["memory.example.com"], "secretName": "engram-tls"}]
        (rule,) = ingress["spec"]["rules"]
        backend = rule["http"]["paths"][0]["backend"]["service"]
        assert backend == {"name": "engram", "port": {"name": "http"}}
    else:
        assert not r.of_kind("Ingress")
    assert public_url == expected_public_url(VALUE_SETS[name])
    # The connector URL operators hand to assistants.
    assert f"{public_url}/mcp" in r.notes


@pytest.mark.parametrize("name", VALUE_SETS)
def test_http_route(name: str) -> None:
    r = rendered(name)
    route = VALUE_SETS[name].get("httpRoute", {})
    if not route.get("enabled"):
        assert not r.of_kind("HTTPRoute")
        return
    http_route = r.one("HTTPRoute", "engram")
    assert http_route["apiVersion"] == "gateway.networking.k8s.io/v1"
    spec = http_route["spec"]
    assert spec["parentRefs"] == route["parentRefs"]
    assert spec["hostnames"] == route["hostnames"]
    assert route["labels"].items() <= http_route["metadata"]["labels"].items()
    (rule,) = spec["rules"]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/"}}]
    service = r.one("Service", "engram")
    http_port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "http")
    assert rule["backendRefs"] == [{"name": service["metadata"]["name"], "port": http_port}]
    assert rule.get("timeouts", {}) == route.get("timeouts", {})
    gateways = ", ".join(f"{ref.get('namespace', NAMESPACE)}/{ref['name']}" for ref in route["parentRefs"])
    assert f"published by the HTTPRoute engram through {gateways}" in r.notes


def expected_rules(name: str) -> dict[str, Any]:
    """files/prometheus-rules.yaml as the release's PrometheusRule carries it: narrowed to the
    release's series, the runbook links pointing at the configured base."""
    rule_values = VALUE_SETS[name].get("metrics", {}).get("prometheusRule", {})
    selector = rule_values.get("selector") or f'namespace="{NAMESPACE}", job="engram"'
    text = (CHART / "files/prometheus-rules.yaml").read_text().replace('job=~".*engram.*"', selector)
    if base := rule_values.get("runbookBaseUrl"):
        text = text.replace(RUNBOOK_DEFAULT, base)
    objectives = {"availability": 0.999, "latency": 0.99} | rule_values.get("objectives", {})
    text = text.replace("(1 - 0.99)", f"(1.0 - {objectives['latency']})")
    text = text.replace("(1 - 0.999)", f"(1.0 - {objectives['availability']})")
    return yaml.safe_load(text)


RUNBOOK_DEFAULT = "https://github.com/engram-graph/engram-graph/blob/main/docs/operations.md"


@pytest.mark.parametrize("name", VALUE_SETS)
def test_monitoring_objects(name: str) -> None:
    r = rendered(name)
    metrics = VALUE_SETS[name].get("metrics", {})
    assert len(r.of_kind("ServiceMonitor")) == (metrics.get("serviceMonitor", {}).get("enabled") is True)
    assert len(r.of_kind("PrometheusRule")) == (metrics.get("prometheusRule", {}).get("enabled") is True)
    dashboards = [c for c in r.of_kind("ConfigMap") if c["metadata"]["name"] == "engram-dashboard"]
    assert len(dashboards) == bool(metrics.get("dashboard", {}).get("enabled"))
    if r.of_kind("ServiceMonitor"):
        monitor = r.one("ServiceMonitor")
        service = r.one("Service", "engram")
        assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["path"] == "/metrics"
        assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
        assert endpoint["port"] == ("http" if metrics.get("port") == 0 else "metrics")
    if r.of_kind("PrometheusRule"):
        groups = r.one("PrometheusRule")["spec"]["groups"]
        assert groups == expected_rules(name)["groups"]
        exprs = [rule["expr"] for group in groups for rule in group["rules"]]
        assert not [e for e in exprs if 'job=~".*engram.*"' in e]  # every selector is the release's
    for dashboard in dashboards:
        assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert dashboard["metadata"]["namespace"] == metrics["dashboard"].get("namespace", NAMESPACE)
        assert json.loads(dashboard["data"]["engram.json"]) == json.loads(
            (CHART / "files/grafana-dashboard.json").read_text()
        )


def test_monitoring_objects_follow_values_not_the_cluster() -> None:
    """Switched on by value only: the same objects whether or not the cluster serves the
    Prometheus operator's API, so `helm template` (GitOps tools) renders what `helm install` does."""
    for name in ("noingress-nobundled-nomonitoring-nohpa", "noingress-nobundled-monitoring-nohpa", "defaults"):
        without = render(VALUE_SETS[name])
        with_crds = render(VALUE_SETS[name], api_versions=MONITORING_APIS)
        assert without.objects == with_crds.objects, name
    assert not rendered("defaults").of_kind("ServiceMonitor") and not rendered("defaults").of_kind("PrometheusRule")


def test_identity_provider_settings() -> None:
    r = rendered("embedding-server-egress")
    config = r.one("ConfigMap", "engram")["data"]
    assert config["ENGRAM_OIDC_ISSUER"] == ISSUER
    assert config["ENGRAM_OIDC_CLIENT_ID"] == "engram"
    assert (config["ENGRAM_SCOPE_READ"], config["ENGRAM_SCOPE_WRITE"]) == ("memory.read", "memory.write")
    assert "ENGRAM_SCOPE_ADMIN" not in config  # unset: the server's default
    assert config["ENGRAM_TENANT_FALLBACK_CLAIMS"] == "org_id"
    assert secret_data(r.one("Secret", "engram"))["ENGRAM_OIDC_CLIENT_SECRET"] == "client-Secret-5"
    assert rendered("existing-secrets-apart").one("ConfigMap", "engram")["data"]["ENGRAM_TENANT_POLICY"] == "managed"
    assert "ENGRAM_TENANT_FALLBACK_CLAIMS" not in rendered("defaults").one("ConfigMap", "engram")["data"]


# The built-in authorization server's values and the settings they become, with their bounds.
BUILTIN_SETTINGS = {
    "localAccounts": "local_accounts",
    "clientRegistration": "client_registration",
    "clientMetadataDocuments": "client_metadata_documents",
    "accessTokenTtlSeconds": "access_token_ttl_seconds",
    "refreshTokenTtlSeconds": "refresh_token_ttl_seconds",
    "signingKeyReloadSeconds": "signing_key_reload_seconds",
    "unusedClientDays": "unused_client_days",
    "rateLimits.signInPerMinute": "sign_in_per_minute",
    "rateLimits.tokenPerMinute": "token_per_minute",
    "rateLimits.registerPerMinute": "register_per_minute",
    "rateLimits.authorizePerMinute": "authorize_per_minute",
    "rateLimits.signInMaxFailures": "sign_in_max_failures",
    "rateLimits.signInFailureWindowSeconds": "sign_in_failure_window_seconds",
}


def _at(tree: dict[str, Any], dotted: str) -> Any:
    for key in dotted.split("."):
        tree = tree[key]
    return tree


def test_builtin_authorization_server_settings() -> None:
    r = rendered("builtin")
    config = r.one("ConfigMap", "engram")["data"]
    assert config["ENGRAM_AUTH_MODE"] == "builtin"
    assert config["ENGRAM_PUBLIC_URL"] == "https://memory.example.com"
    assert config["ENGRAM_LOCAL_ACCOUNTS"] == "true"
    assert config["ENGRAM_CLIENT_REGISTRATION"] == "false"
    assert config["ENGRAM_CLIENT_METADATA_DOCUMENTS"] == "true"
    assert config["ENGRAM_ACCESS_TOKEN_TTL_SECONDS"] == "300"
    assert config["ENGRAM_REFRESH_TOKEN_TTL_SECONDS"] == "7776000"  # a large number, not 7.776e+06
    assert config["ENGRAM_SIGN_IN_PER_MINUTE"] == "10"
    assert config["ENGRAM_SIGN_IN_FAILURE_WINDOW_SECONDS"] == "3600"
    assert config["ENGRAM_TOKEN_PER_MINUTE"] == "60"
    assert config["ENGRAM_SCOPE_CLAIMS"] == "scope,permissions"
    # The identity provider's settings belong to mode oidc: here they would change the audience.
    assert not [k for k in config if k.startswith("ENGRAM_OIDC_")]
    # The providers' client secrets are in the Secret only, as the JSON list the server reads.
    assert "ENGRAM_UPSTREAM_PROVIDERS" not in config
    secret = secret_data(r.one("Secret", "engram"))
    assert "ENGRAM_OIDC_CLIENT_SECRET" not in secret
    providers = json.loads(secret["ENGRAM_UPSTREAM_PROVIDERS"])
    assert providers == [
        {
            "name": "google",
            "label": "Google",
            "issuer": "https://accounts.google.com/",
            "client_id": "engram.apps.googleusercontent.com",
            "client_secret": "upstream-Secret-6",
            "scopes": "openid email",
        },
        {
            "name": "corp-sso",
            "label": "Corp <SSO> & co",
            "issuer": ISSUER,
            "client_id": "engram",
            "client_secret": 'upstream-"Secret"-7',
        },
    ]
    for text in ("upstream-Secret-6", 'upstream-\\"Secret\\"-7'):  # as json.dumps writes it
        assert not [o for o in r.objects if o["kind"] != "Secret" and text in json.dumps(o)]
        assert text not in r.notes
    # How to add the first user, in the release's namespace and Deployment.
    assert f"kubectl -n {NAMESPACE} exec -it deploy/engram -- engram user add" in r.notes
    assert "engram member add alice --tenant acme --role admin" in r.notes
    assert "auth.oidc.issuer is not set" not in r.notes and "nobody can sign in" not in r.notes


def test_builtin_defaults() -> None:
    """Local accounts are off unless the operator turns them on; the notes say nobody can sign in."""
    r = rendered("builtin-defaults")
    config = r.one("ConfigMap", "engram")["data"]
    assert config["ENGRAM_AUTH_MODE"] == "builtin"
    assert config["ENGRAM_LOCAL_ACCOUNTS"] == "false"
    assert "ENGRAM_SCOPE_CLAIMS" not in config  # unset: the server's default
    assert "ENGRAM_UPSTREAM_PROVIDERS" not in secret_data(r.one("Secret", "engram"))
    assert "nobody can sign in" in r.notes
    assert "engram user add" not in r.notes
    # In mode oidc none of the built-in server's settings are written.
    oidc = rendered("ingress-nobundled-nomonitoring-nohpa")
    written = set(oidc.one("ConfigMap", "engram")["data"]) | set(secret_data(oidc.one("Secret", "engram")))
    builtin_only = {f"ENGRAM_{field.upper()}" for field in BUILTIN_SETTINGS.values()} | {"ENGRAM_UPSTREAM_PROVIDERS"}
    assert not written & builtin_only


def test_builtin_values_match_the_server() -> None:
    """Defaults are the server's (but local accounts, which the chart leaves off), bounds its Field bounds."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())["auth"]["builtin"]
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]["auth"]["properties"]["builtin"]
    for key, field_name in BUILTIN_SETTINGS.items():
        field = Settings.model_fields[field_name]
        expected = False if key == "localAccounts" else field.default
        assert _at(values, key) == expected, key
        node = _at(schema["properties"], key.replace(".", ".properties."))
        assert node["description"].startswith(f"`ENGRAM_{field_name.upper()}`"), key
        bounds = {k: getattr(m, k) for m in field.metadata for k in ("ge", "le") if hasattr(m, k)}
        if node["type"] == "integer":
            assert (node["minimum"], node["maximum"]) == (bounds["ge"], bounds["le"]), key
        else:
            assert node["type"] == "boolean" and not bounds, key
    assert values["upstreamProviders"] == []
    provider = schema["properties"]["upstreamProviders"]["items"]["properties"]
    model = Settings.model_fields["upstream_providers"].annotation.__args__[0]  # type: ignore[union-attr]
    snake = {re.sub("([A-Z])", lambda m: "_" + m.group(1).lower(), key) for key in provider}
    assert snake == set(model.model_fields)
    assert provider["name"]["pattern"] == model.model_fields["name"].metadata[0].pattern
    assert "CLIENT_METADATA_ALLOW_HTTP_LOOPBACK" not in (CHART / "values.yaml").read_text().upper()


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({}, 'the public URL "http://engram.memory.svc" is the token issuer and must be https'),
        ({"ingress": {"enabled": True, "tls": {"enabled": False}}}, '"http://memory.example.com"'),
        ({"config": {"publicUrl": "http://memory.example.com"}}, "must be https"),
        ({"config": {"publicUrl": "http://127.example.com"}}, "must be https"),
        (
            {
                "config": {"publicUrl": "https://memory.example.com"},
                "auth": {"builtin": {"upstreamProviders": [_PROVIDER, _PROVIDER]}},
            },
            'the name "idp" is used twice',
        ),
        (
            {
                "config": {"publicUrl": "https://memory.example.com"},
                "existingSecret": "engram-database",
                "auth": {"builtin": {"upstreamProviders": [_PROVIDER]}},
            },
            "under ENGRAM_UPSTREAM_PROVIDERS in that Secret",
        ),
    ],
)
def test_builtin_refuses_to_render(values: dict[str, Any], complaint: str) -> None:
    """The issuer is the public URL, which clients compare byte for byte: https, or nothing."""
    with pytest.raises(helm.HelmError) as caught:
        render(merge({"auth": {"mode": "builtin"}, "database": EXTERNAL_DB}, values))
    assert complaint in str(caught.value)


@pytest.mark.parametrize("public_url", ["http://127.0.0.1:8000", "http://localhost:8000", "http://[::1]:8000"])
def test_builtin_allows_a_loopback_public_url(public_url: str) -> None:
    """A port-forward trial: http on a loopback address is an issuer clients accept."""
    r = render({"auth": {"mode": "builtin"}, "database": EXTERNAL_DB, "config": {"publicUrl": public_url}})
    assert r.one("ConfigMap", "engram")["data"]["ENGRAM_PUBLIC_URL"] == public_url


def server_environment(name: str) -> dict[str, str]:
    """What the server's container gets: the ConfigMap and the chart's Secret."""
    r = rendered(name)
    return r.one("ConfigMap", "engram")["data"] | secret_data(r.one("Secret", "engram"))


CHART_MANAGED = [
    "ingress-bundled-monitoring-hpa",
    "noingress-nobundled-nomonitoring-nohpa",
    "embedding-server-egress",
    "builtin",
    "builtin-defaults",
]


@pytest.mark.parametrize("name", CHART_MANAGED)
def test_chart_writes_only_settings_the_server_knows(name: str) -> None:
    known = {f"ENGRAM_{field.upper()}" for field in Settings.model_fields}
    extras = {*VALUE_SETS[name].get("extraSecretEnv", {}), *VALUE_SETS[name].get("config", {}).get("extraEnv", {})}
    environment = server_environment(name)
    unknown = set(environment) - known - AHEAD_OF_SERVER - extras
    assert not unknown, f"the chart sets settings the server does not have: {sorted(unknown)}"
    assert "ENGRAM_CLIENT_METADATA_ALLOW_HTTP_LOOPBACK" not in environment  # for tests only


@pytest.mark.parametrize("name", CHART_MANAGED)
def test_server_accepts_the_chart_settings(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's own settings validation, run on what a pod of the release would get."""
    if "oidc_issuer" not in Settings.model_fields:
        pytest.skip("this server version has no OIDC mode, which the chart configures")
    for variable in [v for v in os.environ if v.startswith("ENGRAM_")]:
        monkeypatch.delenv(variable)
    environment = server_environment(name)
    for variable, value in environment.items():
        if variable in {f"ENGRAM_{field.upper()}" for field in Settings.model_fields}:
            monkeypatch.setenv(variable, value)
    try:
        settings = Settings()
    except ValidationError as exc:
        pytest.fail(f"the server refuses the chart's settings: {exc}")
    mode = VALUE_SETS[name].get("auth", {}).get("mode", "oidc")
    assert settings.auth_mode == mode
    assert settings.resource_url == environment["ENGRAM_PUBLIC_URL"] + "/mcp"
    assert settings.database_url is not None
    if mode == "oidc":
        assert settings.issuer == ISSUER
        return
    # The built-in server is the issuer: its own public URL, https.
    assert settings.issuer == environment["ENGRAM_PUBLIC_URL"] == "https://memory.example.com"
    assert settings.audiences == [settings.endpoint_url(name) for name in ENDPOINT_PATHS]  # every endpoint's own
    assert settings.audiences_for("memory") == [f"{settings.base_url}/mcp/memory"]
    builtin = VALUE_SETS[name]["auth"].get("builtin", {})
    assert settings.local_accounts is builtin.get("localAccounts", False)
    assert settings.client_metadata_allow_http_loopback is False
    providers = builtin.get("upstreamProviders", [])
    assert len(settings.upstream_providers) == len(providers)
    for parsed, given in zip(settings.upstream_providers, providers, strict=True):
        assert (parsed.name, parsed.label, parsed.client_id) == (given["name"], given["label"], given["clientId"])
        assert parsed.issuer == given["issuer"].rstrip("/")
        assert parsed.client_secret.get_secret_value() == given["clientSecret"]
        assert parsed.scopes == given.get("scopes", "openid email profile")


def test_embedding_server_wiring() -> None:
    r = rendered("embedding-server-egress")
    config = r.one("ConfigMap", "engram")["data"]
    service = r.one("Service", "engram-embeddings")
    port = service["spec"]["ports"][0]["port"]
    assert config["ENGRAM_EMBEDDING_PROVIDER"] == "openai"
    assert config["ENGRAM_EMBEDDING_BASE_URL"] == f"http://engram-embeddings:{port}/v1"
    assert config["ENGRAM_EMBEDDING_DIMENSIONS"] == "384"
    assert secret_data(r.one("Secret", "engram"))["ENGRAM_EMBEDDING_API_KEY"] == "sk-Secret-3"
    egress = r.one("NetworkPolicy", "engram")["spec"]["egress"]
    assert {"port": 53, "protocol": "UDP"} in egress[0]["ports"]
    assert any(p["port"] == port for rule in egress for p in rule["ports"])


def test_defaults_render_with_warnings_in_notes() -> None:
    """Without an identity provider or database the chart still renders; the notes say what is missing."""
    notes = rendered("defaults").notes
    assert "auth.oidc.issuer is not set" in notes
    assert "no database" in notes


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"replicaCount": -1}, "replicaCount"),
        ({"image": {"tag": "latest"}}, "image/tag"),
        ({"imageTag": "1.0"}, "imageTag"),
        ({"auth": {"mode": "dev"}}, "auth/mode"),
        ({"auth": {"builtin": {"signUp": True}}}, "signUp"),
        ({"auth": {"builtin": {"rateLimits": {"loginPerMinute": 5}}}}, "loginPerMinute"),
        ({"auth": {"builtin": {"localAccounts": "yes"}}}, "builtin/localAccounts"),
        ({"auth": {"builtin": {"accessTokenTtlSeconds": 59}}}, "accessTokenTtlSeconds"),
        ({"auth": {"builtin": {"refreshTokenTtlSeconds": 365 * 86400 + 1}}}, "refreshTokenTtlSeconds"),
        ({"auth": {"builtin": {"rateLimits": {"tokenPerMinute": 0}}}}, "tokenPerMinute"),
        ({"auth": {"builtin": {"clientMetadataAllowHttpLoopback": True}}}, "clientMetadataAllowHttpLoopback"),
        ({"auth": {"builtin": {"upstreamProviders": [_PROVIDER | {"client_id": "x"}]}}}, "client_id"),
        ({"auth": {"builtin": {"upstreamProviders": [_PROVIDER | {"name": "Corp SSO"}]}}}, "upstreamProviders/0/name"),
        ({"auth": {"builtin": {"upstreamProviders": [{"name": "idp"}]}}}, "upstreamProviders/0"),
        ({"auth": {"scopeClaims": ["scope,scp"]}}, "scopeClaims"),
        (
            {"config": {"extraEnv": {"ENGRAM_CLIENT_METADATA_ALLOW_HTTP_LOOPBACK": "true"}}},
            "invalid propertyName 'ENGRAM_CLIENT_METADATA_ALLOW_HTTP_LOOPBACK'",
        ),
        (
            {"extraSecretEnv": {"ENGRAM_CLIENT_METADATA_ALLOW_HTTP_LOOPBACK": "true"}},
            "invalid propertyName 'ENGRAM_CLIENT_METADATA_ALLOW_HTTP_LOOPBACK'",
        ),
        ({"auth": {"tenantPolicy": "open"}}, "tenantPolicy"),
        ({"config": {"logLevel": "TRACE"}}, "logLevel"),
        ({"config": {"shutdownGraceSeconds": 601}}, "shutdownGraceSeconds"),
        ({"config": {"extraEnv": {"PATH": "/x"}}}, "PATH"),
        ({"database": {"url": "mysql://x"}}, "database/url"),
        ({"metrics": {"serviceMonitor": {"enabled": "yes"}}}, "serviceMonitor/enabled"),
        # Switched by value, never by what the cluster serves.
        ({"metrics": {"serviceMonitor": {"enabled": "auto"}}}, "serviceMonitor/enabled"),
        ({"metrics": {"prometheusRule": {"enabled": "auto"}}}, "prometheusRule/enabled"),
        ({"metrics": {"prometheusRule": {"runbookBaseUrl": "docs/operations.md"}}}, "runbookBaseUrl"),
        ({"extraEnv": [{"name": "ENGRAM_CLIENT_METADATA_ALLOW_HTTP_LOOPBACK", "value": "true"}]}, "extraEnv/0/name"),
        ({"extraEnv": [{"name": "A", "valuefrom": {}}]}, "valuefrom"),
        ({"extraEnv": {"A": "b"}}, "extraEnv"),
        ({"extraVolumes": [{"name": "tmp", "emptyDir": {}}]}, "extraVolumes/0/name"),
        ({"extraVolumeMounts": [{"name": "ca"}]}, "mountPath"),
        ({"sidecars": [{"name": "proxy"}]}, "image"),
        ({"httpRoute": {"hostnames": ["Memory.Example.com"]}}, "httpRoute/hostnames/0"),
        ({"httpRoute": {"parentRefs": [{"namespace": "gw"}]}}, "parentRefs/0"),
        ({"httpRoute": {"timeouts": {"idle": "1m"}}}, "invalid propertyName 'idle'"),
        ({"httpRoute": {"timeouts": {"request": "5 minutes"}}}, "timeouts/request"),
        ({"existingSecretKeys": {"databaseUrl": ""}}, "databaseUrl"),
        ({"existingSecretKeys": {"password": "password"}}, "password"),
        ({"postgresql": {"auth": {"generate": True}}}, "generate"),
        ({"ingress": {"host": "Bad Host"}}, "ingress/host"),
        ({"postgresql": {"persistence": {"size": "lots"}}}, "persistence/size"),
    ],
)
def test_schema_rejects_bad_values(values: dict[str, Any], complaint: str) -> None:
    with pytest.raises(helm.HelmError) as caught:
        loaded_chart().validate_schema(values)
    assert complaint in str(caught.value)


def test_chart_readme_is_generated() -> None:
    """The README's values table is generated from values.yaml and the schema, which must agree."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts/chart-readme.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


# --- Dockerfiles, alert rules, dashboard --------------------------------------------------


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "sql/Dockerfile"])
def test_hadolint(dockerfile: str) -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    result = subprocess.run(
        [str(hadolint), "--no-color", str(ROOT / dockerfile)], capture_output=True, text=True, cwd=ROOT
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_alert_rules_pass_promtool() -> None:
    result = subprocess.run(
        [promtool(), "check", "rules", str(CHART / "files/prometheus-rules.yaml")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_queries_parse(tmp_path: Path) -> None:
    """Every panel query is valid PromQL: promtool parses them as recording rules."""
    dashboard = json.loads((CHART / "files/grafana-dashboard.json").read_text())
    assert dashboard["uid"] and dashboard["title"]
    exprs = [
        target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", []) if target.get("expr")
    ]
    assert exprs, "the dashboard has no Prometheus queries"
    # Grafana's built-in variables are not PromQL; give them a value as Grafana would.
    builtins = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h"}
    rules = []
    for i, expr in enumerate(exprs):
        for variable, value in builtins.items():
            expr = expr.replace(variable, value)
        rules.append({"record": f"dashboard:query_{i}", "expr": expr})
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_tool_sets_choose_the_endpoints_the_notes_list() -> None:
    """config.toolSets becomes ENGRAM_TOOL_SETS; NOTES lists the served endpoints and their metadata."""
    default = rendered("defaults")
    assert default.one("ConfigMap", "engram")["data"]["ENGRAM_TOOL_SETS"] == "native,memory,neo4j,chatgpt"
    assert "ENGRAM_NEO4J_NAMESPACE" not in default.one("ConfigMap", "engram")["data"]
    for path in ENDPOINT_PATHS.values():
        assert re.search(rf"/{path.lstrip('/')}\s", default.notes), path
    only = render(merge(VALUE_SETS["defaults"], {"config": {"toolSets": ["memory"], "neo4jNamespace": "mem"}}))
    data = only.one("ConfigMap", "engram")["data"]
    assert (data["ENGRAM_TOOL_SETS"], data["ENGRAM_NEO4J_NAMESPACE"]) == ("memory", "mem")
    assert "/mcp/memory" in only.notes and "/mcp/neo4j" not in only.notes
    assert "/.well-known/oauth-protected-resource/mcp/memory" in only.notes
    for wrong in ([], ["native", "native"], ["graph"]):
        with pytest.raises(Exception, match="toolSets"):
            render(merge(VALUE_SETS["defaults"], {"config": {"toolSets": wrong}}))
