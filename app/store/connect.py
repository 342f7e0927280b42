"""Connections outside and inside the pools: the codecs every connection gets (jsonb as orjson,
pgvector's binary `vector`), and the owner's connection for administration (migrations, moves,
backups, the operator's commands) — one way to open it, with its timeout."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TypeAlias

import asyncpg
import orjson

# An owner's connection (the database owner's role, outside the pools), as the store's
# administration functions take it; services hold it without touching the driver.
OwnerConnection: TypeAlias = asyncpg.Connection

OWNER_CONNECT_SECONDS = 10.0


@asynccontextmanager
async def owner(url: str, connect_seconds: float = OWNER_CONNECT_SECONDS) -> AsyncIterator[OwnerConnection]:
    """One connection outside the pools (an owner's, for administration), closed after the block;
    connecting gives up after `connect_seconds`."""
    conn = await asyncpg.connect(url, timeout=connect_seconds)
    try:
        await init_connection(conn)
        yield conn
    finally:
        await conn.close()


async def init_connection(conn: asyncpg.Connection) -> None:
    # asyncpg turns JIT off around its type lookups with set_config(), which a tenant role may not
    # run (docs/auth.md, "Switching tenants"); the pool runs with jit = off (below), so there is
    # nothing for it to turn off. ServerCapabilities is asyncpg's public named tuple.
    conn._server_caps = conn._server_caps._replace(jit=False)
    await conn.set_type_codec(
        "jsonb",
        schema="pg_catalog",
        format="text",
        encoder=lambda v: orjson.dumps(v).decode(),
        decoder=orjson.loads,
    )
    await _vector_codec(conn)


# Backends whose connection opened before the `vector` type existed (a database not migrated yet):
# each gets the codec when next handed out, once the type is there.
_WITHOUT_VECTORS: set[int] = set()


async def _vector_codec(conn: asyncpg.Connection) -> None:
    """pgvector's binary form for `vector` parameters and results (a list of floats or a
    pgvector.Vector in, a pgvector.Vector out): 20x less client CPU than text literals for a
    batch of vectors (docs/benchmarks.md, "Vectors on the wire")."""
    from pgvector import Vector

    try:
        await conn.set_type_codec(
            "vector",
            schema="public",  # where migration 0001 creates the extension
            format="binary",
            encoder=lambda v: (v if isinstance(v, Vector) else Vector(v)).to_binary(),
            decoder=Vector.from_binary,
        )
    except ValueError:  # unknown type: the extension is not created yet
        _WITHOUT_VECTORS.add(conn.get_server_pid())
    else:
        _WITHOUT_VECTORS.discard(conn.get_server_pid())


async def on_acquire(conn: asyncpg.Connection) -> None:
    if _WITHOUT_VECTORS and conn.get_server_pid() in _WITHOUT_VECTORS:
        await _vector_codec(conn)
