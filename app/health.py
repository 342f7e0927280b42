"""/healthz and /readyz: whether this replica is alive, and whether it should be sent requests."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from app.config import MAIN_CELL
from app.observability.context import deadline
from app.services.indexing import Indexer
from app.store import cells, migrate
from app.store.cell import Cell, each_cell
from app.store.database import Database
from app.store.errors import Unavailable
from app.store.pool import wrong_settings

logger = logging.getLogger("engram")

# /readyz answers within 3 s: its database check gets this long, then its connection is dropped.
READY_BUDGET = 2.5


async def readiness(db: Database, migrations_dir: Path) -> str | None:
    """None when the database answers, its schema is current and the run-time role's session
    settings are Engram's (migration 0022); otherwise why not.

    Raises MigrationError when the database's schema is one this code does not know.
    """
    try:
        with deadline(READY_BUDGET):
            async with db.connection() as lease:
                todo = await migrate.pending(lease.conn, migrations_dir)
                wrong = [] if todo else await wrong_settings(lease.conn)
    except Unavailable as exc:
        return f"database unreachable: {exc.message}"
    except asyncpg.PostgresError as exc:
        return f"database unreachable: {type(exc).__name__}"
    if todo:
        return f"migrations pending: {', '.join(todo)}"
    return f"session settings wrong: {'; '.join(wrong)}" if wrong else None


async def preflight(url: str, wait_seconds: float) -> str | None:
    """Why `engram serve` cannot start on the database at `url`, or None: unreachable (after waiting
    up to `wait_seconds` for one still starting), credentials refused, or never migrated. Checked
    before the server loads, so that a person reads one sentence and its fix, not a traceback."""
    parts = urlsplit(url)
    where = f"{parts.hostname or 'localhost'}:{parts.port or 5432}{parts.path}"
    until = time.monotonic() + wait_seconds
    while True:
        try:
            conn = await asyncpg.connect(url, timeout=5)
            break
        except (asyncpg.InvalidPasswordError, asyncpg.InvalidAuthorizationSpecificationError) as exc:
            return f"the database at {where} refused ENGRAM_DATABASE_URL's credentials: {exc}"
        except asyncpg.InvalidCatalogNameError:
            return f"the database {where} does not exist: create it, or run `engram db up` for a local one"
        except (OSError, TimeoutError, asyncpg.CannotConnectNowError, asyncpg.PostgresConnectionError) as exc:
            if time.monotonic() >= until:
                return (
                    f"cannot reach the database at {where} ({exc or type(exc).__name__}): start it "
                    "(`engram db up` for the local one) or fix ENGRAM_DATABASE_URL"
                )
            await asyncio.sleep(1)
    try:
        if not await migrate.migrated(conn):
            return (
                f"the database at {where} has no Engram schema yet: run `engram migrate` first "
                "(as the database's owner: ENGRAM_ADMIN_DATABASE_URL)"
            )
    finally:
        await conn.close()
    return None


async def serving_problem(db: Database, migrations_dir: Path) -> str | None:
    """Why this replica should not be sent requests now, or None; never raises."""
    try:
        return await readiness(db, migrations_dir)
    except migrate.SchemaAhead:
        return None  # a newer version migrated the database during a rolling upgrade: keep serving
    except migrate.MigrationError as exc:
        return str(exc)
    except Exception as exc:  # never a 500: whatever went wrong, this replica is not ready
        logger.warning("readiness check failed: %s", type(exc).__name__)
        return f"readiness check failed: {type(exc).__name__}"


def _state(answer: list[str] | Exception) -> str:
    """A cell's state from what its migrations check answered."""
    if isinstance(answer, Unavailable):
        return f"unreachable: {answer.reason}"
    if isinstance(answer, migrate.SchemaAhead):
        return "ready"
    if isinstance(answer, asyncpg.PostgresError | migrate.MigrationError):
        return f"not ready: {type(answer).__name__}"
    if isinstance(answer, Exception):
        raise answer
    return f"migrations pending: {', '.join(answer)}" if answer else "ready"


async def cell_states(db: Database, migrations_dir: Path) -> dict[str, str]:
    """Each cell but `main`: `ready`, or why its tenants cannot be served now (`unconfigured`: in the
    directory, but this replica has no URL for it). Reported by /readyz, never fatal to it: the
    other cells' tenants are still served. Never raises."""
    try:
        with deadline(READY_BUDGET):
            async with db.connection() as lease:
                listed = await cells.names(lease.conn)
    except Exception:  # the control database's own state is the readiness check's to report
        listed = []

    async def pending(name: str, cell: Cell) -> list[str]:
        with deadline(READY_BUDGET):
            async with cell.pool.connection() as lease:
                return await migrate.pending(lease.conn, migrations_dir)

    configured = {name: cell for name, cell in db.cells.items() if name != MAIN_CELL}
    answers = await each_cell(configured, pending, on_error="report", together=True)
    states = {name: _state(answer) for name, answer in answers.items()}
    return {name: states.get(name, "unconfigured") for name in sorted({*listed, *configured}) if name != MAIN_CELL}


def routes(db: Database, indexer: Indexer, migrations_dir: Path) -> list[Route]:
    """/healthz answers while the process serves; /readyz while the app accepts requests (the
    lifespan's `app.state.accepting`), the database answers and its schema is current."""

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> JSONResponse:
        if not request.app.state.accepting:
            return JSONResponse({"status": "shutting down"}, status_code=503)
        if problem := await serving_problem(db, migrations_dir):
            return JSONResponse({"status": "not ready", "reason": problem}, status_code=503)
        body: dict[str, object] = {"status": "ready", "embeddings": indexer.state()}  # reported, not fatal
        if states := await cell_states(db, migrations_dir):
            body["cells"] = states
        return JSONResponse(body)

    return [Route("/healthz", healthz), Route("/readyz", readyz)]
