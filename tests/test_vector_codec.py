"""Vectors travel to PostgreSQL in pgvector's binary form: every pooled connection has the codec,
and one opened before the database was migrated (the `vector` type did not exist yet) gets it when
next handed out, once it does."""

from __future__ import annotations

import uuid

import asyncpg
from pgvector import Vector

from app.config import Settings
from app.store import migrate
from tests.support.server import open_database


async def test_vectors_round_trip_in_binary_form_even_on_a_database_migrated_later(db_settings: Settings) -> None:
    name = f"codec_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(db_settings.admin_dsn())
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    owner = db_settings.admin_dsn().rsplit("/", 1)[0] + "/" + name
    try:
        # no `vector` type yet: the connection opens without the codec
        async with open_database(owner, min_size=1, max_size=1, create_tenants=False) as db:
            await migrate.migrate(owner, db_settings.migrations_dir)
            async with db.connection() as lease:  # the same connection, handed out again
                vector = [0.25, -1.5, 3.0]
                back = await lease.conn.fetchval("SELECT $1::vector(3)", vector)
                assert isinstance(back, Vector) and back.to_list() == vector
                stored = await lease.conn.fetchval(
                    "SELECT array_length(u.e::real[], 1) FROM unnest($1::vector[]) AS u(e)", [Vector(vector)]
                )
                assert stored == 3
    finally:
        admin = await asyncpg.connect(db_settings.admin_dsn())
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        await admin.close()
