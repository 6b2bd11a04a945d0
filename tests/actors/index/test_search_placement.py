"""The index manager runs a cheap search on the event loop (actors/index/placement.py): the first search of a
handle goes to a worker thread, later ones of a cheap handle run in the loop's own thread, and
either way a search answers the same and never returns a forgotten record; a filtered or large
search always goes to a thread; a search on the loop is measured by wall time. Which thread ran a
search is what `accept` (called from the searching thread) sees."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np
import pytest

from recalld.actors.index.generation import build_generation, load_generation, manifest_sha256
from recalld.actors.index.handle import Handle
from recalld.actors.index.manager import IndexManager
from recalld.actors.index.manifest import Expected
from recalld.actors.index.placement import (
    INLINE_MAX_K_RECORDS,
    INLINE_MAX_S,
    SearchPlacement,
    placed,
    scored_exactly,
)
from recalld.actors.index.vectors import EXACT_NAMESPACE_MAX
from tests.support.generations import id_map_for, space, unit_vectors
from tests.support.index_cluster import MOCK_SECOND, REAL_S, Cluster, rendered, vector_of
from tests.support.waits import eventually_async

pytestmark = [pytest.mark.anyio, pytest.mark.anyio_backends("trio")]

LOOP_BOUND_S = 5.0
"""The managers below may hold the loop this long per search instead of `INLINE_MAX_S`: these tests
check which searches move to the loop and what they answer, not how fast this machine is (a
search of 20 records that is cheap on an idle machine passed 2 ms under a loaded one, and the
loop's wall time counts every wait for the GIL)."""


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    return Cluster(tmp_path / "generations")


async def test_a_cheap_handle_is_searched_on_the_loop_with_the_same_answers(cluster: Cluster) -> None:
    ids = [await cluster.records.create("ns", f"Record {i}", f"body {i}") for i in range(20)]
    async with cluster.daemon(inline_search_max_s=LOOP_BOUND_S) as manager:
        await eventually_async(
            lambda: manager.pending == 0 and manager.cell.current() is not None, REAL_S, "caught up", poll=MOCK_SECOND
        )
        handle = manager.cell.current()
        assert handle is not None and handle.count == 20
        loop_thread = threading.get_ident()
        query = vector_of(rendered("Record 3", "body 3"))

        async def search() -> tuple[list[uuid.UUID], set[int]]:
            threads: set[int] = set()

            def accept(record_id: uuid.UUID, revision: int) -> bool:
                threads.add(threading.get_ident())
                return True

            hits, _ = await manager.search(query, namespace="ns", k_records=5, accept=accept)
            return [h.record_id for h in hits], threads

        first, first_threads = await search()
        assert first[0] == ids[3] and len(first) == 5
        assert loop_thread not in first_threads, "a handle's first search runs in a worker thread"
        await on_the_loop_within(manager, search, first, loop_thread)

        # A forgotten record is a tombstone of a new handle: its first search in a thread,
        # then on the loop, and neither returns the record.
        assert await cluster.records.forget(ids[3])
        manager.wake()
        await eventually_async(
            lambda: manager.cell.current() is not handle, REAL_S, "the tombstone taken in", poll=MOCK_SECOND
        )
        after, threads = await search()
        assert loop_thread not in threads, "a new handle's first search runs in a worker thread"
        assert ids[3] not in after and after[:4] == [i for i in first if i != ids[3]]
        await on_the_loop_within(manager, search, after, loop_thread)


async def on_the_loop_within(
    manager: IndexManager,
    search: Callable[[], Awaitable[tuple[list[uuid.UUID], set[int]]]],
    answer: list[uuid.UUID],
    loop_thread: int,
) -> None:
    """Searches move to the loop within a few dozen (a cold first search may cost more than the
    bound, and is forgotten gradually), then stay there while the handle is the same; every
    answer is the same. A handle the manager publishes meanwhile (it may still fold what it
    caught up into a generation) starts unknown, and the count starts again."""
    handle, on_loop = manager.cell.current(), 0
    for _ in range(60):
        again, threads = await search()
        assert again == answer
        if manager.cell.current() is not handle:
            handle, on_loop = manager.cell.current(), 0
        elif threads == {loop_thread}:
            on_loop += 1
            if on_loop == 4:
                return
        else:
            assert on_loop == 0, f"a search of the same cheap handle left the loop after {on_loop} on it"
    raise AssertionError("a cheap handle is never searched on the loop")


async def test_a_filtered_or_large_search_never_runs_on_the_loop(cluster: Cluster) -> None:
    """Once a handle's ordinary searches run on the loop, a search `within` records (an exact
    scan) or for more than `INLINE_MAX_K_RECORDS` records still runs in a worker thread: its cost
    is not what the ordinary ones measured."""
    ids = [await cluster.records.create("ns", f"Record {i}", f"body {i}") for i in range(20)]
    async with cluster.daemon(inline_search_max_s=LOOP_BOUND_S) as manager:
        await eventually_async(
            lambda: manager.pending == 0 and manager.cell.current() is not None, REAL_S, "caught up", poll=MOCK_SECOND
        )
        loop_thread = threading.get_ident()
        query = vector_of(rendered("Record 3", "body 3"))

        async def search(k_records: int = 5, within: list[uuid.UUID] | None = None) -> tuple[list[uuid.UUID], set[int]]:
            threads: set[int] = set()

            def accept(record_id: uuid.UUID, revision: int) -> bool:
                threads.add(threading.get_ident())
                return True

            hits, _ = await manager.search(query, namespace="ns", k_records=k_records, accept=accept, within=within)
            return [h.record_id for h in hits], threads

        async def until_on_the_loop() -> None:
            for _ in range(40):
                if (await search())[1] == {loop_thread}:
                    return
            raise AssertionError("a cheap handle is never searched on the loop")

        for _ in range(3):
            # each right after an ordinary search ran on the loop: the handle reads cheap
            await until_on_the_loop()
            filtered, threads = await search(within=ids[:10])
            assert filtered[0] == ids[3] and set(filtered) <= set(ids[:10])
            assert loop_thread not in threads, "a filtered search runs in a worker thread"
            await until_on_the_loop()
            large, threads = await search(k_records=INLINE_MAX_K_RECORDS + 1)
            assert large[0] == ids[3] and len(large) == 20
            assert loop_thread not in threads, "a search for more records runs in a worker thread"


async def test_a_search_on_the_loop_is_measured_by_how_long_it_held_the_loop() -> None:
    """A search on the loop that waits without using CPU (a page fault's disk read, the GIL taken
    back) still held the loop: its cost is the wall time."""
    placement, handle = SearchPlacement(), object()
    placement.observe(handle, 0.0)
    loop_thread = threading.get_ident()
    held_s = 10 * INLINE_MAX_S

    def waiting_search() -> int:
        threading.Event().wait(held_s)  # holds the thread without CPU, as a disk wait does
        return threading.get_ident()

    assert await placed(placement, handle, waiting_search, ordinary=True) == loop_thread
    assert placement.estimate_s is not None and placement.estimate_s >= held_s
    assert not placement.inline(handle), "a search that held the loop sends the next ones to threads"


async def test_a_search_that_is_not_ordinary_runs_in_a_thread_and_is_not_counted() -> None:
    placement, handle = SearchPlacement(), object()
    placement.observe(handle, 0.0)
    loop_thread = threading.get_ident()
    assert await placed(placement, handle, threading.get_ident, ordinary=False) != loop_thread
    assert placement.estimate_s == 0.0 and placement.inline(handle)


@pytest.mark.parametrize(
    ("factory", "namespace", "k_records", "exact"),
    [
        ("HNSW8", "small", 5, True),  # at most EXACT_NAMESPACE_MAX vectors: scored one by one
        ("HNSW8", "big", 5, False),  # a graph walk
        ("HNSW8", "big", INLINE_MAX_K_RECORDS, False),
        ("HNSW8", "big", EXACT_NAMESPACE_MAX, True),  # asks for every vector: scored one by one
        ("Flat", "small", 5, False),  # FAISS's own scan
        ("Flat", "big", 5, False),
        ("HNSW8", "absent", 5, False),
    ],
)
def test_which_searches_score_a_namespace_exactly(
    tmp_path: Path, factory: str, namespace: str, k_records: int, exact: bool
) -> None:
    """On real generations: a search of a small HNSW namespace is scored exactly, so it is never
    an ordinary search, whatever its handle's searches measured."""
    sizes = {"small": 50, "big": EXACT_NAMESPACE_MAX + 50}
    names = [name for name, n in sizes.items() for _ in range(n)]
    vectors = unit_vectors(np.random.default_rng(39), len(names), 16)
    surrogates = np.arange(1, len(names) + 1, dtype=np.int64)
    manifest = build_generation(
        tmp_path,
        generation_id="g",
        space=space(16),
        space_id=space(16).key,
        vectors=vectors,
        id_map=id_map_for(surrogates, namespaces=names),
        source_watermark=len(names),
        tombstone_watermark=0,
        factory=factory,
    )
    generation = load_generation(tmp_path, Expected.from_manifest(manifest, manifest_sha256(tmp_path / "g")))
    handle = Handle.of(generation)
    assert scored_exactly((handle.base, *handle.deltas), namespace, k_records) is exact
