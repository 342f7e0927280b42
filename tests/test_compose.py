"""compose.yaml, the one-command quick start: there is no container engine here, so the file is
checked against the Compose Specification's JSON schema (tests/data/compose-spec.json, from
github.com/compose-spec/compose-spec, schema/compose-spec.json at 170098ba), its images against
what the release publishes, the server's environment against Engram's own settings; then the
services' own commands and environments are run here in Compose's order against a real database
(migrate, the first-account job, `engram serve` as engram_app with the built-in sign-in), and an
assistant signs in by URL as the first account and calls a tool."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2
import jsonschema
import yaml

from app.config import Settings
from tests.support.server import ROOT

COMPOSE = ROOT / "compose.yaml"
SCHEMA = ROOT / "tests/data/compose-spec.json"


def _compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())  # PyYAML resolves the `<<:` merge keys as Compose does


def _example_env() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in (ROOT / ".env.example").read_text().splitlines() if "=" in line)
    return {k: v for k, v in pairs if not k.startswith("#")}


def _interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?error}, and $$ for a literal $."""

    def one(match: re.Match[str]) -> str:
        name, op, arg = match.group(1), match.group(2), match.group(3)
        if env.get(name):
            return env[name]
        assert op != ":?", f"{name} must be set: {arg}"
        return arg or ""

    return re.sub(r"\$\{(\w+)(?:(:-|:\?)([^}]*))?\}", one, value.replace("$$", "\0")).replace("\0", "$")


def test_compose_file_matches_the_specification() -> None:
    validator = jsonschema.Draft7Validator(yaml.safe_load(SCHEMA.read_text()))  # the schema's own draft
    assert not [e.message for e in validator.iter_errors(_compose())]
    # The schema refuses what Compose refuses, so the check above is not vacuous.
    wrong = {**_compose(), "services": {"db": {"image": "x", "depends_on": {"a": {"condition": "later"}}}}}
    assert list(validator.iter_errors(wrong))


def test_images_are_the_published_ones_and_build_from_the_repository() -> None:
    services = _compose()["services"]
    workflow = yaml.safe_load((ROOT / ".github/workflows/release.yml").read_text())
    version = next(line for line in (ROOT / "pyproject.toml").read_text().splitlines() if line.startswith("version"))
    version = version.split('"')[1]
    assert services["db"]["image"] == f"{workflow['env']['DB_IMAGE']}:{version}"
    assert (ROOT / services["db"]["build"]["context"] / "Dockerfile").is_file()
    for name in ("migrate", "first-account", "engram"):
        assert services[name]["image"] == f"{workflow['env']['IMAGE']}:{version}"
        assert (ROOT / services[name]["build"]["context"] / "Dockerfile").is_file()
        assert services[name]["read_only"] is True and services[name]["tmpfs"] == ["/tmp"]


def test_it_starts_in_order_and_serves_on_loopback_only() -> None:
    services = _compose()["services"]
    assert services["migrate"]["depends_on"] == {"db": {"condition": "service_healthy"}}
    assert services["first-account"]["depends_on"] == {"migrate": {"condition": "service_completed_successfully"}}
    assert services["engram"]["depends_on"] == {"first-account": {"condition": "service_completed_successfully"}}
    assert services["db"]["healthcheck"]["test"][:2] == ["CMD", "pg_isready"]
    assert "ports" not in services["db"]  # the database is reached on the compose network only
    (port,) = services["engram"]["ports"]
    assert _interpolate(port, {}) == "127.0.0.1:8000:8000"


def test_every_setting_is_in_the_example_env_and_the_server_accepts_them() -> None:
    text = COMPOSE.read_text()
    used = set(re.findall(r"\$\{(\w+)", text))
    assert used <= set(_example_env()), f"not in .env.example: {sorted(used - set(_example_env()))}"
    filled = {k: v or f"secret-{k.lower()}" for k, v in _example_env().items()}
    services = _compose()["services"]
    server = {k: _interpolate(str(v), filled) for k, v in services["engram"]["environment"].items()}
    settings = Settings(**{k.removeprefix("ENGRAM_").lower(): v for k, v in server.items()}, host="0.0.0.0")  # noqa: S104
    settings.check_serving()
    assert settings.auth_mode == "builtin" and settings.console
    assert urlsplit(settings.runtime_dsn()).username == "engram_app"  # the server is not the owner
    for job in ("migrate", "first-account"):
        owner = _interpolate(services[job]["environment"]["ENGRAM_DATABASE_URL"], filled)
        assert urlsplit(owner).username == "postgres" and urlsplit(owner).hostname == "db"
    assert "ENGRAM_APP_PASSWORD" in services["db"]["environment"]  # makes engram_app (sql/initdb)


def test_first_account_job_makes_the_account_once(db_settings: Settings, tmp_path: Path) -> None:
    """The job's own script, with the checkout's `engram` on PATH, against the test database: twice
    (a restart of the stack runs it again), then the account and its membership are there."""
    job = _compose()["services"]["first-account"]
    assert job["entrypoint"] == ["/bin/sh", "-eu", "-c"]
    script = job["command"][0].replace("$$", "$")
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "ENGRAM_DATABASE_URL": db_settings.admin_dsn(),
        "ENGRAM_FIRST_USER": "compose-admin",
        "ENGRAM_FIRST_PASSWORD": "a long enough password 1",
        "ENGRAM_FIRST_TENANT": "compose-tenant",
        "ENGRAM_CACHE_DIR": str(tmp_path),
    }
    for _ in range(2):
        run = subprocess.run(["/bin/sh", "-eu", "-c", script], env=env, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stdout + run.stderr
    users = subprocess.run(["engram", "user", "list"], env=env, capture_output=True, text=True, check=True).stdout
    assert [line.split("\t")[0] for line in users.splitlines()].count("compose-admin") == 1
    members = subprocess.run(
        ["engram", "member", "list", "--tenant", "compose-tenant"], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert "compose-admin\tadmin" in members


async def test_the_stack_as_compose_runs_it_serves_mcp_to_the_first_account(tmp_path: Path) -> None:
    """The services' own commands and environments, run here in order as Compose runs them (the
    database URLs pointed at a fresh database of the local cluster instead of the `db` service):
    `migrate`, then the first-account job, then `engram serve` as engram_app only, with the
    built-in sign-in; then an assistant signs in by URL alone as the first account and calls a tool."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from app.devdb import provision
    from tests.support.oauth_agent import Person, oauth_client
    from tests.support.server import TEST_DB, free_port, start_server

    services = _compose()["services"]
    filled = {k: v or f"a long secret for {k.lower()}" for k, v in _example_env().items()}
    local = provision.with_local_database(Settings())
    name = f"{TEST_DB}_compose"
    await provision.recreate_database(local.admin_dsn(), name)
    owner, runtime = provision.on_database(local.admin_dsn(), name), provision.on_database(local.runtime_dsn(), name)
    port = free_port()

    def env_of(service: str, database: str, **extra: str) -> dict[str, str]:
        given = {k: _interpolate(str(v), filled) for k, v in services[service]["environment"].items()}
        clean = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
        return {**clean, **given, "ENGRAM_DATABASE_URL": database, "ENGRAM_CACHE_DIR": str(tmp_path), **extra}

    try:
        for job, command in (
            ("migrate", ["engram", *services["migrate"]["command"]]),
            (
                "first-account",
                [*services["first-account"]["entrypoint"], services["first-account"]["command"][0].replace("$$", "$")],
            ),
        ):
            env = env_of(job, owner, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
            run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
            assert run.returncode == 0, (job, run.stdout, run.stderr)
        public = f"http://127.0.0.1:{port}"
        env = env_of("engram", runtime, ENGRAM_PUBLIC_URL=public, ENGRAM_PORT=str(port),
                     ENGRAM_METRICS_PORT=str(free_port()), ENGRAM_HOST="127.0.0.1",
                     ENGRAM_EMBEDDING_PROVIDER="none")  # fmt: skip
        assert "ENGRAM_ADMIN_DATABASE_URL" not in env  # the server holds no owner credentials
        server = start_server(env)
        try:
            person = Person(
                filled["ENGRAM_FIRST_USER"], filled["ENGRAM_FIRST_PASSWORD"], tenant=filled["ENGRAM_FIRST_TENANT"]
            )
            http, _ = oauth_client(f"{public}/mcp", person)
            async with Client(streamable_http_client(f"{public}/mcp", http_client=http), mode="legacy") as c:
                made = await c.call_tool("upsert_entities", {"entities": [{"name": "Compose", "type": "tool"}]})
                assert not made.is_error, made.content
            console = httpx2.get(f"{public}/console", timeout=10)
            assert console.status_code == 200 and "Sign in" in console.text
        finally:
            server.terminate()
            server.wait(timeout=30)
    finally:
        await provision.drop_database(local.admin_dsn(), name)
