"""Held records: a record revision the provider will not embed is set aside, so the catch-up
neither returns nor counts it until its hold ends; the wait doubles per attempt on the same
revision, a new revision is tried at once, storing the record's vectors ends the hold, and the
sweeper deletes the holds of revisions no longer live."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import numpy as np
import pytest

from recalld.actors.gc.sweeper import Sweeper, SweepSettings
from recalld.actors.ports.embedding import VectorSpace
from recalld.actors.ports.index import Holds, RecordToIndex
from recalld.store.records import RecordFields, RecordRepository
from recalld.store.search import SearchLog
from recalld.store.vectors import PgVectorStore

pytestmark = pytest.mark.anyio

SPACE = VectorSpace(provider="openai", model="m", dimension=4, normalized=True, template_version=1)
CHUNKER = "test-chunker"


def fields(title: str) -> RecordFields:
    return RecordFields("holds", "doc", title, f"{title}, told at length.", {}, None)


async def to_index(store: PgVectorStore) -> list[tuple[str, int]]:
    return [(r.title, r.revision) for r in await store.records_to_index(SPACE.key, CHUNKER, 100)]


async def hold_window_s(pool: asyncpg.Pool, record_id: object) -> float:
    async with pool.acquire() as conn:
        seconds = await conn.fetchval(
            "SELECT extract(epoch FROM retry_at - held_at) FROM index_holds WHERE record_id = $1", record_id
        )
    return float(seconds)


async def test_a_held_revision_is_neither_returned_nor_counted_until_it_changes(pool: asyncpg.Pool) -> None:
    store, records = PgVectorStore(pool), RecordRepository(pool)
    await store.ensure_space(SPACE)
    poisoned, _ = await records.create(fields("Poisoned"))
    await records.create(fields("Fine"))
    assert sorted(await to_index(store)) == [("Fine", 1), ("Poisoned", 1)]

    await store.hold(SPACE.key, [(poisoned, 1, "input_rejected")], first_s=600, longest_s=86_400)
    assert await to_index(store) == [("Fine", 1)]
    assert await store.count_to_index(SPACE.key, CHUNKER) == 1
    held = await store.held(SPACE.key)
    assert held.by_reason == {"input_rejected": 1}
    assert held.next_end_s is not None and 590 < held.next_end_s <= 600

    await records.update(poisoned, fields("Poisoned, mended"))  # a new revision is tried at once
    assert sorted(await to_index(store)) == [("Fine", 1), ("Poisoned, mended", 2)]
    assert await store.held(SPACE.key) == Holds(by_reason={}, next_end_s=None)


async def test_the_wait_doubles_per_attempt_on_a_revision_up_to_the_longest(pool: asyncpg.Pool) -> None:
    store, records = PgVectorStore(pool), RecordRepository(pool)
    await store.ensure_space(SPACE)
    record_id, _ = await records.create(fields("Stubborn"))
    windows = []
    for _ in range(4):
        await store.hold(SPACE.key, [(record_id, 1, "embedding_not_finite")], first_s=600, longest_s=3000)
        windows.append(round(await hold_window_s(pool, record_id)))
    assert windows == [600, 1200, 2400, 3000]
    await records.update(record_id, fields("Stubborn, rewritten"))
    await store.hold(SPACE.key, [(record_id, 2, "embedding_not_finite")], first_s=600, longest_s=3000)
    assert round(await hold_window_s(pool, record_id)) == 600, "a new revision starts over"


async def test_an_expired_hold_returns_the_record_and_storing_it_ends_the_hold(pool: asyncpg.Pool) -> None:
    store, records = PgVectorStore(pool), RecordRepository(pool)
    await store.ensure_space(SPACE)
    record_id, _ = await records.create(fields("Retried"))
    await store.hold(SPACE.key, [(record_id, 1, "input_rejected")], first_s=600, longest_s=86_400)
    async with pool.acquire() as conn:
        await conn.execute("UPDATE index_holds SET retry_at = now() - interval '1 second'")
    assert await to_index(store) == [("Retried", 1)], "the hold ended: tried again"
    assert await store.held(SPACE.key) == Holds(by_reason={}, next_end_s=None)

    [record] = await store.records_to_index(SPACE.key, CHUNKER, 10)
    vectors = np.eye(4, dtype=np.float32)[:1]
    await store.store_batch(SPACE.key, CHUNKER, [(RecordToIndex(*record), ["Retried"], ["h"], vectors)])
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM index_holds") == 0
    assert await to_index(store) == []


async def test_the_sweeper_deletes_the_holds_of_revisions_no_longer_live(pool: asyncpg.Pool, tmp_path: Path) -> None:
    store, records = PgVectorStore(pool), RecordRepository(pool)
    await store.ensure_space(SPACE)
    kept, _ = await records.create(fields("Still refused"))
    forgotten, _ = await records.create(fields("Forgotten"))
    rewritten, _ = await records.create(fields("Rewritten"))
    await store.hold(
        SPACE.key,
        [(kept, 1, "input_rejected"), (forgotten, 1, "input_rejected"), (rewritten, 1, "input_rejected")],
        first_s=600,
        longest_s=86_400,
    )
    assert await records.forget(forgotten)
    await records.update(rewritten, fields("Rewritten, shorter"))
    sweeper = Sweeper(store, SearchLog(pool), tmp_path, leased=set, settings=SweepSettings())

    report = await sweeper.sweep_once()

    assert report.holds == 2
    async with pool.acquire() as conn:
        assert [r["record_id"] for r in await conn.fetch("SELECT record_id FROM index_holds")] == [kept]
    assert (await store.held(SPACE.key)).by_reason == {"input_rejected": 1}
    assert (await sweeper.sweep_once()).holds == 0
