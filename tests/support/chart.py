"""The Helm chart rendered without a cluster: the matrix of value sets an operator may choose, Helm's
own Go code (helm-python-sdk) linting and rendering it, and custom resources checked against their
projects' released CRD schemas (tests/data/crds)."""

from __future__ import annotations

import functools
import itertools
import json
import shutil
from dataclasses import dataclass
from typing import Any

import helm_python as helm
import jsonschema
import pytest
import yaml
from helm_python import _native

from tests.support.server import ROOT

CHART = ROOT / "helm" / "engram"
KUBE_VERSIONS = ("1.28.0", "1.35.0")
NAMESPACE = "memory"
CRDS = ROOT / "tests" / "data" / "crds"
# API groups of the custom resources the chart renders, checked against tests/data/crds.
CUSTOM_GROUPS = {"monitoring.coreos.com", "gateway.networking.k8s.io"}
ISSUER = "https://idp.example.com/realms/engram"
EXTERNAL_DB = {
    "url": "postgresql://engram_app:app-Secret-1@db.example.com:5432/engram",
    "adminUrl": "postgresql://owner:owner-Secret-2@db.example.com:5432/engram",
}
# The bundled database's passwords: the chart generates none (every render is the same).
BUNDLED_PASSWORDS = {"adminPassword": "admin-Secret-8/+@", "appPassword": "app-Secret-9"}
HTTP_ROUTE = {
    "enabled": True,
    "parentRefs": [{"name": "public", "namespace": "gateway-system", "sectionName": "https"}],
    "hostnames": ["memory.example.com"],
    "timeouts": {"request": "300s"},
    "labels": {"gateway-access": "public"},
}
# Containers added by the operator, as locked down as the server's.
_LOCKED = {
    "securityContext": {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    },
    "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
}
EXTRAS = {
    "extraEnv": [
        {"name": "SSL_CERT_FILE", "value": "/etc/engram-ca/ca.crt"},
        {"name": "ENGRAM_EMBEDDING_API_KEY", "valueFrom": {"secretKeyRef": {"name": "embeddings", "key": "api-key"}}},
    ],
    "extraEnvFrom": [{"secretRef": {"name": "engram-settings"}}, {"configMapRef": {"name": "proxy"}, "prefix": "P_"}],
    "extraVolumes": [
        {"name": "engram-ca", "configMap": {"name": "engram-ca"}},
        {"name": "proxy-socket", "emptyDir": {}},
    ],
    "extraVolumeMounts": [{"name": "engram-ca", "mountPath": "/etc/engram-ca", "readOnly": True}],
    "initContainers": [
        {"name": "wait-for-proxy-config", "image": "busybox:1.37", "command": ["true"], **_LOCKED},
    ],
    "sidecars": [
        {
            "name": "db-proxy",
            "image": "gcr.io/cloud-sql-connectors/cloud-sql-proxy:2.14.0",
            "args": ["--unix-socket", "/proxy", "project:region:instance"],
            "volumeMounts": [{"name": "proxy-socket", "mountPath": "/proxy"}],
            **_LOCKED,
        }
    ],
}
CNPG_EXAMPLE = CHART / "examples" / "cloudnative-pg"
CNPG_CELLS_EXAMPLE = CHART / "examples" / "cloudnative-pg-cells"


def merge(*parts: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


# The matrix: ingress on/off x bundled/external database x monitoring on/off x HPA on/off ...
AXES: dict[str, dict[bool, dict[str, Any]]] = {
    "ingress": {
        True: {
            "ingress": {
                "enabled": True,
                "className": "nginx",
                "host": "memory.example.com",
                "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt"},
            }
        },
        False: {},
    },
    "bundled": {True: {"postgresql": {"enabled": True, "auth": BUNDLED_PASSWORDS}}, False: {"database": EXTERNAL_DB}},
    "monitoring": {
        True: {
            "metrics": {
                "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
                "prometheusRule": {"enabled": True},
                "dashboard": {"enabled": True, "namespace": "monitoring"},
            }
        },
        False: {"metrics": {"serviceMonitor": {"enabled": False}, "prometheusRule": {"enabled": False}}},
    },
    "hpa": {True: {"autoscaling": {"enabled": True, "targetMemoryUtilizationPercentage": 80}}, False: {}},
}
VALUE_SETS: dict[str, dict[str, Any]] = {"defaults": {}}
for flags in itertools.product((False, True), repeat=len(AXES)):
    name = "-".join(axis if on else f"no{axis}" for axis, on in zip(AXES, flags, strict=True))
    VALUE_SETS[name] = merge(
        {"auth": {"oidc": {"issuer": ISSUER}}}, *(AXES[a][on] for a, on in zip(AXES, flags, strict=True))
    )
# ... and the other shapes an operator may choose.
VALUE_SETS |= {
    "existing-secret": {"existingSecret": "engram-database", "auth": {"oidc": {"issuer": ISSUER}}},
    "existing-secrets-apart": {
        "existingSecret": "engram-database",
        "migrations": {"existingSecret": "engram-database-owner"},
        "auth": {"oidc": {"issuer": ISSUER}, "tenantPolicy": "managed"},
    },
    "embedding-server-egress": merge(
        VALUE_SETS["noingress-nobundled-nomonitoring-nohpa"],
        {
            "embeddingServer": {"enabled": True},
            "embedding": {"apiKey": "sk-Secret-3"},
            "auth": {
                "oidc": {"clientId": "engram", "clientSecret": "client-Secret-5"},
                "scopes": {"read": "memory.read", "write": "memory.write"},
                "tenantFallbackClaims": ["org_id"],
            },
            "extraSecretEnv": {"ENGRAM_SOME_TOKEN": "tok-Secret-4"},
            "networkPolicy": {
                "egress": {
                    "enabled": True,
                    "extra": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/24"}}], "ports": [{"port": 5432}]}],
                },
                "ingressFrom": [{"namespaceSelector": {"matchLabels": {"name": "ingress-nginx"}}}],
            },
        },
    ),
    "metrics-on-http-port": merge(
        VALUE_SETS["noingress-nobundled-monitoring-nohpa"],
        {"metrics": {"port": 0}, "image": {"digest": "sha256:" + "a" * 64}},
    ),
    "no-extras": merge(
        VALUE_SETS["noingress-nobundled-nomonitoring-nohpa"],
        {
            "networkPolicy": {"enabled": False},
            "podDisruptionBudget": {"enabled": False},
            "topologySpread": {"enabled": False},
            "serviceAccount": {"create": False},
            "migrations": {"enabled": False},
        },
    ),
    # The built-in authorization server: local accounts and an upstream provider, tuned limits ...
    "builtin": merge(
        VALUE_SETS["ingress-nobundled-nomonitoring-nohpa"],
        {
            "auth": {
                "mode": "builtin",
                "scopeClaims": ["scope", "permissions"],
                "builtin": {
                    "localAccounts": True,
                    "upstreamProviders": [
                        {
                            "name": "google",
                            "label": "Google",
                            "issuer": "https://accounts.google.com/",
                            "clientId": "engram.apps.googleusercontent.com",
                            "clientSecret": "upstream-Secret-6",
                            "scopes": "openid email",
                        },
                        {
                            "name": "corp-sso",
                            "label": "Corp <SSO> & co",
                            "issuer": ISSUER,
                            "clientId": "engram",
                            "clientSecret": 'upstream-"Secret"-7',
                        },
                    ],
                    "accessTokenTtlSeconds": 300,
                    "refreshTokenTtlSeconds": 7776000,
                    "clientRegistration": False,
                    "rateLimits": {"signInPerMinute": 10, "signInFailureWindowSeconds": 3600},
                },
            },
        },
    ),
    # ... and its defaults, with the trial database.
    "builtin-defaults": merge(
        {"auth": {"mode": "builtin"}}, AXES["ingress"][True], AXES["bundled"][True], AXES["monitoring"][False]
    ),
    # A Gateway API HTTPRoute instead of the Ingress, with the alerts narrowed to a selector of one's own.
    "httproute": merge(
        VALUE_SETS["noingress-nobundled-monitoring-nohpa"],
        {
            "httpRoute": HTTP_ROUTE,
            "metrics": {
                "prometheusRule": {
                    "selector": 'namespace="memory", job="engram-pods"',
                    "runbookBaseUrl": "https://git.example.org/platform/engram/-/blob/main/docs/operations.md",
                }
            },
        },
    ),
    # The Ingress and an HTTPRoute side by side (a move from one to the other).
    "ingress-and-httproute": merge(
        VALUE_SETS["ingress-nobundled-nomonitoring-nohpa"], {"httpRoute": HTTP_ROUTE | {"hostnames": ["*.example.com"]}}
    ),
    # Extra env, volumes, init containers and sidecars.
    "extras": merge(VALUE_SETS["noingress-nobundled-nomonitoring-nohpa"], EXTRAS),
    # A Secret written by another tool, its keys named its way (CloudNativePG's <cluster>-app).
    "existing-secret-keys": {
        "existingSecret": "engram-db-app",
        "existingSecretKeys": {
            "databaseUrl": "uri",
            "oidcClientSecret": "",
            "embeddingApiKey": "",
            "upstreamProviders": "",
        },
        "existingSecretEnvFrom": False,
        "migrations": {"existingSecret": "engram-db-owner", "existingSecretKey": "uri"},
        "auth": {"oidc": {"issuer": ISSUER}},
    },
    # The trial database with its passwords in a Secret of one's own: the chart never sees them.
    "bundled-existing-secret": merge(
        VALUE_SETS["noingress-bundled-nomonitoring-nohpa"],
        {"postgresql": {"auth": {"existingSecret": "engram-db-passwords", "adminPassword": "", "appPassword": ""}}},
    ),
    # The CloudNativePG example shipped with the chart.
    "cloudnative-pg-example": yaml.safe_load((CNPG_EXAMPLE / "values.yaml").read_text()),
    # Its two-cell variant: a Pooler and a standby per cell (tests/test_chart_cells.py).
    "cloudnative-pg-cells-example": yaml.safe_load((CNPG_CELLS_EXAMPLE / "values.yaml").read_text()),
}


@dataclass
class Rendering:
    objects: list[dict[str, Any]]
    notes: str

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = [o for o in self.of_kind(kind) if name is None or o["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
        return found[0]

    def pod_specs(self) -> list[tuple[str, dict[str, Any]]]:
        return [
            (f"{o['kind']}/{o['metadata']['name']}", o["spec"]["template"]["spec"])
            for o in self.objects
            if o["kind"] in ("Deployment", "StatefulSet", "Job")
        ]


@functools.cache
def loaded_chart() -> helm.Chart:
    return helm.Chart.load(CHART)


def render(values: dict[str, Any], *, api_versions: tuple[str, ...] = ()) -> Rendering:
    """`helm template` with the values: the SDK's render() takes no API versions, so the options
    go straight to the library call it wraps (the same as --api-versions / --kube-version)."""
    chart = loaded_chart()
    chart.validate_schema(values)
    options = {
        "name": "engram",
        "namespace": NAMESPACE,
        "is_install": True,
        "kube_version": "v1.35.0",
        "api_versions": list(api_versions),
    }
    files = json.loads(_native.call_string("helm_render", chart._raw(), json.dumps(values), json.dumps(options)))
    objects = [
        doc
        for path, text in sorted(files.items())
        if not path.endswith("NOTES.txt")
        for doc in yaml.safe_load_all(text)
        if doc
    ]
    return Rendering(objects, files["engram/templates/NOTES.txt"])


@functools.cache
def rendered(name: str) -> Rendering:
    return render(VALUE_SETS[name])


def lint(values: dict[str, Any], kube: str) -> None:
    """`helm lint --strict` for this Kubernetes version finds nothing of severity warning or above."""
    report = helm.lint(CHART, values, strict=True, kube_version=f"v{kube}")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not problems and not report["errors"], problems or report["errors"]


_CRD_SCHEMAS = {
    "ServiceMonitor": {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "spec": {
                "type": "object",
                "required": ["selector", "endpoints"],
                "additionalProperties": False,
                "properties": {
                    "selector": {"type": "object", "required": ["matchLabels"]},
                    "endpoints": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["port", "path"],
                            "additionalProperties": False,
                            "properties": {
                                "port": {"type": "string"},
                                "path": {"type": "string", "pattern": "^/"},
                                "interval": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                                "scrapeTimeout": {"type": "string", "pattern": "^[0-9]+(ms|s|m|h)$"},
                            },
                        },
                    },
                },
            }
        },
    },
    "PrometheusRule": {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "spec": {
                "type": "object",
                "required": ["groups"],
                "additionalProperties": False,
                "properties": {
                    "groups": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["name", "rules"],
                            "properties": {
                                "name": {"type": "string", "minLength": 1},
                                "rules": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "required": ["expr"],
                                        "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
                                    },
                                },
                            },
                        },
                    }
                },
            }
        },
    },
}


def _no_unknown_fields(schema: Any) -> Any:
    """A CRD's schema as the API server applies it with strict field validation (kubectl's
    default): an object with declared properties takes no others, unless the schema keeps them."""
    if isinstance(schema, list):
        return [_no_unknown_fields(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    strict = {key: _no_unknown_fields(value) for key, value in schema.items()}
    if isinstance(schema.get("pattern"), str) and "(?i)" in schema["pattern"]:
        # Go's regexp takes flags anywhere; Python's only at the start.
        strict["pattern"] = "(?i)" + schema["pattern"].replace("(?i)", "")
    keeps_unknown = "additionalProperties" in schema or schema.get("x-kubernetes-preserve-unknown-fields")
    if "properties" in schema and not keeps_unknown:
        strict["additionalProperties"] = False
    return strict


@functools.cache
def crd_schemas() -> dict[tuple[str, str], list[tuple[str, dict[str, Any]]]]:
    """(apiVersion, kind) -> [(release, strict schema)] of the released CRDs in tests/data/crds."""
    schemas: dict[tuple[str, str], list[tuple[str, dict[str, Any]]]] = {}
    for path in sorted(CRDS.glob("*.json")):
        crd = json.loads(path.read_text())
        key = (f"{crd['group']}/{crd['version']}", crd["kind"])
        schemas.setdefault(key, []).append((crd["source"], _no_unknown_fields(crd["openAPIV3Schema"])))
    return schemas


def validate_custom_resource(obj: dict[str, Any]) -> None:
    """Against every vendored release of its CRD, and the chart's own stricter expectations."""
    where = f"{obj['kind']}/{obj['metadata']['name']}"
    releases = crd_schemas().get((obj["apiVersion"], obj["kind"]))
    assert releases, f"{where}: no CRD schema for {obj['apiVersion']} in {CRDS}"
    for source, schema in releases:
        try:
            jsonschema.Draft7Validator(schema).validate(obj)
        except jsonschema.ValidationError as exc:
            pytest.fail(f"{where} does not match {source}: {exc.message} at {list(exc.absolute_path)}")
    if obj["kind"] in _CRD_SCHEMAS:
        jsonschema.validate(obj, _CRD_SCHEMAS[obj["kind"]])


def promtool() -> str:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus; scripts/system-deps.sh installs it as root)")
    return promtool
