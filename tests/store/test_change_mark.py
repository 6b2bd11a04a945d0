"""The change mark: once every record is indexed, the index manager reads only the records
changed after it. It moves with every committed record write and is withheld while a write of
this database may still commit below it."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from recalld.store.embedded import EmbeddedPostgres
from recalld.store.records import RecordFields, RecordRepository
from recalld.store.vectors import PgVectorStore
from tests.support import database_dsn

pytestmark = pytest.mark.anyio


def fields(title: str) -> RecordFields:
    return RecordFields("marks", "doc", title, f"{title}, told at length.", {}, None)


async def test_every_committed_write_moves_the_mark(pool: asyncpg.Pool) -> None:
    store, records = PgVectorStore(pool), RecordRepository(pool)
    empty = await store.change_mark()
    record_id, _ = await records.create(fields("First"))
    created = await store.change_mark()
    await records.update(record_id, fields("First, again"))
    updated = await store.change_mark()
    await records.forget(record_id)
    forgotten = await store.change_mark()
    assert empty is not None and created is not None and updated is not None and forgotten is not None
    assert empty < created < updated < forgotten


async def test_no_mark_while_another_transaction_may_commit(pool: asyncpg.Pool) -> None:
    store, records = PgVectorStore(pool), RecordRepository(pool)
    await records.create(fields("Settled"))
    assert await store.change_mark() is not None
    async with pool.acquire() as other, other.transaction():
        # A writer between taking its change_seq and committing: it holds a transaction id.
        await other.execute("SELECT nextval('record_change_seq'), pg_current_xact_id()")
        assert await store.change_mark() is None
    assert await store.change_mark() is not None


async def test_another_databases_transactions_do_not_withhold_it(
    pool: asyncpg.Pool, postgres: EmbeddedPostgres
) -> None:
    # a server shared with other applications: their open transactions say nothing about ours
    name = "t_" + uuid.uuid4().hex[:12]
    async with pool.acquire() as conn:
        await conn.execute(f"CREATE DATABASE {name}")
    other = await asyncpg.connect(database_dsn(postgres, name))
    try:
        async with other.transaction():
            await other.execute("SELECT pg_current_xact_id()")
            assert await PgVectorStore(pool).change_mark() is not None
    finally:
        await other.close()
