"""After `recalld restore`: the database is back with its stored vectors but without generations
(derived data, never restored as files; the restore empties their catalogue and moves the
pointer on). The vector route says it is rebuilding until the space is searchable again, and the
rebuild reads the stored vectors, never the provider.

On the fakes of `tests/actors/index/test_index_manager.py`: the restore is played on the fake database
exactly as `daemon/store/backup.py::CLEAR_GENERATIONS` plays it on PostgreSQL.
"""

from __future__ import annotations

import shutil

import pytest

from recalld.actors.index.manifest import IndexReason
from recalld.actors.index.problems import IndexUnavailable
from tests.support.index_cluster import MOCK_SECOND, REAL_S, Cluster, current_generation, find, rendered
from tests.support.waits import eventually_async

pytestmark = [pytest.mark.anyio, pytest.mark.anyio_backends("trio")]


def restore(cluster: Cluster) -> None:
    """What a restore leaves: every row, no generation files, an empty catalogue, a moved pointer."""
    shutil.rmtree(cluster.root)
    cluster.db.generations.clear()
    cluster.db.current = cluster.db.previous = None
    cluster.db.version += 1


async def test_the_vector_route_says_rebuilding_after_a_restore_until_the_space_is_rebuilt(cluster: Cluster) -> None:
    texts = [f"body {i}" for i in range(3)]
    ids = [await cluster.records.create("ns", f"R{i}", text) for i, text in enumerate(texts)]
    async with cluster.daemon() as manager:
        await eventually_async(lambda: current_generation(manager) == "g1", REAL_S, "g1", poll=MOCK_SECOND)
    restore(cluster)
    vectors = dict(cluster.db.vectors)

    async with cluster.daemon() as restarted:
        assert restarted.problem() is not None and restarted.problem()[0] == IndexReason.VECTOR_SPACE_REBUILDING
        with pytest.raises(IndexUnavailable) as refused:
            await find(restarted, rendered("R0", texts[0]))
        assert refused.value.reason == IndexReason.VECTOR_SPACE_REBUILDING
        cluster.provider.down = True  # the rebuild needs the stored vectors alone
        await eventually_async(
            lambda: current_generation(restarted) is not None, REAL_S, "a generation rebuilt", poll=MOCK_SECOND
        )
        assert restarted.problem() is None
        for i, record_id in enumerate(ids):
            assert await find(restarted, rendered(f"R{i}", texts[i])) == record_id
        assert cluster.db.vectors == vectors, "nothing re-embedded"


async def test_a_fresh_database_is_not_taken_for_a_restored_one(cluster: Cluster) -> None:
    async with cluster.daemon() as manager:
        problem = manager.problem()
        assert problem is not None and problem[0] == IndexReason.NO_VERIFIED_GENERATION
