"""The planner's statistics the catch-up refreshes as the indexed records grow cover the tables
recall plans over: with none on `records`, full text tests every record's words instead of asking
their index (daemon/store/vectors.py, `PLANNED_AS_THEY_GROW`)."""

from __future__ import annotations

import asyncpg
import pytest

from recalld.actors.ports.embedding import VectorSpace
from recalld.store.records import RecordFields, RecordRepository
from recalld.store.vectors import PgVectorStore

pytestmark = pytest.mark.anyio

SPACE = VectorSpace(provider="openai", model="m", dimension=4, normalized=True, template_version=1)


async def analysed(pool: asyncpg.Pool, table: str) -> bool:
    async with pool.acquire() as conn:
        return bool(
            await conn.fetchval("SELECT EXISTS (SELECT FROM pg_statistic WHERE starelid = $1::regclass)", table)
        )


async def test_refreshing_statistics_covers_the_records_and_the_indexed_records(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        for table in ("records", "indexed_records"):  # only the refresh may take them here
            await conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = off)")
    store, records = PgVectorStore(pool), RecordRepository(pool)
    await store.ensure_space(SPACE)
    for i in range(20):
        await records.create(RecordFields("stats", "doc", f"Record {i}", f"the body of record {i}", {}, None))
    async with pool.acquire() as conn:
        await conn.execute(
            "INSERT INTO indexed_records (space_id, record_id, revision, chunker) SELECT $1, id, revision, 'c' FROM records",
            SPACE.key,
        )
    assert not await analysed(pool, "records") and not await analysed(pool, "indexed_records")

    await store.refresh_statistics()

    assert await analysed(pool, "records"), "full text's plan needs them"
    assert await analysed(pool, "indexed_records"), "the catch-up's own query needs them"
