"""Real parts only: the database `engram db up` provides, `engram serve` in its own process on a
free port, the SDK's streamable-HTTP client, and ES256 tokens signed by the server's dev key.

Fixtures only; what the tests share besides fixtures is in tests/support/, whose fixtures of
several clusters (support/cells.py) and of the console (support/console.py) are registered here.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from pydantic import SecretStr

from app.config import Settings
from app.devdb import provision
from app.store import migrate
from tests.support.server import TEST_DB, Server, free_port, serve

pytest_plugins = ["tests.support.cells", "tests.support.console"]  # cells and a standby; `browse`

# Set: the servers the tests start reach the database through PgBouncer in transaction mode
# (`make test` runs a selection of the suite so, docs/scaling.md).
THROUGH_PGBOUNCER = os.environ.get("ENGRAM_TEST_PGBOUNCER", "") not in ("", "0")


@pytest.fixture(scope="session")
def pgbouncer() -> Iterator[Any]:
    """A PgBouncer in transaction mode in front of the local database, with three server connections
    per database and user, so clients' transactions interleave on them; skipped where none runs."""
    from app.devdb.pooler import PgBouncer

    state = provision.LocalState.load()
    if state is None or os.environ.get("ENGRAM_DATABASE_URL"):
        pytest.skip("PgBouncer runs in front of the local `engram db` database only")
    bouncer = PgBouncer(free_port(), state.port, {provision.APP_ROLE: state.app_password}, pool_size=3)
    try:
        bouncer.start()
    except provision.ProvisionError as exc:
        pytest.skip(str(exc))
    yield bouncer
    bouncer.stop()


@pytest.fixture(scope="session")
def db_settings(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Settings]:
    """A database provisioned by the same code as `engram db up`, migrated to the latest schema.

    On the local database the suite gets a database of its own, made afresh each run and dropped
    at its end (a development server does not grow by a database per run); with
    ENGRAM_DATABASE_URL set, it uses that database as it is. With ENGRAM_TEST_PGBOUNCER, the
    run-time URL goes through PgBouncer (LISTEN keeps a direct one).
    """
    provision.up()
    key_file = tmp_path_factory.mktemp("keys") / "dev-key.json"
    settings = provision.with_local_database(Settings(dev_key_file=key_file))
    local = not os.environ.get("ENGRAM_DATABASE_URL")
    server_admin = settings.admin_dsn()
    if local:
        asyncio.run(provision.recreate_database(server_admin, TEST_DB))
        settings = settings.model_copy(
            update={
                "database_url": SecretStr(provision.on_database(settings.runtime_dsn(), TEST_DB)),
                "admin_database_url": SecretStr(provision.on_database(settings.admin_dsn(), TEST_DB)),
            }
        )
    asyncio.run(migrate.migrate(settings.admin_dsn(), settings.migrations_dir))
    if THROUGH_PGBOUNCER:
        bouncer = request.getfixturevalue("pgbouncer")
        settings = settings.model_copy(
            update={
                "listen_database_url": settings.database_url,
                "database_url": SecretStr(bouncer.url(provision.APP_ROLE, TEST_DB)),
            }
        )
    yield settings
    if local:
        asyncio.run(provision.drop_database(server_admin, TEST_DB))


@pytest.fixture(scope="session")
def server(db_settings: Settings) -> Iterator[Server]:
    with serve(db_settings) as running:
        yield running


@pytest.fixture(scope="session")
def plain(db_settings: Settings) -> Iterator[Server]:
    """A server as deployed by default: no output schemas listed, so native answers are text only
    (the suite's other servers list them, and their answers carry the complete record too)."""
    with serve(db_settings, ENGRAM_TOOL_OUTPUT_SCHEMAS="false") as running:
        yield running


@pytest.fixture
def tenant() -> str:
    """A fresh tenant for each test."""
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def client_for(server: Server) -> Callable[..., Any]:
    """`async with client_for(tenant) as c:` — a real MCP client holding a token for `tenant`."""

    return server.client


# --- embeddings: the real local model, and an OpenAI-compatible endpoint serving it ----------------


@pytest.fixture(scope="session")
async def local_model() -> AsyncIterator[Any]:
    from app.embeddings.local import LocalModel

    model = LocalModel(batch_size=16)
    await model.start()
    yield model
    await model.close()


@pytest.fixture(scope="session")
def _embedding_server(local_model: Any) -> Iterator[Any]:
    from tests.support.embedding_server import EmbeddingServer

    server = EmbeddingServer(local_model)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def embedding_server(_embedding_server: Any) -> Iterator[Any]:
    """The endpoint, answering normally at the start of each test."""
    _embedding_server.reset()
    yield _embedding_server
    _embedding_server.reset()
