"""The sweeper and what is left of retired chunks: their surrogate rows, which a generation built
before the forget or update still needs as tombstones (activated again, its own file would
return them). A row goes once retired for the rollback window and held by no generation directory
on disk; a build in progress, or a generation whose id map cannot be read, keeps rows back."""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path

import asyncpg
import numpy as np
import pytest

from recalld.actors.gc.sweeper import Sweeper, SweepSettings
from recalld.actors.index.generation import IdMap, build_generation
from recalld.actors.index.manifest import ID_MAP_FILE
from recalld.actors.ports.embedding import VectorSpace
from recalld.actors.ports.index import RecordToIndex
from recalld.store.records import RecordFields, RecordRepository
from recalld.store.search import SearchLog
from recalld.store.vectors import PgVectorStore
from tests.support.generations import generation_row

pytestmark = pytest.mark.anyio

SPACE = VectorSpace(provider="openai", model="m", dimension=8, normalized=True, template_version=1)
CHUNKER = "test-chunker"
WINDOW_S = 3600.0


class Corpus:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.store = PgVectorStore(pool)
        self.records = RecordRepository(pool)
        self._basis = itertools.count()

    def fields(self, title: str, body: str) -> RecordFields:
        return RecordFields("sweep", "doc", title, body, {}, None)

    async def index(self) -> None:
        """Store one vector (a basis vector no other chunk has) for every record still to index."""
        for record in await self.store.records_to_index(SPACE.key, CHUNKER, 100):
            vector = np.zeros((1, SPACE.dimension), np.float32)
            vector[0, next(self._basis)] = 1.0
            await self.store.store_batch(SPACE.key, CHUNKER, [(RecordToIndex(*record), [record.body], ["h"], vector)])

    async def build(self, root: Path, generation_id: str) -> None:
        """A real generation of everything live now, recorded as verified."""
        rows, source, tombstone, _ = await self.store.build_snapshot(SPACE.key, CHUNKER, SPACE.dimension)
        id_map = IdMap.from_rows(rows.surrogates, rows.record_ids, rows.revisions, rows.namespaces)
        manifest = build_generation(
            root,
            generation_id=generation_id,
            space=SPACE,
            space_id=SPACE.key,
            vectors=rows.vectors,
            id_map=id_map,
            source_watermark=source,
            tombstone_watermark=tombstone,
        )
        await self.store.add_generation(generation_row(root, manifest))
        assert await self.store.move_pointer(generation_id, (await self.store.pointer()).version)

    async def chunk_rows(self, record_id: uuid.UUID) -> list[int]:
        async with self.pool.acquire() as conn:
            rows = await conn.fetch("SELECT revision FROM chunks WHERE record_id = $1 ORDER BY revision", record_id)
        return [r["revision"] for r in rows]

    async def age_retired(self) -> None:
        async with self.pool.acquire() as conn:
            await conn.execute("UPDATE chunks SET retired_at = now() - interval '2 hours' WHERE retired_at IS NOT NULL")


def sweeper(corpus: Corpus, root: Path) -> Sweeper:
    settings = SweepSettings(rollback_window_s=WINDOW_S)
    return Sweeper(corpus.store, SearchLog(corpus.pool), root, leased=set, settings=settings)


async def test_retired_chunk_rows_go_once_no_generation_on_disk_holds_them(pool: asyncpg.Pool, tmp_path: Path) -> None:
    corpus = Corpus(pool)
    await corpus.store.ensure_space(SPACE)
    forgotten, _ = await corpus.records.create(corpus.fields("Forgotten", "Words someone took back."))
    rewritten, _ = await corpus.records.create(corpus.fields("Rewritten", "The first draft."))
    await corpus.index()
    await corpus.build(tmp_path, "g1")  # holds both records' first revisions
    assert await corpus.records.forget(forgotten)
    assert await corpus.records.update(rewritten, corpus.fields("Rewritten", "The second draft.")) == (2, True)
    await corpus.index()
    # a revision stored and replaced after the build: in no generation's file
    passing, _ = await corpus.records.create(corpus.fields("Passing", "Here for a moment."))
    await corpus.index()
    assert await corpus.records.update(passing, corpus.fields("Passing", "Gone again.")) == (2, True)
    await corpus.index()

    assert (await sweeper(corpus, tmp_path).sweep_once()).chunks == 0, "inside the window every row stays"
    await corpus.age_retired()

    building = tmp_path / ".tmp-g2-0123"
    building.mkdir()
    assert (await sweeper(corpus, tmp_path).sweep_once()).chunks == 0, "a build in progress may hold them"
    building.rmdir()

    report = await sweeper(corpus, tmp_path).sweep_once()
    assert report.chunks == 1
    assert await corpus.chunk_rows(passing) == [2], "held by no generation: deleted"
    assert await corpus.chunk_rows(forgotten) == [1], "g1 holds it: kept as its tombstone"
    assert await corpus.chunk_rows(rewritten) == [1, 2]

    (tmp_path / "g1" / ID_MAP_FILE).write_bytes(b"not an id map")
    assert (await sweeper(corpus, tmp_path).sweep_once()).chunks == 0, "g1 unreadable: kept up to its watermark"

    await corpus.build(tmp_path, "g2")  # built after the forget and the update: holds neither
    assert (await sweeper(corpus, tmp_path).sweep_once()).chunks == 0, "g1 is still on disk"
    async with pool.acquire() as conn:
        await conn.execute("UPDATE generations SET deactivated_at = now() - interval '2 hours' WHERE id = 'g1'")
    report = await sweeper(corpus, tmp_path).sweep_once()
    assert report.generations == ["g1"] and not (tmp_path / "g1").exists()
    assert report.chunks == 2
    assert await corpus.chunk_rows(forgotten) == []
    assert await corpus.chunk_rows(rewritten) == [2], "live chunks are never deleted"
    assert (await sweeper(corpus, tmp_path).sweep_once()).chunks == 0
