"""What a backup reads and a restore writes, on an owner connection: the tables of the `engram`
schema and of each tenant's schema, row by row (COPY in PostgreSQL's text form), their sequences,
and an order-free digest of each table to check a restore against.

Why not pg_dump: Apache AGE keeps each graph's catalog rows (`ag_catalog.ag_graph`, `ag_label`)
keyed by the oids of its schema and tables, which a restore into another database changes, and a
plain dump/restore leaves graphs that AGE no longer finds. Here the graph and its tables are made
by the same tenant steps as any new tenant (so the label ids inside every stored graph id are the
same), and only rows are copied into them. The order of the steps is the service's
(app/services/backup.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import asyncpg

from app.errors import EngramError
from app.store.database import timed

CONTROL = "engram"
# The `engram` tables a tenant's backup takes its own rows of (by tenant id), besides its schema
# (which holds its limits, usage, audit and pending work since the tenant steps moved them there).
# Accounts, memberships and grants are the cell's people, not the tenant's memory; rate buckets,
# subscriptions and moves are the running service's state.
TENANT_ROWS = ("tenants", "api_keys")
# The columns that name a tenant, in any table a restore loads (the control schema's or a tenant's):
# their type, and the field of the tenant they must equal.
TENANT_COLUMNS = {"tenant_id": "uuid", "tenant_key": "text"}
TENANT_FIELDS = {"tenant_id": "id", "tenant_key": "key"}
TEMP = "pg_temp"  # the session's own schema of temporary tables
# One fixed text form on either side, for the digests.
_FIXED = "SET LOCAL TimeZone = 'UTC'; SET LOCAL DateStyle = 'ISO'; SET LOCAL extra_float_digits = 3"


@dataclass(frozen=True, slots=True)
class Table:
    """One table (or one tenant's rows of a control table: `tenant_id` set) to copy."""

    schema: str
    name: str
    columns: tuple[str, ...]
    tenant_id: str | None = None

    @property
    def qualified(self) -> str:
        return f"{quote(self.schema)}.{quote(self.name)}"

    @property
    def column_list(self) -> str:
        return ", ".join(quote(c) for c in self.columns)

    @property
    def where(self) -> str:
        column = "id" if self.name == "tenants" else "tenant_id"  # the tenants row itself, or a row of it
        return f" WHERE r.{column} = $1::uuid" if self.tenant_id else ""

    @property
    def args(self) -> tuple[str, ...]:
        return (self.tenant_id,) if self.tenant_id else ()


@dataclass(frozen=True, slots=True)
class TenantRow:
    id: str
    key: str
    schema: str


@dataclass(frozen=True, slots=True)
class Sequence:
    schema: str
    name: str
    value: int | None  # None: never used


@dataclass(frozen=True, slots=True)
class Model:
    """An embedding model's row: search_docs refer to it by id."""

    id: int
    name: str
    dimensions: int


# --- what there is -------------------------------------------------------------------------------


@timed
async def start_snapshot(conn: asyncpg.Connection) -> None:
    """Everything read from here on, one consistent view (the caller ends the transaction)."""
    await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    await conn.execute(_FIXED)


@timed
async def migrations(conn: asyncpg.Connection) -> list[tuple[str, str]]:
    """The applied migrations: (version, checksum)."""
    rows = await conn.fetch("SELECT version, checksum FROM engram.schema_migrations ORDER BY version")
    return [(r[0], r[1]) for r in rows]


@timed
async def server(conn: asyncpg.Connection) -> dict[str, str]:
    """PostgreSQL's and the extensions' versions."""
    rows = await conn.fetch("SELECT extname::text, extversion FROM pg_extension WHERE extname IN ('age', 'vector')")
    found = {r[0]: r[1] for r in rows}
    found["postgresql"] = str(await conn.fetchval("SHOW server_version"))
    return found


@timed
async def tenants_here(conn: asyncpg.Connection, key: str | None = None) -> list[TenantRow]:
    """The tenants whose graph lives in this database (all of them, or the one with `key`)."""
    rows = await conn.fetch(
        "SELECT t.id::text, t.key, t.schema_name FROM engram.tenants t"
        " JOIN ag_catalog.ag_graph g ON g.name = t.schema_name::name"
        " WHERE $1::text IS NULL OR t.key = $1 ORDER BY t.key",
        key,
    )
    return [TenantRow(*r) for r in rows]


@timed
async def behind(conn: asyncpg.Connection, tenants: list[TenantRow]) -> list[str]:
    """Those of `tenants` still waiting for tenant steps (`engram migrate` brings them up to date)."""
    rows = await conn.fetch(
        "SELECT t.key FROM engram.tenants t WHERE t.id = ANY($1::uuid[])"
        " AND coalesce(t.steps_version, '') < (SELECT coalesce(max(version), '') FROM engram.tenant_steps)",
        [t.id for t in tenants],
    )
    return [r[0] for r in rows]


@timed
async def tables(conn: asyncpg.Connection, schema: str, tenant_id: str | None = None) -> list[Table]:
    """The schema's tables with their stored (not generated) columns; with `tenant_id`, the
    control tables a tenant's backup takes rows of."""
    rows = await conn.fetch(
        "SELECT c.relname::text, array_agg(a.attname::text ORDER BY a.attnum)"
        " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''"
        " WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND ($2::text[] IS NULL OR c.relname = ANY($2))"
        " GROUP BY c.relname ORDER BY c.relname",
        schema,
        list(TENANT_ROWS) if tenant_id else None,
    )
    return [Table(schema, r[0], tuple(r[1]), tenant_id) for r in rows]


def quote(name: str) -> str:
    """A name read from the catalog as an SQL identifier (AGE's `Entity` and `REL` need quotes)."""
    return '"' + name.replace('"', '""') + '"'


@timed
async def sequences(conn: asyncpg.Connection, schema: str) -> list[Sequence]:
    rows = await conn.fetch(
        "SELECT sequencename::text, last_value FROM pg_sequences WHERE schemaname = $1 ORDER BY 1", schema
    )
    return [Sequence(schema, r[0], r[1]) for r in rows]


@timed
async def labels(conn: asyncpg.Connection, schema: str) -> list[tuple[str, int, str]]:
    """The graph's labels: (name, id, kind); the id is inside every stored graph id of the label."""
    rows = await conn.fetch(
        "SELECT l.name::text, l.id, l.kind::text FROM ag_catalog.ag_label l"
        " JOIN ag_catalog.ag_graph g ON g.graphid = l.graph WHERE g.name = $1::name ORDER BY l.id",
        schema,
    )
    return [(r[0], r[1], r[2]) for r in rows]


@timed
async def models(conn: asyncpg.Connection) -> list[Model]:
    rows = await conn.fetch("SELECT id, name, dimensions FROM engram.embedding_models ORDER BY id")
    return [Model(*r) for r in rows]


@timed
async def digest(conn: asyncpg.Connection, table: Table) -> tuple[int, str]:
    """The rows' count and an order-free digest of their text (in the fixed form set above)."""
    row = await conn.fetchrow(
        f"SELECT count(*), coalesce(sum(hashtextextended(r::text, 0)), 0)::text FROM ONLY {table.qualified} r"
        + table.where,
        *table.args,
    )
    assert row is not None
    return row[0], row[1]


@timed
async def copy_out(conn: asyncpg.Connection, table: Table, sink: Callable[[bytes], Coroutine[Any, Any, None]]) -> None:
    """The table's rows (a tenant's only, for a control table) to `sink`, in COPY's text form."""
    query = f"SELECT {table.column_list} FROM ONLY {table.qualified} r{table.where}"
    await conn.copy_from_query(query, *table.args, output=sink, format="text")


# --- restoring -----------------------------------------------------------------------------------


@timed
async def begin_restore(conn: asyncpg.Connection) -> None:
    await conn.execute("BEGIN")
    await conn.execute(_FIXED)


@timed
async def tenant_taken(conn: asyncpg.Connection, tenant: TenantRow) -> bool:
    return bool(
        await conn.fetchval(
            "SELECT count(*) FROM engram.tenants WHERE id = $1::uuid OR key = $2 OR schema_name = $3",
            tenant.id,
            tenant.key,
            tenant.schema,
        )
    )


@timed
async def any_tenant(conn: asyncpg.Connection) -> bool:
    return bool(await conn.fetchval("SELECT count(*) FROM engram.tenants"))


@timed
async def make_tenant(conn: asyncpg.Connection, tenant: TenantRow) -> None:
    """The tenant's row, role, graph and tables, as every tenant's are made (the same label ids)."""
    await conn.execute(
        "INSERT INTO engram.tenants (id, key, schema_name) VALUES ($1::uuid, $2, $3)",
        tenant.id,
        tenant.key,
        tenant.schema,
    )
    await conn.execute("SELECT engram.create_tenant_objects($1)", tenant.schema)


@timed
async def ensure_model(conn: asyncpg.Connection, model: Model) -> None:
    """The embedding model under the same id here (search_docs refer to it), or `conflict`."""
    row = await conn.fetchrow(
        "SELECT id, name, dimensions FROM engram.embedding_models WHERE id = $1 OR name = $2", model.id, model.name
    )
    if row is None:
        await conn.execute(
            "INSERT INTO engram.embedding_models (id, name, dimensions) OVERRIDING SYSTEM VALUE VALUES ($1, $2, $3)",
            model.id,
            model.name,
            model.dimensions,
        )
        await conn.execute(
            "SELECT setval('engram.embedding_models_id_seq', greatest(max(id), 1)) FROM engram.embedding_models"
        )
    elif (row[0], row[1], row[2]) != (model.id, model.name, model.dimensions):
        raise EngramError(
            "conflict",
            f"this database numbers embedding model {model.name!r} differently: restore the whole cell, "
            "or restore into a database that has not embedded with another model yet",
        )


@timed
async def models_named(conn: asyncpg.Connection, schema: str) -> list[tuple[int, int]]:
    """The embedding models (id, dimensions) the vectors of a tenant's search documents carry."""
    rows = await conn.fetch(
        f"SELECT model_id, vector_dims(embedding) FROM {quote(schema)}.search_docs"
        " WHERE model_id IS NOT NULL GROUP BY 1, 2 ORDER BY 1, 2"
    )
    return [(r[0], r[1]) for r in rows]


@timed
async def load_rows(conn: asyncpg.Connection, loading: list[Table], empty: list[Table]) -> None:
    """Make room for the copy: with triggers and foreign-key checks off for this transaction (the
    rows arrive as a consistent whole, not in dependency order), the tables of `empty` emptied and
    a tenant's own rows of the control tables of `loading` deleted."""
    try:
        await conn.execute("SET LOCAL session_replication_role = replica")
    except asyncpg.InsufficientPrivilegeError:
        raise EngramError(
            "forbidden",
            "a restore turns triggers off for its transaction, which needs a superuser, or "
            "`GRANT SET ON PARAMETER session_replication_role TO <owner>` (docs/operations.md)",
        ) from None
    if empty:
        await conn.execute("TRUNCATE " + ", ".join(t.qualified for t in empty))
    for table in loading:
        if table.tenant_id:
            await conn.execute(f"DELETE FROM {table.qualified} r{table.where}", *table.args)


@timed
async def copy_in(conn: asyncpg.Connection, table: Table, source: AsyncIterable[bytes]) -> None:
    await conn.copy_to_table(
        table.name, schema_name=table.schema, columns=list(table.columns), source=source, format="text"
    )


@timed
async def stage(conn: asyncpg.Connection, table: Table, number: int) -> Table:
    """A temporary table like the control table `table` (its columns, defaults and generated
    columns, so its rows' text is the same), dropped at commit: a tenant's rows land there first,
    to be checked and digested by themselves before they join the other tenants' rows."""
    name = f"engram_restore_{number}"
    await conn.execute(
        f"CREATE TEMP TABLE {quote(name)} (LIKE {table.qualified} INCLUDING DEFAULTS INCLUDING GENERATED)"
        " ON COMMIT DROP"
    )
    return Table(TEMP, name, table.columns)


@timed
async def adopt(conn: asyncpg.Connection, staged: Table, table: Table) -> None:
    """The staged rows into their control table, or `conflict` where one's key is taken here (an
    API key id another tenant holds)."""
    try:
        await conn.execute(
            f"INSERT INTO {table.qualified} ({table.column_list}) SELECT {staged.column_list} FROM {staged.qualified}"
        )
    except asyncpg.UniqueViolationError as exc:
        raise EngramError(
            "conflict", f"{table.schema}.{table.name}: a restored row's key is already taken here ({exc.detail})"
        ) from None


@timed
async def tenant_columns(conn: asyncpg.Connection, table: Table) -> list[str]:
    """The columns of `table`, as this database has it (not as the backup says), that name a tenant."""
    rows = await conn.fetch(
        "SELECT a.attname::text FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
        " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2"
        " AND a.attnum > 0 AND NOT a.attisdropped AND a.attname = ANY($3::text[]) ORDER BY a.attnum",
        table.schema,
        table.name,
        list(TENANT_COLUMNS),
    )
    return [r[0] for r in rows]


@timed
async def strangers(conn: asyncpg.Connection, rows: Table, column: str, tenants: list[TenantRow]) -> int:
    """How many of `rows` name, in `column`, a tenant other than `tenants` (NULL names none)."""
    kind, values = TENANT_COLUMNS[column], [getattr(t, TENANT_FIELDS[column]) for t in tenants]
    return int(
        await conn.fetchval(
            f"SELECT count(*) FROM ONLY {rows.qualified} r WHERE r.{quote(column)} <> ALL($1::{kind}[])", values
        )
    )


@timed
async def tenant_rows_match(conn: asyncpg.Connection, rows: Table, tenants: list[TenantRow]) -> bool:
    """Whether the `tenants` rows of `rows` are exactly `tenants`: each once, with its key and
    schema, and no other (a tenant's schema is what every request of it reads)."""
    found = await conn.fetch(f"SELECT r.id::text, r.key, r.schema_name FROM ONLY {rows.qualified} r")
    return sorted((r[0], r[1], r[2]) for r in found) == sorted((t.id, t.key, t.schema) for t in tenants)


@timed
async def set_sequences(conn: asyncpg.Connection, values: list[Sequence]) -> None:
    for seq in values:
        if seq.value is not None:
            name = f"{quote(seq.schema)}.{quote(seq.name)}"
            await conn.execute("SELECT setval($1::regclass, $2, true)", name, seq.value)


@timed
async def cells_missing(conn: asyncpg.Connection) -> list[str]:
    """Cells the restored tenants' rows name that this database has no row of."""
    rows = await conn.fetch(
        "SELECT DISTINCT t.cell FROM engram.tenants t LEFT JOIN engram.cells c ON c.name = t.cell WHERE c.name IS NULL"
    )
    return [r[0] for r in rows]


@timed
async def analyze(conn: asyncpg.Connection, tables: list[Table]) -> None:
    """Fresh planner statistics for the restored tables: search reads them (word frequencies, row
    counts), and a restore brings rows, not statistics."""
    for qualified in sorted({t.qualified for t in tables}):
        await conn.execute(f"ANALYZE {qualified}")


@timed
async def commit(conn: asyncpg.Connection) -> None:
    await conn.execute("COMMIT")


@timed
async def rollback(conn: asyncpg.Connection) -> None:
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")
