"""Forgotten means forgotten, each layer of the vector route alone, after a restart and after a
rollback: a generation built before a forget and an update still holds the old vectors in its
files, and each layer by itself keeps them from coming back.

How each layer is isolated, without patching the code under test:

- the FAISS selector: `VectorSet.search` (the part of a handle that runs FAISS) is asked directly,
  with the handle's tombstones as its `exclude`; nothing after FAISS runs, so whatever FAISS
  returns is what the selector let through;
- the handle's tombstone check after FAISS (`_search`'s second check): `_search` runs over the
  handle's real parts wrapped in `NoSelector`, a part that drops `exclude` before calling FAISS
  (as a FAISS version that ignored the selector would), so only the check after it can remove the
  tombstoned vectors;
- rehydration (`deleted_at IS NULL` and the live-revision join): it is SQL, tested alone against
  PostgreSQL in tests/store/test_rehydrate_forgotten.py with the candidates an index with no
  tombstones at all returns.

And a control: the same wrapped parts with no tombstones return the forgotten record first,
which proves the old vectors really are in the files the layers are keeping them out of.
The restart and the rollback are real: a new index manager on the same (fake) database, and
`activate` of the generation built before the forget.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import pytest

from recalld.actors.index.handle import Handle, _search
from recalld.actors.index.manager import IndexManager
from recalld.actors.index.vectors import SurrogateSet, VectorSet
from tests.support.index_cluster import MOCK_SECOND, REAL_S, Cluster, current_generation, rendered, vector_of
from tests.support.waits import eventually_async

pytestmark = [pytest.mark.anyio, pytest.mark.anyio_backends("trio")]


FORGOTTEN = ("Forgotten", "the pass phrase of the old vault")
REPLACED = ("Replaced", "the first draft of the budget")
KEPT = [("Kept 1", "the garden rota"), ("Kept 2", "the parking rules"), ("Kept 3", "the coffee machine")]
NO_ROLLBACK = {"compact_share": 100.0}
"""No build of its own accord: the generation from before the forget stays current."""


class NoSelector:
    """A real part of the handle whose FAISS search is not given the exclusion."""

    def __init__(self, part: VectorSet) -> None:
        self._part = part
        self.id_map = part.id_map

    def first_fetch(self, namespace: str, k_records: int, *, exact: bool = False) -> int:
        return self._part.first_fetch(namespace, k_records, exact=exact)

    def search(
        self, query: Any, k: int, *, namespace: str, exclude: Any, within: Any = None, ef_search: int | None = None
    ) -> Any:
        return self._part.search(query, k, namespace=namespace, exclude=None, within=within, ef_search=ef_search)


def delta(manager: IndexManager) -> set[int]:
    handle = manager.cell.current()
    return set() if handle is None else {int(s) for d in handle.deltas for s in d.id_map.surrogate.tolist()}


def parts(handle: Handle) -> list[VectorSet]:
    return [*([handle.base] if handle.base is not None else []), *handle.deltas]


def queries() -> dict[str, np.ndarray]:
    return {name: vector_of(rendered(name, text)) for name, text in (FORGOTTEN, REPLACED)}


def surrogates_of(cluster: Cluster, record_id: uuid.UUID, revision: int) -> set[int]:
    return {c.surrogate for c in cluster.db.chunks.values() if c.record_id == record_id and c.revision == revision}


def selector_alone(handle: Handle, query: np.ndarray) -> set[int]:
    """Surrogates FAISS returns with the selector and nothing after it."""
    exclude = SurrogateSet(handle.tombstones)
    found: set[int] = set()
    for part in parts(handle):
        _, rows, _ = part.search(query, part.count, namespace="ns", exclude=exclude)
        found |= {int(s) for s in part.id_map.surrogate[rows]}
    return found


def check_after_faiss_alone(
    handle: Handle, query: np.ndarray, *, tombstones: bool = True
) -> list[tuple[uuid.UUID, int]]:
    excluded = SurrogateSet(handle.tombstones) if tombstones and handle.tombstones else None
    wrapped: list[Any] = [NoSelector(p) for p in parts(handle)]
    return [
        (h.record_id, h.revision)
        for h in _search(wrapped, excluded, query, k_records=10, namespace="ns", accept=None, within=None)
    ]


async def forget_and_replace(cluster: Cluster) -> tuple[uuid.UUID, uuid.UUID]:
    forgotten = await cluster.records.create("ns", *FORGOTTEN)
    replaced = await cluster.records.create("ns", *REPLACED)
    for title, text in KEPT:
        await cluster.records.create("ns", title, text)
    async with cluster.daemon() as manager:
        await eventually_async(
            lambda: current_generation(manager) == "g1", REAL_S, "g1 holds every record", poll=MOCK_SECOND
        )
    await cluster.records.forget(forgotten)
    await cluster.records.update(replaced, REPLACED[0], "the approved budget")
    return forgotten, replaced


def assert_each_layer_alone(cluster: Cluster, manager: IndexManager, forgotten: uuid.UUID, replaced: uuid.UUID) -> None:
    handle = manager.cell.current()
    assert handle is not None and handle.base is not None
    gone = surrogates_of(cluster, forgotten, 1) | surrogates_of(cluster, replaced, 1)
    assert gone and gone <= set(handle.base.id_map.surrogate.tolist()), "the old vectors are in the files"
    assert gone <= handle.tombstones
    for name, query in queries().items():
        # control: with no layer at all, the old vector is the best match
        top = check_after_faiss_alone(handle, query, tombstones=False)[0]
        assert top == ((forgotten, 1) if name == FORGOTTEN[0] else (replaced, 1))
        assert not selector_alone(handle, query) & gone, f"{name}: the selector alone"
        hits = check_after_faiss_alone(handle, query)
        assert (forgotten, 1) not in hits and (replaced, 1) not in hits, f"{name}: the check after FAISS alone"


async def test_each_layer_alone_after_a_restart(cluster: Cluster) -> None:
    forgotten, replaced = await forget_and_replace(cluster)
    async with cluster.daemon(**NO_ROLLBACK) as restarted:
        await eventually_async(
            lambda: (
                bool(surrogates_of(cluster, replaced, 2)) and surrogates_of(cluster, replaced, 2) <= delta(restarted)
            ),
            REAL_S,
            "the new revision indexed and in the handle",
            poll=MOCK_SECOND,
        )
        assert current_generation(restarted) == "g1", "still the generation built before the forget"
        assert_each_layer_alone(cluster, restarted, forgotten, replaced)


async def test_each_layer_alone_after_a_rollback(cluster: Cluster) -> None:
    forgotten, replaced = await forget_and_replace(cluster)
    async with cluster.daemon(**NO_ROLLBACK) as manager:
        await eventually_async(
            lambda: current_generation(manager) == "g1" and manager.pending == 0,
            REAL_S,
            "caught up on g1",
            poll=MOCK_SECOND,
        )
        manager.request_rebuild()
        await eventually_async(
            lambda: current_generation(manager) == "g2", REAL_S, "g2, built after the forget", poll=MOCK_SECOND
        )
        assert not set(manager.cell.current().base.id_map.surrogate.tolist()) & surrogates_of(cluster, forgotten, 1)
        await manager.activate("g1")
        await eventually_async(
            lambda: current_generation(manager) == "g1", REAL_S, "rolled back to g1", poll=MOCK_SECOND
        )
        await eventually_async(
            lambda: bool(manager.cell.current().tombstones), REAL_S, "its tombstones applied", poll=MOCK_SECOND
        )
        assert_each_layer_alone(cluster, manager, forgotten, replaced)
