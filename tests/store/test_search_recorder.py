"""Search telemetry written in batches: every row handed over reaches PostgreSQL, `flush` waits
for it, a dropped connection loses nothing, and a full buffer drops the oldest, counted."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import asyncpg
import pytest

from recalld.store.search import SearchRecorder

pytestmark = pytest.mark.anyio


def row(namespace: str = "ns") -> dict[str, Any]:
    return {
        "id": uuid.uuid4(),
        "namespace": namespace,
        "query_hash": "h",
        "routes": ["fts"],
        "fusion": {"name": "rrf", "version": 2},
        "results": [],
        "timings_ms": {"total": 1.0},
        "degraded_routes": [],
    }


async def stored(pool: asyncpg.Pool) -> set[uuid.UUID]:
    async with pool.acquire() as conn:
        return {r["id"] for r in await conn.fetch("SELECT id FROM searches")}


async def test_every_row_handed_over_is_written_and_flush_waits_for_it(pool: asyncpg.Pool) -> None:
    recorder = SearchRecorder(pool)
    early = [row() for _ in range(50)]
    for r in early:  # before the writer runs: they go out together
        recorder.add(r)
    async with anyio.create_task_group() as tg:
        await tg.start(recorder.run)
        await recorder.flush()
        assert await stored(pool) == {r["id"] for r in early}
        late = row()
        recorder.add(late)
        await recorder.flush()
        assert late["id"] in await stored(pool)
        tg.cancel_scope.cancel()
    assert (recorder.written, recorder.dropped) == (51, 0)


async def test_a_dropped_connection_loses_no_row(pool: asyncpg.Pool, fresh_dsn: str) -> None:
    recorder = SearchRecorder(pool, retry_s=0.05)
    async with anyio.create_task_group() as tg:
        await tg.start(recorder.run)
        recorder.add(row())
        await recorder.flush()
        admin = await asyncpg.connect(fresh_dsn)
        try:  # every connection of the pool dies, as in a server restart
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        finally:
            await admin.close()
        after = [row() for _ in range(5)]
        for r in after:
            recorder.add(r)
        with anyio.fail_after(30):
            await recorder.flush()
        assert {r["id"] for r in after} <= await stored(pool)
        tg.cancel_scope.cancel()
    assert recorder.written == 6 and recorder.dropped == 0


async def test_a_full_buffer_drops_the_oldest_and_counts_them(pool: asyncpg.Pool) -> None:
    recorder = SearchRecorder(pool, max_pending=10)
    rows = [row() for _ in range(15)]
    for r in rows:
        recorder.add(r)
    assert recorder.dropped == 5
    async with anyio.create_task_group() as tg:
        await tg.start(recorder.run)
        await recorder.flush()
        tg.cancel_scope.cancel()
    assert await stored(pool) == {r["id"] for r in rows[5:]}
    assert recorder.written == 10


async def test_rows_gather_for_the_linger_and_a_flush_cuts_it_short(pool: asyncpg.Pool) -> None:
    recorder = SearchRecorder(pool, linger_s=30)
    async with anyio.create_task_group() as tg:
        await tg.start(recorder.run)
        first = row()
        recorder.add(first)
        await anyio.sleep(0.2)
        assert first["id"] not in await stored(pool)  # still gathering
        second = row()
        recorder.add(second)
        with anyio.fail_after(5):  # far less than the linger
            await recorder.flush()
        assert {first["id"], second["id"]} <= await stored(pool)
        tg.cancel_scope.cancel()
    assert recorder.written == 2
