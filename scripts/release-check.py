#!/usr/bin/env python3
"""Check that every manifest of a release names the same version and the same published names, and
print `version=X.Y.Z` (the release workflow reads it). With --tag vX.Y.Z, the tag must name it too.

    scripts/release-check.py [--tag vX.Y.Z]

Standard library only: the release workflow runs it before anything is installed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def problems(tag: str | None) -> tuple[str, list[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    version, distribution = project["version"], project["name"]
    server = json.loads((ROOT / "server.json").read_text())
    chart = (ROOT / "helm/engram/Chart.yaml").read_text()
    values = (ROOT / "helm/engram/values.yaml").read_text()
    dockerfile = (ROOT / "Dockerfile").read_text()
    readme = (ROOT / "README.md").read_text()
    found = []
    if tag is not None and tag != f"v{version}":
        found.append(f"the tag {tag} is not v{version}, pyproject.toml's version")
    if server["version"] != version:
        found.append(f"server.json's version {server['version']} is not {version}")
    packages = {p["registryType"]: p for p in server.get("packages", [])}
    pypi, oci = packages.get("pypi", {}), packages.get("oci", {})
    if (pypi.get("identifier"), pypi.get("version")) != (distribution, version):
        found.append(f"server.json's pypi package is not {distribution} {version}")
    image = _value(values, r"^image:\n(?:  .*\n)*?  repository: (\S+)")
    if oci.get("identifier") != f"{image}:{version}":
        found.append(f"server.json's oci package is not {image}:{version}, the chart's default image")
    if _value(chart, r'^appVersion: "?([^"\n]+)"?$') != version:
        found.append(f"helm/engram/Chart.yaml's appVersion is not {version}")
    if _value(dockerfile, r"^ARG VERSION=(\S+)$") != version:
        found.append(f"the Dockerfile's VERSION is not {version}")
    name = server["name"]
    if _value(dockerfile, r'io\.modelcontextprotocol\.server\.name="([^"]+)"') != name:
        found.append(f"the image's io.modelcontextprotocol.server.name label is not {name}")
    if f"<!-- mcp-name: {name} -->" not in readme:
        found.append(f"README.md (the PyPI description) lacks `<!-- mcp-name: {name} -->`")
    return version, found


def _value(text: str, pattern: str) -> str | None:
    match = re.search(pattern, text, re.MULTILINE)
    return match.group(1) if match else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tag", help="the release tag, vX.Y.Z")
    version, found = problems(parser.parse_args().tag)
    for problem in found:
        print(problem, file=sys.stderr)
    if found:
        return 1
    print(f"version={version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
