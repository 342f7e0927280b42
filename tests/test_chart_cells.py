"""The chart's cells: every cell's URLs reach the pods from Secrets, the owners' URLs only the
migration Job, bad cell names stop the render, and the two-cell CloudNativePG example is valid
for Kubernetes and CloudNativePG and agrees with its values."""

from __future__ import annotations

import asyncio
import os
import re
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from pydantic import ValidationError

from app.config import Settings
from tests.support.chart import (
    CNPG_CELLS_EXAMPLE,
    KUBE_VERSIONS,
    VALUE_SETS,
    Rendering,
    merge,
    render,
    rendered,
    validate_custom_resource,
)

EXAMPLE = "cloudnative-pg-cells-example"
BASE = VALUE_SETS["cloudnative-pg-example"]
# What a server pod may hold, and what only the migration Job may.
SERVER_KINDS = {"URL", "READ_URL", "LISTEN_URL"}
JOB_KINDS = {"URL", "ADMIN_URL", "REPLICATION_URL"}
URL = re.compile(r"postgres(ql)?://", re.I)


def _ref(name: str, key: str) -> dict[str, str]:
    return {"name": name, "key": key}


CELLS = {
    "database": {
        "readUrlSecret": _ref("main-urls", "read"),
        "listenUrlSecret": _ref("main-urls", "listen"),
        "replicationUrlSecret": _ref("main-owner", "uri"),
    },
    "cells": [
        {
            "name": "b",
            "urlSecret": _ref("b-urls", "url"),
            "readUrlSecret": _ref("b-urls", "read"),
            "listenUrlSecret": _ref("b-urls", "listen"),
            "adminUrlSecret": _ref("b-owner", "uri"),
            "replicationUrlSecret": _ref("b-owner", "uri"),
        },
        {"name": "c2", "urlSecret": _ref("c2-urls", "url"), "adminUrlSecret": _ref("c2-owner", "uri")},
    ],
}


def container_env(r: Rendering, kind: str) -> list[dict[str, Any]]:
    (engram,) = [o for o in r.of_kind(kind) if o["metadata"]["name"].startswith("engram")]
    return engram["spec"]["template"]["spec"]["containers"][0].get("env", [])


def cell_refs(env: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """ENGRAM_CELL* and ENGRAM_LISTEN_DATABASE_URL variables -> (Secret, key)."""
    out = {}
    for variable in env:
        if variable["name"].startswith("ENGRAM_CELL_") or variable["name"] == "ENGRAM_LISTEN_DATABASE_URL":
            ref = variable["valueFrom"]["secretKeyRef"]  # never a literal value
            out[variable["name"]] = (ref["name"], ref["key"])
    return out


def test_without_cells_nothing_changes() -> None:
    """The default, and every value set without cells: no ENGRAM_CELLS, no cell variable anywhere."""
    for name, values in VALUE_SETS.items():
        if "cells" in values:
            continue
        text = yaml.safe_dump_all(rendered(name).objects)
        assert "ENGRAM_CELL" not in text and "ENGRAM_LISTEN_DATABASE_URL" not in text, name


def test_cells_render_from_secrets() -> None:
    values = merge(BASE, CELLS)
    r = render(values)
    server, job = container_env(r, "Deployment"), container_env(r, "Job")
    for env in (server, job):
        assert {"name": "ENGRAM_CELLS", "value": "b,c2"} in env
    assert cell_refs(server) == {
        "ENGRAM_CELL_B_URL": ("b-urls", "url"),
        "ENGRAM_CELL_B_READ_URL": ("b-urls", "read"),
        "ENGRAM_CELL_B_LISTEN_URL": ("b-urls", "listen"),
        "ENGRAM_CELL_C2_URL": ("c2-urls", "url"),
        "ENGRAM_CELL_MAIN_READ_URL": ("main-urls", "read"),
        "ENGRAM_LISTEN_DATABASE_URL": ("main-urls", "listen"),
    }
    assert cell_refs(job) == {
        "ENGRAM_CELL_B_URL": ("b-urls", "url"),
        "ENGRAM_CELL_B_ADMIN_URL": ("b-owner", "uri"),
        "ENGRAM_CELL_B_REPLICATION_URL": ("b-owner", "uri"),
        "ENGRAM_CELL_C2_URL": ("c2-urls", "url"),
        "ENGRAM_CELL_C2_ADMIN_URL": ("c2-owner", "uri"),
        "ENGRAM_CELL_MAIN_REPLICATION_URL": ("main-owner", "uri"),
    }
    # Nothing renders a URL: the Secrets are the operator's.
    assert not URL.search(yaml.safe_dump_all(r.objects))


@pytest.mark.parametrize("values", [VALUE_SETS[EXAMPLE], merge(BASE, CELLS)], ids=["example", "two-cells"])
def test_owner_urls_stay_out_of_server_pods(values: dict[str, Any]) -> None:
    """Least privilege: no pod but the migration Job can name an owner's or replication Secret."""
    r = render(values)
    owners = {values["migrations"]["existingSecret"]} | {
        c["adminUrlSecret"]["name"] for c in values["cells"] if "adminUrlSecret" in c
    }
    assert len(r.pod_specs()) >= 2
    for where, spec in r.pod_specs():
        text = yaml.safe_dump(spec)
        kinds = {m.group(1) for m in re.finditer(r"ENGRAM_CELL_[A-Z0-9]+_([A-Z_]+)", text)}
        if where.startswith("Job/"):
            assert kinds == JOB_KINDS, where
            continue
        assert kinds == SERVER_KINDS and "ENGRAM_ADMIN_DATABASE_URL" not in text, where
        assert not [o for o in owners if f"name: {o}\n" in text], where


BAD = [
    ({"name": "B", "urlSecret": _ref("s", "k")}, "name"),
    ({"name": "1b", "urlSecret": _ref("s", "k")}, "name"),
    ({"name": "b-c", "urlSecret": _ref("s", "k")}, "name"),
    ({"name": "b_c", "urlSecret": _ref("s", "k")}, "name"),
    ({"name": "a" * 32, "urlSecret": _ref("s", "k")}, "name"),
    ({"name": "", "urlSecret": _ref("s", "k")}, "name"),
    ({"name": "b\u0000", "urlSecret": _ref("s", "k")}, "name"),
    ({"name": "main", "urlSecret": _ref("s", "k")}, "main"),
    ({"name": "b"}, "urlSecret"),
    ({"name": "b", "urlSecret": {"name": "s"}}, "key"),
    ({"name": "b", "urlSecret": _ref("s", "k"), "adminUrl": "postgresql://x"}, "adminUrl"),
    ({"name": "b", "urlSecret": _ref("s", "a key")}, "key"),
    ({"name": "b", "urlSecret": _ref("S/x", "k")}, "name"),
    ({"name": "b", "urlSecret": _ref("s", "k"), "readUrlSecret": {"name": "s", "key": "k", "value": "x"}}, "value"),
]


@pytest.mark.parametrize(("cell", "complaint"), BAD)
def test_bad_cells_stop_the_render(cell: dict[str, Any], complaint: str) -> None:
    with pytest.raises(helm.HelmError) as caught:
        render(merge(BASE, {"cells": [cell]}))
    assert complaint in str(caught.value)


def test_a_cell_named_twice_stops_the_render() -> None:
    twice = [{"name": "b", "urlSecret": _ref("s", "k")}, {"name": "b", "urlSecret": _ref("t", "k")}]
    with pytest.raises(helm.HelmError) as caught:
        render(merge(BASE, {"cells": twice}))
    assert 'the name "b" is used twice' in str(caught.value)


def test_at_most_a_hundred_cells() -> None:
    cells = [{"name": f"c{i}", "urlSecret": _ref("s", f"k{i}")} for i in range(101)]
    with pytest.raises(helm.HelmError) as caught:
        render(merge(BASE, {"cells": cells}))
    assert "cells" in str(caught.value)
    assert len(cell_refs(container_env(render(merge(BASE, {"cells": cells[:100]})), "Deployment"))) == 100


def test_main_connections_need_name_and_key() -> None:
    with pytest.raises(helm.HelmError):
        render(merge(BASE, {"database": {"readUrlSecret": {"name": "s"}}}))


# --- the two-cell CloudNativePG example -------------------------------------------------------


def example_documents(file: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((CNPG_CELLS_EXAMPLE / file).read_text()) if d]


def example_secrets() -> dict[str, dict[str, str]]:
    return {d["metadata"]["name"]: d["stringData"] for d in example_documents("clusters.yaml") if d["kind"] == "Secret"}


@pytest.mark.parametrize("kube", KUBE_VERSIONS)
def test_example_manifests_are_valid(kube: str) -> None:
    documents = example_documents("clusters.yaml") + example_documents("cell-admin-job.yaml")
    kinds = sorted(d["kind"] for d in documents)
    assert kinds == ["Cluster", "Cluster", "ConfigMap", "Job", "Pooler", "Pooler", *["Secret"] * 4]
    for obj in documents:
        if obj["apiVersion"].startswith("postgresql.cnpg.io/"):
            validate_custom_resource(obj)
        else:
            kubernetes_validate.validate(obj, kube, strict=True)


def _host(url: str) -> str:
    return urlsplit(url).hostname or ""


def test_example_clusters_fit_engram() -> None:
    """Two instances (a hot standby) and logical WAL per cluster, a transaction Pooler in front of
    each primary, and each URL on the Service its use needs."""
    documents = example_documents("clusters.yaml")
    clusters = {d["metadata"]["name"]: d for d in documents if d["kind"] == "Cluster"}
    poolers = {d["spec"]["cluster"]["name"]: d for d in documents if d["kind"] == "Pooler"}
    secrets = example_secrets()
    assert set(clusters) == set(poolers) == {"engram-db", "engram-cell-b"}
    for name, cluster in clusters.items():
        spec = cluster["spec"]
        assert spec["instances"] == 2
        assert spec["postgresql"]["parameters"]["wal_level"] == "logical"
        assert spec["postgresql"]["shared_preload_libraries"] == ["age"]
        assert spec["imageName"].endswith("/engram-postgres:17")
        pooler = poolers[name]
        assert pooler["spec"]["type"] == "rw"
        assert pooler["spec"]["pgbouncer"]["poolMode"] == "transaction"
        assert pooler["spec"]["pgbouncer"]["parameters"]["max_prepared_statements"] == "200"
        namespace = cluster["metadata"]["namespace"]
        assert pooler["metadata"]["namespace"] == namespace
        app = secrets[spec["bootstrap"]["initdb"]["secret"]["name"]]
        owner = secrets[spec["superuserSecret"]["name"]]
        assert (app["username"], owner["username"]) == ("engram_app", "postgres")
        assert _host(app["url"]) == f"{pooler['metadata']['name']}.{namespace}"
        assert _host(app["readUrl"]) == f"{name}-ro.{namespace}"
        assert _host(app["listenUrl"]) == _host(owner["uri"]) == f"{name}-rw.{namespace}"
        for url in (app["url"], app["readUrl"], app["listenUrl"]):
            assert urlsplit(url).username == "engram_app" and app["password"] in url
        assert urlsplit(owner["uri"]).username == "postgres" and owner["password"] in owner["uri"]


def test_example_values_name_the_example_secrets() -> None:
    values = VALUE_SETS[EXAMPLE]
    secrets = example_secrets()
    r = rendered(EXAMPLE)
    for env in (container_env(r, "Deployment"), container_env(r, "Job")):
        for variable in env:
            ref = variable.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                assert ref["key"] in secrets[ref["name"]], variable["name"]
    assert values["existingSecret"] == "engram-db-app"
    assert values["existingSecretKeys"]["databaseUrl"] == "url"  # through the Pooler
    # The network policy reaches both clusters' instances and both poolers.
    peers = [p["podSelector"]["matchLabels"] for rule in values["networkPolicy"]["egress"]["extra"] for p in rule["to"]]
    documents = example_documents("clusters.yaml")
    for d in documents:
        if d["kind"] == "Cluster":
            assert {"cnpg.io/cluster": d["metadata"]["name"]} in peers
        if d["kind"] == "Pooler":
            assert {"cnpg.io/poolerName": d["metadata"]["name"]} in peers


def test_example_admin_job_has_the_migration_jobs_connections() -> None:
    """cell-admin-job.yaml gets what the chart's migration Job gets (and the control database's
    run-time URL), so that `engram cell add` and `engram tenant move` reach every cell as owner."""
    (job,) = example_documents("cell-admin-job.yaml")
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    migrate = container_env(rendered(EXAMPLE), "Job")
    wanted = {v["name"]: v.get("valueFrom", v.get("value")) for v in migrate if v["name"] != "ENGRAM_LOG_LEVEL"}
    given = {v["name"]: v.get("valueFrom", v.get("value")) for v in env}
    assert given.pop("ENGRAM_DATABASE_URL") == {"secretKeyRef": {"name": "engram-db-app", "key": "url"}}
    assert given == wanted
    assert "ENGRAM_CELL_B_READ_URL" not in given


def test_server_reads_the_example_cells(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's own settings, given what a server pod and the migration Job of the example
    would get: every cell reachable at run time, the owners' URLs only in the Job."""
    if "cell_urls" not in Settings.model_fields:
        pytest.skip("this server version has no cells")
    secrets = example_secrets()
    r = rendered(EXAMPLE)
    seen = {}
    for kind in ("Deployment", "Job"):
        for variable in [v for v in os.environ if v.startswith("ENGRAM_")]:
            monkeypatch.delenv(variable)
        for variable in container_env(r, kind):
            ref = variable.get("valueFrom", {}).get("secretKeyRef")
            monkeypatch.setenv(variable["name"], secrets[ref["name"]][ref["key"]] if ref else variable["value"])
        monkeypatch.setenv("ENGRAM_OIDC_ISSUER", "https://idp.example.com/realms/engram")
        try:
            seen[kind] = Settings()
        except ValidationError as exc:
            pytest.fail(f"{kind}: the server refuses the chart's settings: {exc}")
    server, job = seen["Deployment"], seen["Job"]
    app, owner = secrets["engram-cell-b-app"], secrets["engram-cell-b-owner"]
    assert server.cells == job.cells == ["b"]
    b = server.cell("b")
    assert b is not None and b.url is not None and b.read_url is not None
    assert (b.url.get_secret_value(), b.read_url.get_secret_value()) == (app["url"], app["readUrl"])
    assert b.admin_url is None and b.replication_url is None
    assert server.listen_dsn() == secrets["engram-db-app"]["listenUrl"]
    owner_b = job.cell("b")
    assert owner_b is not None and owner_b.admin() == owner_b.replication() == owner["uri"]
    assert job.admin_dsn() == secrets["engram-db-owner"]["uri"]


def test_example_cell_metrics_query_runs(db_settings: Settings) -> None:
    """The exporter's query of the example (the signals of docs/scaling.md, "When to add a
    cell") on a migrated database, as the exporter runs it: one row of numbers."""
    (config,) = [d for d in example_documents("clusters.yaml") if d["kind"] == "ConfigMap"]
    query = yaml.safe_load(config["data"]["queries"])["engram_cell"]
    for cluster in [d for d in example_documents("clusters.yaml") if d["kind"] == "Cluster"]:
        assert cluster["spec"]["monitoring"]["customQueriesConfigMap"] == [
            {"name": config["metadata"]["name"], "key": "queries"}
        ]
    assert query["target_databases"] == ["engram"]
    columns = [next(iter(m)) for m in query["metrics"]]
    assert columns == ["tenants", "relations", "attributes", "catalog_bytes"]

    async def run() -> asyncpg.Record | None:
        conn = await asyncpg.connect(db_settings.admin_dsn())
        try:
            placed = await conn.fetchval(
                "SELECT count(*) FROM information_schema.columns"
                " WHERE table_schema = 'engram' AND table_name = 'tenants' AND column_name = 'cell'"
            )
            return await conn.fetchrow(query["query"]) if placed else None
        finally:
            await conn.close()

    row = asyncio.run(run())
    if row is None:
        pytest.skip("this database has no cells directory (engram.tenants.cell)")
    assert list(row.keys()) == columns
    assert row["tenants"] >= 0 and row["relations"] > 0 and row["attributes"] > row["relations"]
    assert row["catalog_bytes"] > 0
