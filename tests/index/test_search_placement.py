"""The index manager runs a cheap search on the event loop (issue 24): the first search of a
handle goes to a worker thread, later ones of a cheap handle run in the loop's own thread, and
either way a search answers the same and never returns a forgotten record. Which thread ran a
search is what `accept` (called from the searching thread) sees."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tests.index.test_index_manager import Cluster, rendered, until, vector_of

pytestmark = [pytest.mark.anyio, pytest.mark.anyio_backends("trio")]


@pytest.fixture
def cluster(tmp_path: Path) -> Cluster:
    return Cluster(tmp_path / "generations")


async def test_a_cheap_handle_is_searched_on_the_loop_with_the_same_answers(cluster: Cluster) -> None:
    ids = [await cluster.records.create("ns", f"Record {i}", f"body {i}") for i in range(20)]
    async with cluster.daemon() as manager:
        await until(lambda: manager.pending == 0 and manager.cell.current() is not None, "caught up")
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
        await on_the_loop_within(search, first, loop_thread)

        # A forgotten record is a tombstone of a new handle: its first search in a thread,
        # then on the loop, and neither returns the record.
        assert await cluster.records.forget(ids[3])
        manager.wake()
        await until(lambda: manager.cell.current() is not handle, "the tombstone taken in")
        after, threads = await search()
        assert loop_thread not in threads, "a new handle's first search runs in a worker thread"
        assert ids[3] not in after and after[:4] == [i for i in first if i != ids[3]]
        await on_the_loop_within(search, after, loop_thread)


async def on_the_loop_within(
    search: Callable[[], Awaitable[tuple[list[uuid.UUID], set[int]]]], answer: list[uuid.UUID], loop_thread: int
) -> None:
    """Searches move to the loop within a few dozen (a cold first search may cost more than the
    bound, and is forgotten gradually), then stay there; every answer is the same."""
    for _ in range(40):
        again, threads = await search()
        assert again == answer
        if threads == {loop_thread}:
            break
    else:
        raise AssertionError("a cheap handle is never searched on the loop")
    for _ in range(3):
        again, threads = await search()
        assert (again, threads) == (answer, {loop_thread})
