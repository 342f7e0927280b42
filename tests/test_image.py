"""The server image: built from the Dockerfile with buildah (no daemon: vfs storage, chroot
isolation), then run the way a container runtime would run it, with a read-only root, /tmp the only
writable path, the image's uid, entry point, command, environment and working directory.

Base images cannot be pulled everywhere, so the build's base is made by scripts/image-base.sh from
a debootstrap Debian trixie root with Python 3.13 (the Debian release and Python of the default
python:3.13-slim-trixie base). That base and buildah's storage are cached under
$ENGRAM_CACHE_DIR/buildah; pip's downloads are cached there through the Dockerfile's cache mount.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx2
import pytest

from app.auth.devkeys import mint_token
from app.auth.principal import READ, WRITE
from app.config import Settings, cache_dir
from tests.support.client import connect, record, text
from tests.support.search import eventually
from tests.support.server import ROOT, free_port

pytestmark = pytest.mark.timeout(900)

IMAGE = "localhost/engram:test"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
# Mounts what a container runtime would, then enters the image as its user.
_RUNNER = """
set -eu
root=$1 tmp=$2 uid=$3 gid=$4 workdir=$5
shift 5
mount --bind "$root" "$root"
mount -o remount,bind,ro "$root"
mount --bind "$tmp" "$root/tmp"
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
exec unshare --root="$root" --wd="$workdir" --setuid "$uid" --setgid "$gid" -- "$@"
"""


@dataclass
class Image:
    config: dict[str, Any]
    rootfs: Path
    timings: dict[str, float] = field(default_factory=dict)
    megabytes: float | None = None  # the files of the image's root, once measured

    @property
    def env(self) -> dict[str, str]:
        return dict(item.split("=", 1) for item in self.config["Env"])

    def start(
        self, tmp: Path, args: list[str] | None = None, output: IO[str] | int = subprocess.PIPE, **env: str
    ) -> subprocess.Popen[str]:
        """The entry point with `args` (default: the image's command), as a container would run it."""
        uid, _, gid = self.config["User"].partition(":")
        argv = [*self.config["Entrypoint"], *(self.config["Cmd"] if args is None else args)]
        workdir = self.config["WorkingDir"] or "/"
        runner = ["unshare", "--mount", "--propagation", "private", "sh", "-c", _RUNNER, "runner"]
        return subprocess.Popen(
            [*runner, str(self.rootfs), str(tmp), uid, gid or uid, workdir, *argv],
            env={**self.env, **env},
            stdout=output,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def run(self, tmp: Path, args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
        process = self.start(tmp, args, **env)
        out, _ = process.communicate(timeout=120)
        return subprocess.CompletedProcess(process.args, process.returncode, out)


def _buildah_env() -> dict[str, str]:
    """buildah's storage (vfs: no overlay or fuse needed) and temporary files under the cache."""
    home = cache_dir() / "buildah"
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    conf = home / "storage.conf"
    conf.write_text(f'[storage]\ndriver = "vfs"\ngraphroot = "{home / "storage"}"\nrunroot = "{home / "run"}"\n')
    return {
        **os.environ,
        "CONTAINERS_STORAGE_CONF": str(conf),
        "TMPDIR": str(home / "tmp"),
        "BUILDAH_ISOLATION": "chroot",
    }


def _buildah(env: dict[str, str], *args: str, timeout: float = 600) -> str:
    result = subprocess.run(["buildah", *args], env=env, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise AssertionError(f"buildah {' '.join(args[:2])} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result.stdout


def _skip_unless_buildah_runs(env: dict[str, str]) -> None:
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("building the image needs root on Linux (buildah with chroot isolation)")
    missing = [tool for tool in ("buildah", "debootstrap", "unshare") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (scripts/system-deps.sh installs them as root on Debian)")
    info = subprocess.run(["buildah", "info"], env=env, capture_output=True, text=True)
    if info.returncode != 0:
        pytest.skip(f"buildah cannot run here: {info.stderr.strip()[-500:]}")


@pytest.fixture(scope="module")
def image(request: pytest.FixtureRequest) -> Iterator[Image]:
    env = _buildah_env()
    _skip_unless_buildah_runs(env)
    timings: dict[str, float] = {}
    began = time.monotonic()

    # The base, named after the script that makes it, so a changed script makes a new one.
    script = ROOT / "scripts/image-base.sh"
    base = f"localhost/engram-base:trixie-{hashlib.sha256(script.read_bytes()).hexdigest()[:12]}"
    cached = subprocess.run(["buildah", "inspect", "--type", "image", base], env=env, capture_output=True)
    started = time.monotonic()
    made = subprocess.run([str(script), base], env=env, capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, f"scripts/image-base.sh failed:\n{made.stderr[-3000:]}"
    timings["base image" + (" (cached)" if cached.returncode == 0 else "")] = time.monotonic() - started
    for old in _buildah(env, "images", "--format", "{{.Name}}:{{.Tag}}").split():
        if old.startswith("localhost/engram-base:trixie-") and old != base:
            _buildah(env, "rmi", old)  # made by an earlier version of the script

    # Builds behind a TLS-inspecting proxy need the host's CA bundle for pip.
    volumes = ["--volume", f"{CA_BUNDLE}:{CA_BUNDLE}:ro"] if CA_BUNDLE.exists() else []
    started = time.monotonic()
    _buildah(
        env,
        "build",
        "--pull=never",
        "--format=docker",  # keeps HEALTHCHECK, which the OCI format has no field for
        "--build-arg",
        f"PYTHON_IMAGE={base}",
        "--build-arg",
        "REVISION=test-build",
        *volumes,
        "--tag",
        IMAGE,
        str(ROOT),
    )
    timings["buildah build"] = time.monotonic() - started

    config = json.loads(_buildah(env, "inspect", "--type", "image", IMAGE))["Docker"]["config"]
    container = _buildah(env, "from", "--pull=never", IMAGE).strip()
    rootfs = Path(_buildah(env, "mount", container).strip())
    built = Image(config, rootfs, timings)
    yield built

    _buildah(env, "umount", container)
    _buildah(env, "rm", container)
    _buildah(env, "rmi", IMAGE)
    _buildah(env, "rmi", "--prune")
    timings["all image tests"] = time.monotonic() - began
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        figures = ", ".join(f"{step} {seconds:.1f} s" for step, seconds in timings.items())
        if built.megabytes is not None:
            figures += f"; image {built.megabytes:.0f} MB"
        with capture.global_and_fixture_disabled():
            reporter.write_line(f"\nimage build and run: {figures}")


@pytest.fixture
def container_tmp(tmp_path: Path) -> Path:
    """The container's /tmp: writable by the image's user."""
    tmp = tmp_path / "container-tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)
    return tmp


def test_image_metadata(image: Image) -> None:
    config = image.config
    uid, _, gid = config["User"].partition(":")
    # Kubernetes' runAsNonRoot can verify only a numeric user.
    assert uid.isdigit() and int(uid) != 0 and gid.isdigit()
    assert config["Entrypoint"] == ["engram"] and config["Cmd"] == ["serve"]
    assert {"8000/tcp", "9464/tcp"} <= set(config["ExposedPorts"])
    assert config["Healthcheck"]["Test"][0] == "CMD"
    labels = config["Labels"]
    assert labels["org.opencontainers.image.revision"] == "test-build"
    assert labels["org.opencontainers.image.version"] and labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    server = json.loads((ROOT / "server.json").read_text())
    assert labels["io.modelcontextprotocol.server.name"] == server["name"]  # the MCP Registry's ownership proof
    assert labels["org.opencontainers.image.source"] == server["repository"]["url"]
    assert image.env["ENGRAM_REVISION"] == "test-build"  # the build_info metric's revision
    assert image.env["ENGRAM_HOST"] == "0.0.0.0"  # noqa: S104 (inside the container)


def test_image_has_no_build_tools(image: Image) -> None:
    for tool in ("gcc", "cc", "c++", "make", "ld"):
        for directory in ("usr/bin", "usr/local/bin", "bin"):
            assert not (image.rootfs / directory / tool).exists(), f"/{directory}/{tool} is in the image"
    assert not (image.rootfs / "opt/venv/bin/pip").exists()
    assert not (image.rootfs / "src").exists()  # the build stage's sources stay behind


def test_default_settings_refuse_dev_auth_off_loopback(image: Image, container_tmp: Path) -> None:
    """The image listens on all interfaces, so the development issuer must not start there."""
    result = image.run(container_tmp, ["serve"], ENGRAM_DATABASE_URL="postgresql://unused@127.0.0.1:1/x")
    assert result.returncode != 0
    assert "ENGRAM_AUTH_MODE=dev is allowed only when ENGRAM_HOST is a loopback address" in result.stdout


def test_migrate_command(image: Image, container_tmp: Path, db_settings: Settings) -> None:
    result = image.run(container_tmp, ["migrate"], ENGRAM_HOST="127.0.0.1", ENGRAM_DATABASE_URL=db_settings.admin_dsn())
    assert result.returncode == 0, result.stdout
    assert "database schema is up to date" in result.stdout


@dataclass
class Served:
    process: subprocess.Popen[str]
    base: str
    settings: Settings
    log: Path
    metrics_port: int


@pytest.fixture
def served(image: Image, container_tmp: Path, db_settings: Settings) -> Iterator[Served]:
    """`engram serve` from the image on a free loopback port (development auth, so tokens can be
    minted from the key the server writes to its /tmp)."""
    port, metrics_port = free_port(), free_port()
    log = container_tmp.parent / "serve.log"
    started = time.monotonic()
    with log.open("w") as output:
        process = image.start(
            container_tmp,
            output=output,
            ENGRAM_HOST="127.0.0.1",
            ENGRAM_PORT=str(port),
            ENGRAM_METRICS_PORT=str(metrics_port),
            ENGRAM_DATABASE_URL=db_settings.runtime_dsn(),
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            pytest.fail(f"the image's server exited with {process.returncode}:\n{log.read_text()}")
        try:
            if httpx2.get(f"{base}/healthz", timeout=1).status_code == 200:
                break
        except httpx2.TransportError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail("the image's server did not answer /healthz within 60 s")
        time.sleep(0.2)
    image.timings.setdefault("start to /healthz", time.monotonic() - started)
    key = container_tmp / "engram" / "dev-signing-key.json"
    settings = Settings(host="127.0.0.1", port=port, dev_key_file=key)
    yield Served(process, base, settings, log, metrics_port)
    if process.poll() is None:
        process.kill()
        process.wait(timeout=30)


def test_serves_health_and_readiness(served: Served) -> None:
    assert httpx2.get(f"{served.base}/healthz").json() == {"status": "ok"}
    ready = httpx2.get(f"{served.base}/readyz").json()
    # (other suites' cells may be in this database's directory too: `cells` then names them)
    assert ready["status"] == "ready" and ready["embeddings"] == "ok (all-MiniLM-L6-v2, 384 dimensions)"


def test_image_carries_no_torch_and_stays_small(image: Image) -> None:
    site = next((image.rootfs / "opt/venv/lib").glob("python3*/site-packages"))
    assert (site / "onnxruntime").is_dir() and (site / "engram_graph_model/files/model.safetensors").is_file()
    for heavy in ("torch", "transformers", "sentence_transformers", "scipy", "sklearn"):
        assert not (site / heavy).exists(), f"{heavy} is in the image"
    size = sum(p.lstat().st_size for p in image.rootfs.rglob("*") if p.is_file() and not p.is_symlink())
    image.megabytes = size / 1e6  # reported with the timings, not asserted: it depends on the base


def test_serves_metrics_on_its_own_port(served: Served) -> None:
    if "metrics_port" not in Settings.model_fields:
        pytest.skip("this server version has no ENGRAM_METRICS_PORT")
    response = httpx2.get(f"http://127.0.0.1:{served.metrics_port}/metrics")
    assert response.status_code == 200
    assert "# TYPE " in response.text


def test_healthcheck_command(image: Image, served: Served, container_tmp: Path) -> None:
    """The image's HEALTHCHECK passes against the running server and fails where none listens."""
    check = Image({**image.config, "Entrypoint": image.config["Healthcheck"]["Test"][1:], "Cmd": []}, image.rootfs)
    assert check.run(container_tmp, [], ENGRAM_PORT=str(served.settings.port)).returncode == 0
    assert check.run(container_tmp, [], ENGRAM_PORT=str(free_port())).returncode != 0


async def test_searches_by_meaning_out_of_the_box(served: Served, tenant: str) -> None:
    """Semantic search with the image's defaults: a query that shares no word with its answer finds it."""
    token = mint_token(served.settings, tenant=tenant, scopes=(READ, WRITE))
    facts = [
        {"name": "Peanut Allergy", "type": "health", "observations": ["Liam reacts badly to peanuts and tree nuts"]},
        {"name": "Kyoto Trip", "type": "travel", "observations": ["temples and gardens in the autumn"]},
        {"name": "Billing Service", "type": "service", "observations": ["charges customers' cards every month"]},
    ]
    async with connect(f"{served.base}/mcp", token) as client:
        assert not (await client.call_tool("upsert_entities", {"entities": facts})).is_error

        async def found() -> list[str] | None:  # at once, or (past its budget on a loaded machine) once filled
            query = {"query": "which foods make my son sick", "limit": 1, "detail": "full"}
            answer = record(await client.call_tool("search", query))
            if any("no embedding yet" in note for note in answer.get("notices", [])):
                return None
            return [hit["entity"]["name"] for hit in answer["hits"]]

        assert await eventually(found) == ["Peanut Allergy"]


async def test_serves_mcp_tool_calls(served: Served, tenant: str) -> None:
    token = mint_token(served.settings, tenant=tenant, scopes=(READ, WRITE))
    async with connect(f"{served.base}/mcp", token) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert {"upsert_entities", "get_entity"} <= names
        made = await client.call_tool(
            "upsert_entities", {"entities": [{"name": "Image test", "type": "check", "observations": ["built"]}]}
        )
        assert text(made) == "Created: Image test v1 +1 facts."
        entity = record(await client.call_tool("get_entity", {"name": "Image test", "detail": "full"}))
        assert "built" in json.dumps(entity)


def test_stops_cleanly_on_sigterm(served: Served) -> None:
    served.process.send_signal(signal.SIGTERM)
    served.process.wait(timeout=60)
    out = served.log.read_text()
    # uvicorn finishes its shutdown, then exits by the signal it received.
    assert served.process.returncode in (0, -signal.SIGTERM), out
    assert "Application shutdown complete" in out
