"""What a release publishes, checked before any tag is pushed: the workflow (actionlint, and the
steps that make each artifact), server.json against the MCP Registry's published schema, and the
names every manifest gives the published artifacts (docs/deployment.md, "Releases")."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from tests.support.chart import CHART, render
from tests.support.server import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
# The registry's schema as published at its $id, shipped byte for byte by skillsaw (a dev dependency)
# from github.com/modelcontextprotocol/static, schemas/2025-12-11/server.schema.json.
SCHEMA_URL = "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json"
SCHEMA = resources.files("skillsaw.schemas.mcp_registry.v2025_12_11") / "server.schema.json"


def _workflow() -> dict[str, Any]:
    return yaml.safe_load(WORKFLOW.read_text())


def _server() -> dict[str, Any]:
    return json.loads((ROOT / "server.json").read_text())


def test_workflows_pass_actionlint() -> None:
    """actionlint, with shellcheck checking each `run:` script (both from the dev lock)."""
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(
        [str(bin_dir / "actionlint"), "-no-color"], capture_output=True, text=True, cwd=ROOT, env=env
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert subprocess.run(["shellcheck", "--version"], capture_output=True, env=env).returncode == 0


def _steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return job["steps"]


def _uses(job: dict[str, Any], action: str) -> dict[str, Any]:
    found = [s for s in _steps(job) if str(s.get("uses", "")).split("@")[0] == action]
    assert found, f"no step uses {action}"
    return found[0]


def _runs(job: dict[str, Any]) -> str:
    return "\n".join(s.get("run", "") for s in _steps(job))


def test_a_tag_publishes_every_artifact() -> None:
    workflow = _workflow()
    assert workflow[True]["push"] == {"tags": ["v*.*.*"]}  # YAML 1.1 reads the key `on` as true
    assert workflow["permissions"] == {}  # each job asks for what it needs
    jobs = workflow["jobs"]
    image = workflow["env"]["IMAGE"]

    # The image: both architectures, an SBOM and provenance, the revision, signed by its digest.
    build = _uses(jobs["image"], "docker/build-push-action")["with"]
    assert set(build["platforms"].split(",")) == {"linux/amd64", "linux/arm64"}
    assert build["push"] is True and build["sbom"] is True and build["provenance"] == "mode=max"
    assert "REVISION=${{ github.sha }}" in build["build-args"]
    assert 'cosign sign --yes "$IMAGE@$DIGEST"' in _runs(jobs["image"])
    assert jobs["image"]["permissions"]["id-token"] == "write"  # keyless: the job's OIDC identity

    # The chart: pushed as an OCI artifact and signed.
    chart_run = _runs(jobs["chart"])
    assert 'helm push dist/engram-*.tgz "$CHART_REPOSITORY"' in chart_run and "cosign sign --yes" in chart_run
    assert workflow["env"]["CHART_REPOSITORY"].startswith("oci://")

    # The wheel: trusted publishing, so no token anywhere.
    publish = _uses(jobs["pypi"], "pypa/gh-action-pypi-publish")
    assert "with" not in publish or "password" not in publish["with"]
    assert jobs["pypi"]["permissions"] == {"id-token": "write"}

    # server.json, once the packages it names exist (the registry checks them).
    assert set(jobs["mcp-registry"]["needs"]) == {"pypi", "image"}
    assert "login github-oidc" in _runs(jobs["mcp-registry"])
    assert "secrets." not in WORKFLOW.read_text().replace("secrets.GITHUB_TOKEN", "")
    assert image == _server()["packages"][0]["identifier"].rsplit(":", 1)[0]


def test_server_json_matches_the_registry_schema() -> None:
    schema = json.loads(SCHEMA.read_text())
    assert schema["$id"] == SCHEMA_URL
    server = _server()
    assert server["$schema"] == SCHEMA_URL
    validator = jsonschema.Draft7Validator(schema, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)
    assert [e.message for e in validator.iter_errors(server)] == []
    # The same schema refuses what the registry refuses, so the check above is not vacuous.
    assert list(validator.iter_errors({**server, "description": "x" * 101}))
    assert list(validator.iter_errors({**server, "name": "no-namespace"}))


def test_manifests_name_one_version_and_the_published_names() -> None:
    check = [sys.executable, str(ROOT / "scripts/release-check.py")]
    agreed = subprocess.run(check, capture_output=True, text=True)
    assert agreed.returncode == 0, agreed.stderr
    version = agreed.stdout.strip().removeprefix("version=")
    assert subprocess.run([*check, "--tag", f"v{version}"], capture_output=True).returncode == 0
    wrong = subprocess.run([*check, "--tag", "v999.0.0"], capture_output=True, text=True)
    assert wrong.returncode == 1 and "v999.0.0" in wrong.stderr


def test_the_chart_installs_the_published_image_by_default() -> None:
    server = _server()
    published = next(p["identifier"] for p in server["packages"] if p["registryType"] == "oci")
    deployment = render({}).one("Deployment", "engram")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == published
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert published.endswith(f":{app_version}")


def test_the_dockerfile_labels_the_image() -> None:
    """OCI annotations from build arguments (the workflow passes VERSION, REVISION, CREATED), and the
    revision exported to the server (tests/test_image.py checks the built image)."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    final = text[text.rindex("\nFROM ") :]
    labels = dict(re.findall(r'([\w.]+)="([^"]*)"', final[final.index("LABEL ") : final.index("\nRUN ")]))
    assert labels["org.opencontainers.image.revision"] == "${REVISION}"
    assert labels["org.opencontainers.image.version"] == "${VERSION}"
    assert labels["org.opencontainers.image.created"] == "${CREATED}"
    assert labels["org.opencontainers.image.source"] == _server()["repository"]["url"]
    assert labels["io.modelcontextprotocol.server.name"] == _server()["name"]
    assert re.search(r"\bENGRAM_REVISION=\$\{REVISION\}", final)


def test_the_distribution_carries_the_registry_name() -> None:
    """PyPI shows README.md as the description: the MCP Registry's proof that the wheel is the entry's."""
    assert f"<!-- mcp-name: {_server()['name']} -->" in (ROOT / "README.md").read_text()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'engram-graph = "app.cli:main"' in pyproject  # `uvx engram-graph serve`, as server.json says


def _needs(jobs: dict[str, Any], name: str) -> set[str]:
    """Every job `name` waits for, directly or through others."""
    direct = jobs[name].get("needs", [])
    found = set([direct] if isinstance(direct, str) else direct)
    for job in list(found):
        found |= _needs(jobs, job)
    return found


def test_nothing_is_published_before_the_suite_passes() -> None:
    jobs = _workflow()["jobs"]
    assert "make test" in _runs(jobs["test"])
    publishing = {"pypi", "image", "db-image", "chart", "mcp-registry"}
    assert publishing <= set(jobs)
    for name in publishing:
        assert "test" in _needs(jobs, name), f"{name} does not wait for the test suite"


def test_every_action_is_pinned_by_commit() -> None:
    """A tag can be moved to other code; a commit cannot. The comment names the release pinned."""
    lines = [line.strip() for line in WORKFLOW.read_text().splitlines() if re.match(r"\s*(- )?uses:", line)]
    assert lines
    for line in lines:
        assert re.fullmatch(r"(- )?uses: [\w.-]+/[\w.-]+@[0-9a-f]{40}  # v\d+(\.\d+)*", line), line


def test_the_database_image_is_built_signed_and_used() -> None:
    workflow = _workflow()
    jobs, db_image = workflow["jobs"], workflow["env"]["DB_IMAGE"]
    build = _uses(jobs["db-image"], "docker/build-push-action")["with"]
    assert build["context"] == "sql" and (ROOT / "sql/Dockerfile").is_file()
    assert set(build["platforms"].split(",")) == {"linux/amd64", "linux/arm64"}
    assert build["push"] is True and build["sbom"] is True
    assert 'cosign sign --yes "$DB_IMAGE@$DIGEST"' in _runs(jobs["db-image"])
    assert "type=semver,pattern={{version}}" in _uses(jobs["db-image"], "docker/metadata-action")["with"]["tags"]
    # The chart's bundled database runs it, at the chart's release.
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["postgresql"]["image"]["repository"] == db_image and values["postgresql"]["image"]["tag"] == ""


# The Apache License 2.0 as the Apache Software Foundation publishes it (LICENSE-2.0.txt), copied
# from a PyPI distribution that ships it unchanged (opentelemetry-sdk's license file).
APACHE_2_SHA256 = "c71d239df91726fc519c6eb72d318ec65820627232b2f796219e87dcf35d0ab4"


def test_repository_basics() -> None:
    import hashlib
    import tomllib

    assert hashlib.sha256((ROOT / "LICENSE").read_bytes()).hexdigest() == APACHE_2_SHA256
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"] == "Apache-2.0"
    security = (ROOT / "SECURITY.md").read_text()
    assert "## Reporting a vulnerability" in security and "## In scope" in security
    # Keep a Changelog: an Unreleased section, a section per released version with link references,
    # and only its kinds of change.
    changelog = (ROOT / "CHANGELOG.md").read_text()
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    releases = re.findall(r"^## \[([^\]]+)\]", changelog, re.M)
    assert releases[0] == "Unreleased" and version in releases
    assert all(re.search(rf"^\[{re.escape(r)}\]: https://", changelog, re.M) for r in releases)
    kinds = set(re.findall(r"^### (.+)$", changelog, re.M))
    assert kinds <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
