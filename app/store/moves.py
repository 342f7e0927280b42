"""Moving a tenant between cells by logical replication of its schema: the progress rows in the
control database and every statement run on the source and target cells (as their owners).

Each function does one step and may be run again: it first looks whether its work is done. The
order and the waiting are the orchestrator's (app/services/moves.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import asyncpg

from app.config import MAIN_CELL
from app.errors import EngramError
from app.store.database import Tenant, adopt, timed

# A table in the tenant's schema on both sides while the move runs: a row written on the source
# after its last write is seen on the target only once everything before it has been applied.
MARK = "engram_move_mark"

# A move's steps, in the order they run (app/services/moves.py says what each does and undoes).
Step = Literal[
    "prepare",
    "publish",
    "subscribe",
    "copy",
    "fence_writes",
    "catch_up",
    "compare",
    "sequences",
    "switch",
    "fence_reads",
    "unsubscribe",
]
# How a move ended: its source dropped (`finished`), or undone before it switched (`aborted`).
Ended = Literal["aborted", "finished"]
# What a progress row's `step` says: `planned` (no step done yet), the last step done, `aborting`
# (an abort has begun: run it again to end it), or how it ended.
State = Literal["planned", "aborting"] | Step | Ended


@dataclass(frozen=True, slots=True)
class Move:
    """A move's progress row."""

    id: int
    tenant_id: str
    key: str
    schema: str
    source: str
    target: str
    step: State
    started_at: datetime
    updated_at: datetime
    switched_at: datetime | None
    finished_at: datetime | None
    error: str | None


_MOVE = (
    "SELECT m.id, m.tenant_id::text, t.key, t.schema_name, m.source, m.target, m.step, m.started_at,"
    " m.updated_at, m.switched_at, m.finished_at, m.error"
    " FROM engram.tenant_moves m JOIN engram.tenants t ON t.id = m.tenant_id"
)


def names(tenant: Tenant) -> str:
    """The publication's, subscription's and slot's name for this tenant's move."""
    return f"engram_move_{tenant.schema}"


# --- progress rows, in the control database ---------------------------------------------------


@timed
async def running(conn: asyncpg.Connection, tenant_id: str) -> Move | None:
    """The tenant's unfinished move, if any."""
    row = await conn.fetchrow(f"{_MOVE} WHERE m.tenant_id = $1::uuid AND m.finished_at IS NULL", tenant_id)
    return Move(*row) if row else None


@timed
async def get(conn: asyncpg.Connection, move_id: int) -> Move:
    row = await conn.fetchrow(f"{_MOVE} WHERE m.id = $1", move_id)
    assert row is not None
    return Move(*row)


@timed
async def claim(conn: asyncpg.Connection, tenant_id: str) -> None:
    """This session runs the tenant's move (until it ends); `conflict` if another runs it now."""
    if not await conn.fetchval("SELECT pg_try_advisory_lock(hashtext('engram.move'), hashtext($1))", tenant_id):
        raise EngramError("conflict", "a move of this tenant is running now (another `engram tenant move`)")


@timed
async def start(conn: asyncpg.Connection, tenant_id: str, source: str, target: str) -> Move:
    """A new progress row, `planned`; `conflict` when the tenant has an unfinished move."""
    planned: State = "planned"
    try:
        await conn.execute(
            "INSERT INTO engram.tenant_moves (tenant_id, source, target, step) VALUES ($1::uuid, $2, $3, $4)",
            tenant_id,
            source,
            target,
            planned,
        )
    except asyncpg.UniqueViolationError:
        raise EngramError("conflict", "this tenant is being moved already") from None
    found = await running(conn, tenant_id)
    assert found is not None
    return found


@timed
async def record(conn: asyncpg.Connection, move_id: int, step: State, error: str | None = None) -> None:
    """The step a move has reached (or, with `error`, the last one done before a step failed)."""
    await conn.execute(
        "UPDATE engram.tenant_moves SET step = $2, error = $3, updated_at = now() WHERE id = $1",
        move_id,
        step,
        error[:2000] if error else None,
    )


@timed
async def finish(conn: asyncpg.Connection, move_id: int, step: Ended) -> None:
    """The move ended: `finished` (its source dropped) or `aborted` (its target's copy dropped)."""
    await conn.execute(
        "UPDATE engram.tenant_moves SET step = $2, error = NULL, updated_at = now(), finished_at = now() WHERE id = $1",
        move_id,
        step,
    )


@timed
async def listing(conn: asyncpg.Connection, limit: int = 100) -> list[Move]:
    """The latest moves, unfinished first."""
    rows = await conn.fetch(f"{_MOVE} ORDER BY m.finished_at IS NULL DESC, m.updated_at DESC LIMIT $1", limit)
    return [Move(*r) for r in rows]


@timed
async def due(conn: asyncpg.Connection, grace_seconds: float) -> list[Move]:
    """Switched moves whose grace period has passed: their source is left to drop."""
    rows = await conn.fetch(
        f"{_MOVE} WHERE m.finished_at IS NULL AND m.switched_at < now() - make_interval(secs => $1)", grace_seconds
    )
    return [Move(*r) for r in rows]


@timed
async def switch(conn: asyncpg.Connection, move_id: int, tenant_id: str, source: str, target: str) -> None:
    """The directory points at the target: servers resolving the tenant from now on go there."""
    async with conn.transaction():
        await conn.execute(
            "UPDATE engram.tenants SET cell = $2 WHERE id = $1::uuid AND cell IN ($2, $3)", tenant_id, target, source
        )
        await conn.execute(
            "UPDATE engram.tenant_moves SET switched_at = coalesce(switched_at, now()) WHERE id = $1", move_id
        )


# --- on the cells (owner connections) ----------------------------------------------------------


@timed
async def prepare_target(conn: asyncpg.Connection, tenant: Tenant, cell: str) -> None:
    """The tenant's row, role and empty schema on the target, made by the same tenant steps (the
    same AGE label ids), and the mark table. The caller has made sure no copy of the tenant is
    served there (a move to a cell starts only once an earlier move from it has been finished)."""
    if cell == MAIN_CELL:  # the directory row is there already: make the objects unless they exist
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('engram.tenant'), hashtext($1))", tenant.key)
            if not await conn.fetchval("SELECT count(*) FROM ag_catalog.ag_graph WHERE name = $1::name", tenant.schema):
                await conn.execute("UPDATE engram.tenants SET steps_version = '' WHERE id = $1::uuid", tenant.id)
                await conn.execute("SELECT engram.create_tenant_objects($1)", tenant.schema)
    else:
        await adopt(conn, tenant)
    await conn.execute(f"CREATE TABLE IF NOT EXISTS {tenant.schema}.{MARK} (at pg_lsn PRIMARY KEY)")
    if await conn.fetchval("SELECT count(*) FROM pg_subscription WHERE subname = $1", names(tenant)):
        return  # copying already: rows here are the copy's
    # Not subscribed yet: whatever is here was seeded by the steps (a totals row), and the copy
    # brings the source's own.
    await conn.execute(f"TRUNCATE {', '.join(f'{tenant.schema}.{t}' for t in await _tables(conn, tenant))}")


@timed
async def publish(conn: asyncpg.Connection, tenant: Tenant) -> None:
    """On the source: the mark table and a publication of every table of the tenant's schema."""
    await conn.execute(f"CREATE TABLE IF NOT EXISTS {tenant.schema}.{MARK} (at pg_lsn PRIMARY KEY)")
    if not await conn.fetchval("SELECT count(*) FROM pg_publication WHERE pubname = $1", names(tenant)):
        await conn.execute(f"CREATE PUBLICATION {names(tenant)} FOR TABLES IN SCHEMA {tenant.schema}")


def conninfo(url: str) -> str:
    """A libpq connection string for CREATE SUBSCRIPTION from a URL, quoted as a literal."""
    return "'" + url.replace("'", "''") + "'"


@timed
async def subscribe(conn: asyncpg.Connection, tenant: Tenant, source_url: str) -> None:
    """On the target: a subscription to the source's publication, copying what is there first."""
    if not await conn.fetchval("SELECT count(*) FROM pg_subscription WHERE subname = $1", names(tenant)):
        # CREATE SUBSCRIPTION takes no bind parameters: the URL is configuration, quoted as a literal.
        await conn.execute(
            f"CREATE SUBSCRIPTION {names(tenant)} CONNECTION {conninfo(source_url)}"
            f" PUBLICATION {names(tenant)} WITH (copy_data = true)"
        )


@timed
async def copied(conn: asyncpg.Connection, tenant: Tenant) -> bool:
    """On the target: every table of the subscription copied and streaming (state `ready`)."""
    row = await conn.fetchrow(
        "SELECT count(*) AS n, count(*) FILTER (WHERE r.srsubstate = 'r') AS ready"
        " FROM pg_subscription s JOIN pg_subscription_rel r ON r.srsubid = s.oid WHERE s.subname = $1",
        names(tenant),
    )
    return bool(row and row["n"] and row["n"] == row["ready"])


@timed
async def mark(conn: asyncpg.Connection, tenant: Tenant) -> str:
    """On the source: a mark row at the current WAL position, which it answers."""
    return str(
        await conn.fetchval(
            f"INSERT INTO {tenant.schema}.{MARK} VALUES (pg_current_wal_insert_lsn())"
            " ON CONFLICT DO NOTHING RETURNING at::text"
        )
        or await conn.fetchval("SELECT pg_current_wal_insert_lsn()::text")
    )


@timed
async def reached(conn: asyncpg.Connection, tenant: Tenant, position: str) -> bool:
    """On the target: the mark at `position` (or a later one) applied, and so everything before it."""
    return bool(
        await conn.fetchval(f"SELECT count(*) FROM {tenant.schema}.{MARK} WHERE at >= $1::text::pg_lsn", position)
    )


@timed
async def fence(conn: asyncpg.Connection, tenant: Tenant, what: str, lock_seconds: float) -> None:
    """On the source: the tenant's role loses its writes (`writes`) or everything (`all`), and
    (`writes`) a lock on every table waits out the writers already inside; the cell's tenant row says
    so, for the refused calls to report `tenant_moving`."""
    s = tenant.schema
    async with conn.transaction():
        await conn.execute(f"SET LOCAL lock_timeout = {int(lock_seconds * 1000)}")
        await conn.execute("UPDATE engram.tenants SET fenced = $2 WHERE id = $1::uuid", tenant.id, what)
        await conn.execute(f"REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON ALL TABLES IN SCHEMA {s} FROM {s}")
        if what == "all":
            await conn.execute(f"REVOKE SELECT ON ALL TABLES IN SCHEMA {s} FROM {s}")
            await conn.execute(f"REVOKE USAGE ON SCHEMA {s} FROM {s}")
    if what == "writes":
        tables = await _tables(conn, tenant)
        async with conn.transaction():  # granted only once every transaction writing there has ended
            await conn.execute(f"SET LOCAL lock_timeout = {int(lock_seconds * 1000)}")
            await conn.execute(f"LOCK TABLE {', '.join(f'{s}.{t}' for t in tables)} IN SHARE MODE")


@timed
async def unfence(conn: asyncpg.Connection, tenant: Tenant) -> None:
    """On the target after the switch: the tenant served there (its grants as the steps left them)."""
    await conn.execute("UPDATE engram.tenants SET fenced = NULL WHERE id = $1::uuid", tenant.id)


async def _tables(conn: asyncpg.Connection, tenant: Tenant) -> list[str]:
    rows = await conn.fetch(
        "SELECT quote_ident(c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND c.relname <> $2 ORDER BY c.relname",
        tenant.schema,
        MARK,
    )
    return [r[0] for r in rows]


async def _digest_of(conn: asyncpg.Connection, schema: str, table: str) -> tuple[int, str]:
    """A table's row count and an order-free digest of its rows' text."""
    row = await conn.fetchrow(
        f"SELECT count(*), coalesce(sum(hashtextextended(r::text, 0)), 0)::text FROM ONLY {schema}.{table} r"
    )
    assert row is not None
    return row[0], row[1]


@timed
async def digest(conn: asyncpg.Connection, tenant: Tenant) -> dict[str, tuple[int, str]]:
    """Every table's row count and rows' digest (vertices, edges, observations among them), as
    text in one fixed form on either side."""
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        await conn.execute("SET LOCAL TimeZone = 'UTC'; SET LOCAL DateStyle = 'ISO'; SET LOCAL extra_float_digits = 3")
        return {t: await _digest_of(conn, tenant.schema, t) for t in await _tables(conn, tenant)}


@timed
async def sequences(conn: asyncpg.Connection, tenant: Tenant) -> list[tuple[str, int | None]]:
    """On the source: every sequence of the schema and its last value (None: never used)."""
    rows = await conn.fetch(
        "SELECT quote_ident(sequencename), last_value FROM pg_sequences WHERE schemaname = $1", tenant.schema
    )
    return [(r[0], r[1]) for r in rows]


@timed
async def set_sequences(conn: asyncpg.Connection, tenant: Tenant, values: list[tuple[str, int | None]]) -> None:
    """On the target: each sequence where the source's was (sequences are not replicated)."""
    async with conn.transaction():
        for name, value in values:
            if value is not None:
                await conn.execute("SELECT setval($1::regclass, $2, true)", f"{tenant.schema}.{name}", value)


@timed
async def unsubscribe(conn: asyncpg.Connection, tenant: Tenant) -> None:
    """On the target: the subscription (and with it the source's slot) dropped, the mark table too."""
    if await conn.fetchval("SELECT count(*) FROM pg_subscription WHERE subname = $1", names(tenant)):
        await conn.execute(f"DROP SUBSCRIPTION {names(tenant)}")
    await conn.execute(f"DROP TABLE IF EXISTS {tenant.schema}.{MARK}")


@timed
async def unpublish(conn: asyncpg.Connection, tenant: Tenant) -> None:
    """On the source: the publication dropped, and the slot if the target could not drop it."""
    await conn.execute(f"DROP PUBLICATION IF EXISTS {names(tenant)}")
    await conn.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active",
        names(tenant),
    )


@timed
async def drop_mark(conn: asyncpg.Connection, tenant: Tenant) -> None:
    """On the source of an abandoned move (never switched): the mark table `publish` made dropped."""
    await conn.execute(f"DROP TABLE IF EXISTS {tenant.schema}.{MARK}")


@timed
async def reopen(conn: asyncpg.Connection, tenant: Tenant) -> None:
    """On the source of an abandoned move (never switched): the tenant role's privileges as the
    tenant steps grant them, the fence lifted."""
    async with conn.transaction():
        await conn.execute("SELECT engram.grant_tenant_tables($1)", tenant.schema)
        await conn.execute("UPDATE engram.tenants SET fenced = NULL WHERE id = $1::uuid", tenant.id)


@timed
async def drop_source(conn: asyncpg.Connection, tenant: Tenant, cell: str) -> None:
    """On a cell the tenant no longer lives on (the source after the grace period, or the target
    of an abandoned move): the tenant's graph, tables and role; its cell row too (on `main` that
    row is the directory's, kept)."""
    async with conn.transaction():
        if await conn.fetchval("SELECT count(*) FROM ag_catalog.ag_graph WHERE name = $1::name", tenant.schema):
            await conn.execute("SELECT ag_catalog.drop_graph($1, true)", tenant.schema)
        if cell == MAIN_CELL:
            await conn.execute(
                "UPDATE engram.tenants SET steps_version = '', fenced = NULL WHERE id = $1::uuid", tenant.id
            )
        else:
            await conn.execute("DELETE FROM engram.tenants WHERE id = $1::uuid", tenant.id)
        await conn.execute(f"DROP ROLE IF EXISTS {tenant.schema}")
