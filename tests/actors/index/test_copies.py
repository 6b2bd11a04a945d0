"""A daemon's own copies of published generations (`actors/index/copies.py`): members of a fleet
share the database and the builder lock, never a generations directory.

On the fakes of `tests/support/index_cluster.py`, each member with a directory of its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from recalld.actors.embedding.embedder import Embedder, EmbedderSettings
from recalld.actors.index.manager import IndexManager
from recalld.actors.index.manifest import IndexReason
from recalld.actors.index.settings import IndexSettings
from recalld.actors.ports.index import VectorRows
from tests.support.fakes import FakeDatabase, FakeVectorStore
from tests.support.index_cluster import (
    MOCK_SECOND,
    REAL_S,
    SETTINGS,
    Cluster,
    current_generation,
    find,
    live_chunks,
    rendered,
)
from tests.support.usage_sink import ListSink
from tests.support.waits import eventually_async

pytestmark = [pytest.mark.anyio, pytest.mark.anyio_backends("trio")]


@asynccontextmanager
async def member(
    cluster: Cluster, root: Path, store: FakeVectorStore | None = None, usage: ListSink | None = None
) -> AsyncIterator[IndexManager]:
    """A daemon of the fleet: the cluster's database, lock and provider, its own directory."""
    embedder = Embedder(cluster.provider, usage=usage or ListSink(), settings=EmbedderSettings(max_wait_s=0.0))
    lock = cluster.locks.lock()
    manager = IndexManager(
        store or FakeVectorStore(cluster.db),
        lock,
        embedder,
        IndexSettings(root=root, **SETTINGS),
        new_generation_id=lambda: f"g{next(cluster.ids)}",
        member=f"host:{root}",
    )
    try:
        async with anyio.create_task_group() as tasks:
            await tasks.start(embedder.run)
            await tasks.start(manager.run)
            yield manager
            tasks.cancel_scope.cancel()
    finally:
        lock.drop()


class GatedStore(FakeVectorStore):
    """The store as a member sees it while its copy is built: the snapshot waits for `gate`."""

    def __init__(self, db: FakeDatabase) -> None:
        super().__init__(db)
        self.gate = anyio.Event()
        self.reached = anyio.Event()

    async def copy_snapshot(self, space_id: str, chunker: str, dimension: int, up_to: int) -> VectorRows:
        self.reached.set()
        await self.gate.wait()
        return await super().copy_snapshot(space_id, chunker, dimension, up_to)


def index_rows(usage: ListSink) -> int:
    return sum(1 for row in usage.rows if row.purpose == "index")


async def test_a_member_serves_a_copy_of_its_own_built_from_the_stored_vectors(
    cluster: Cluster, tmp_path: Path
) -> None:
    texts = {f"R{i}": f"body {i}" for i in range(6)}
    ids = {title: await cluster.records.create("ns", title, text) for title, text in texts.items()}
    async with member(cluster, tmp_path / "a") as builder:
        await eventually_async(
            lambda: current_generation(builder) == "g1", REAL_S, "the builder's generation", poll=MOCK_SECOND
        )
        assert builder.serving()["serving"] == {"generation": "g1", "files": "builder", "building": None}
        forgotten = ids.pop("R0")
        await cluster.records.forget(forgotten)  # retired after the builder's snapshot
        usage = ListSink()
        async with member(cluster, tmp_path / "b", usage=usage) as follower:
            await eventually_async(
                lambda: current_generation(follower) == "g1", REAL_S, "the follower's copy of g1", poll=MOCK_SECOND
            )
            assert not follower.is_builder
            report = follower.serving()
            assert report["serving"] == {"generation": "g1", "files": "copy", "building": None}
            assert report["lag"]["behind"] is False
            assert (tmp_path / "b" / "g1").is_dir(), "the copy lies in the follower's own directory"
            [copy] = cluster.db.copies.values()
            assert (copy.generation_id, copy.count, copy.member) == ("g1", 5, f"host:{tmp_path / 'b'}")
            assert cluster.db.generations["g1"].count == 6, "the builder's files hold the forgotten chunk"
            for title, record in ids.items():
                assert await find(follower, rendered(title, texts[title])) == record
            assert await find(follower, rendered("R0", texts["R0"])) != forgotten
            assert index_rows(usage) == 0, "the copy embedded nothing"
            assert follower.builds() == [] and set(cluster.db.generations) == {"g1"}
            assert (await follower.vectors_behind()) == 0


async def test_a_member_restarted_loads_its_recorded_copy_and_a_damaged_one_is_corrupt(
    cluster: Cluster, tmp_path: Path
) -> None:
    for i in range(4):
        await cluster.records.create("ns", f"R{i}", f"body {i}")
    async with member(cluster, tmp_path / "a") as builder:
        await eventually_async(
            lambda: current_generation(builder) == "g1", REAL_S, "the builder's generation", poll=MOCK_SECOND
        )
        async with member(cluster, tmp_path / "b") as follower:
            await eventually_async(lambda: current_generation(follower) == "g1", REAL_S, "the copy", poll=MOCK_SECOND)
        async with member(cluster, tmp_path / "b") as restarted:
            await eventually_async(
                lambda: current_generation(restarted) == "g1", REAL_S, "the copy loaded again", poll=MOCK_SECOND
            )
            assert restarted.serving()["serving"]["files"] == "copy"
            assert len(cluster.db.copies) == 1, "a recorded copy is loaded, not built again"
        index = tmp_path / "b" / "g1" / "index.faiss"
        data = bytearray(index.read_bytes())
        data[len(data) // 2] ^= 0xFF
        index.write_bytes(bytes(data))
        async with member(cluster, tmp_path / "b") as damaged:
            await eventually_async(
                lambda: damaged.problem() is not None, REAL_S, "a problem reported", poll=MOCK_SECOND
            )
            await anyio.sleep(30)  # polls: a damaged copy is never built over, nor served
            problem = damaged.problem()
            assert problem is not None and problem[0] == IndexReason.VECTOR_INDEX_CORRUPT, problem
            assert damaged.cell.current() is None and len(cluster.db.copies) == 1


async def test_while_its_copy_is_built_a_member_serves_what_it_has_and_says_it_lags(
    cluster: Cluster, tmp_path: Path
) -> None:
    texts = {f"R{i}": f"body {i}" for i in range(4)}
    ids = {title: await cluster.records.create("ns", title, text) for title, text in texts.items()}
    async with member(cluster, tmp_path / "a") as builder:
        await eventually_async(
            lambda: current_generation(builder) == "g1", REAL_S, "the builder's generation", poll=MOCK_SECOND
        )
        gated = GatedStore(cluster.db)
        async with member(cluster, tmp_path / "b", store=gated) as follower:
            await eventually_async(gated.reached.is_set, REAL_S, "the copy started", poll=MOCK_SECOND)
            await eventually_async(
                lambda: (h := follower.cell.current()) is not None and h.count == 4,
                REAL_S,
                "the stored vectors",
                poll=MOCK_SECOND,
            )
            report = follower.serving()
            assert report["serving"] == {"generation": None, "files": None, "building": "g1"}
            assert report["lag"]["behind"] is True
            assert follower.problem() is None, "the vectors stored serve meanwhile"
            assert await find(follower, rendered("R2", texts["R2"])) == ids["R2"]
            gated.gate.set()
            await eventually_async(
                lambda: current_generation(follower) == "g1", REAL_S, "the copy served", poll=MOCK_SECOND
            )
            assert follower.serving()["lag"]["behind"] is False
            assert follower.serving()["serving"]["building"] is None


async def test_a_builder_without_the_current_generation_copies_it_rather_than_build_another(
    cluster: Cluster, tmp_path: Path
) -> None:
    for i in range(5):
        await cluster.records.create("ns", f"R{i}", f"body {i}")
    async with member(cluster, tmp_path / "a") as first:
        await eventually_async(
            lambda: current_generation(first) == "g1", REAL_S, "the first builder's generation", poll=MOCK_SECOND
        )
    # the first builder is gone (its lock with it); the next one has a directory of its own
    gated = GatedStore(cluster.db)
    async with member(cluster, tmp_path / "b", store=gated) as second:
        await eventually_async(gated.reached.is_set, REAL_S, "the copy started", poll=MOCK_SECOND)
        await eventually_async(
            lambda: second.is_builder and live_chunks(cluster) == 5,
            REAL_S,
            "the second holds the lock",
            poll=MOCK_SECOND,
        )
        await anyio.sleep(60)  # a minute of polls, quiet: a build would have started
        gated.gate.set()
        await eventually_async(lambda: current_generation(second) == "g1", REAL_S, "the copy served", poll=MOCK_SECOND)
        await anyio.sleep(60)
        assert set(cluster.db.generations) == {"g1"} and cluster.db.current == "g1"
        assert second.builds() == []
