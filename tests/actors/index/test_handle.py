from __future__ import annotations

import gc
import itertools
import uuid
import weakref
from pathlib import Path

import anyio
import numpy as np
import numpy.typing as npt
import pytest

from recalld.actors.index.generation import Generation, load_generation
from recalld.actors.index.handle import Handle, HandleCell, HandleClosed, Hit
from recalld.actors.index.idmap import IdMap, record_id_rows
from recalld.actors.index.vectors import SurrogateSet, _record_keys
from tests.support.generations import build, id_map_for, record_uuid, space, unit_vectors

# Real clocks on both: the index tests wait on worker threads, never on timers.
pytestmark = pytest.mark.anyio_backends("asyncio", "trio", real_clock=True)


def generation(
    root: Path,
    vectors: npt.NDArray[np.float32],
    id_map: IdMap,
    *,
    factory: str = "Flat",
    name: str = "g",
) -> Generation:
    _, expected = build(root, name, vectors, id_map, factory=factory)
    return load_generation(root, expected)


def brute_force(
    query: npt.NDArray[np.float32],
    vectors: npt.NDArray[np.float32],
    surrogates: npt.NDArray[np.int64],
    records: npt.NDArray[np.int64],
    k: int,
    allowed: npt.NDArray[np.bool_],
) -> list[int]:
    """The top-k records by their best chunk, ties by surrogate: what search must return."""
    scores = vectors @ query
    best: dict[int, tuple[float, int]] = {}
    for i in np.flatnonzero(allowed):
        key = (-float(scores[i]), int(surrogates[i]))
        r = int(records[i])
        if r not in best or key < best[r]:
            best[r] = key
    return [r for r, _ in sorted(best.items(), key=lambda kv: kv[1])[:k]]


def current(cell: HandleCell) -> Handle:
    handle = cell.current()
    assert handle is not None
    return handle


def records_of(hits: list[Hit]) -> list[int]:
    return [h.record_id.int - 1 for h in hits]


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Generation, npt.NDArray[np.float32], IdMap]:
    """1,000 vectors in namespace A among 100,000 in namespace B (random unit vectors)."""
    rng = np.random.default_rng(42)
    n_b, n_a, d = 100_000, 1_000, 32
    vectors = unit_vectors(rng, n_a + n_b, d)
    surrogates = rng.permutation(n_a + n_b).astype(np.int64) + 1
    namespaces = ["A"] * n_a + ["B"] * n_b
    id_map = id_map_for(surrogates, namespaces=namespaces)
    return generation(tmp_path_factory.mktemp("crowded"), vectors, id_map), vectors, id_map


@pytest.mark.parametrize("k", [1, 10, 50])
def test_namespace_crowding_never_shortens_the_answer(
    crowded: tuple[Generation, npt.NDArray[np.float32], IdMap], k: int
) -> None:
    gen, vectors, id_map = crowded
    handle = Handle.of(gen)
    in_a = np.array([ns == "A" for ns in (id_map.namespace(i) for i in range(len(id_map)))])
    rng = np.random.default_rng(k)
    # Queries right on top of B vectors: every global neighbour is in B.
    for query in vectors[~in_a][rng.integers(0, 100_000, 5)]:
        hits = handle.search(query, k_records=k, namespace="A")
        assert len(hits) == k == len({h.record_id for h in hits})
        assert records_of(hits) == brute_force(query, vectors, id_map.surrogate, id_map.surrogate, k, in_a)
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_crowding_with_tombstones_and_rejections(crowded: tuple[Generation, npt.NDArray[np.float32], IdMap]) -> None:
    gen, vectors, id_map = crowded
    in_a = np.array([id_map.namespace(i) == "A" for i in range(len(id_map))])
    query = vectors[~in_a][0]
    plain = Handle.of(gen).search(query, k_records=20, namespace="A")
    # Forget the 10 best A records; reject three records in four of the rest.
    dead = {h.surrogate for h in plain[:10]}
    handle = Handle.of(gen).with_tombstones(dead)
    rejected: list[uuid.UUID] = []

    def accept(record: uuid.UUID, revision: int) -> bool:
        if record.int % 4 == 1:
            return True
        rejected.append(record)
        return False

    hits = handle.search(query, k_records=10, namespace="A", accept=accept)
    allowed = in_a & ~np.isin(id_map.surrogate, list(dead)) & (id_map.surrogate % 4 == 0)  # record int = surrogate + 1
    assert len(hits) == 10
    assert records_of(hits) == brute_force(query, vectors, id_map.surrogate, id_map.surrogate, 10, allowed)
    assert not dead & {h.surrogate for h in hits}
    assert len(rejected) == len(set(rejected)), "accept is asked once per record and revision"


def test_several_chunks_per_record_are_one_hit_each(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    chunks, records = 4, 500
    vectors = unit_vectors(rng, chunks * records, 16)
    surrogates = np.arange(chunks * records, dtype=np.int64) + 100
    record_of = np.repeat(np.arange(records), chunks)
    gen = generation(tmp_path, vectors, id_map_for(surrogates, records=record_of))
    handle = Handle.of(gen)
    for query in unit_vectors(rng, 5, 16):
        hits = handle.search(query, k_records=25, namespace="ns")
        assert records_of(hits) == brute_force(
            query, vectors, surrogates, record_of, 25, np.ones(len(surrogates), bool)
        )
        for hit in hits:  # the best chunk of each record is the one reported
            own = np.flatnonzero(record_of == hit.record_id.int - 1)
            assert hit.surrogate == surrogates[own[np.argmax(vectors[own] @ query)]]
    # A namespace with fewer records than asked: all of them, once.
    assert len(handle.search(vectors[0], k_records=records + 50, namespace="ns")) == records
    assert handle.search(vectors[0], k_records=5, namespace="nobody") == []


@pytest.mark.parametrize("factory", ["Flat", "HNSW16"])  # FAISS's flat scan; our exact scorer
def test_equal_scores_are_ordered_by_surrogate(tmp_path: Path, factory: str) -> None:
    base = unit_vectors(np.random.default_rng(4), 1, 8)
    others = unit_vectors(np.random.default_rng(5), 30, 8)
    vectors = np.concatenate([np.repeat(base, 10, axis=0), others])
    surrogates = np.random.default_rng(6).permutation(40).astype(np.int64) + 1
    gen = generation(tmp_path, vectors, id_map_for(surrogates), factory=factory)
    handle = Handle.of(gen)
    first = handle.search(base[0], k_records=4, namespace="ns")
    assert [h.surrogate for h in first] == sorted(surrogates[:10].tolist())[:4]
    assert all(handle.search(base[0], k_records=4, namespace="ns") == first for _ in range(5))
    everyone = record_id_rows([record_uuid(int(s)) for s in surrogates])
    within = handle.search(base[0], k_records=4, namespace="ns", within=everyone)
    assert [h.surrogate for h in within] == [h.surrogate for h in first]  # scores may differ in the last bit


@pytest.mark.parametrize("n_b", [3_000, 6_000])
def test_hnsw_generations_search_the_same_way(tmp_path: Path, n_b: int) -> None:
    """Small namespaces are scored exactly; large ones go through HNSW with the same selectors."""
    rng = np.random.default_rng(n_b)
    n_a, d = 300, 16
    vectors = unit_vectors(rng, n_a + n_b, d)
    surrogates = np.arange(n_a + n_b, dtype=np.int64) + 1
    namespaces = ["A"] * n_a + ["B"] * n_b
    gen = generation(tmp_path, vectors, id_map_for(surrogates, namespaces=namespaces), factory="HNSW16")
    assert gen.family == "hnsw" and gen.mmapped
    in_a = np.arange(n_a + n_b) < n_a
    top_b = Handle.of(gen).search(vectors[n_a], k_records=5, namespace="B")
    handle = Handle.of(gen).with_tombstones(h.surrogate for h in top_b)
    recall = []
    for query in vectors[rng.integers(n_a, n_a + n_b, 10)]:
        for namespace, mask in (("A", in_a), ("B", ~in_a)):
            hits = handle.search(query, k_records=10, namespace=namespace)
            assert len(hits) == 10 == len({h.record_id for h in hits})
            assert all(namespace == ("A" if h.surrogate <= n_a else "B") for h in hits)
            assert not {h.surrogate for h in hits} & handle.tombstones
            truth = brute_force(
                query, vectors, surrogates, surrogates, 10, mask & ~np.isin(surrogates, list(handle.tombstones))
            )
            if namespace == "A":
                assert records_of(hits) == truth  # exact
            recall.append(len(set(records_of(hits)) & set(truth)) / 10)
    assert np.mean(recall) >= 0.9


def test_a_search_within_given_records_is_exact_and_keeps_every_other_promise(tmp_path: Path) -> None:
    """`within` (the records a kind or attribute filter selects) is scored exactly, however far
    their vectors are from the query: a graph walk would find few of them among 6,000 nodes.
    The namespace, tombstones, deltas and one hit per record (its best chunk) still hold; ids the
    handle does not hold are ignored."""
    rng = np.random.default_rng(21)
    n_a, n_b, d = 5_000, 1_000, 16
    vectors = unit_vectors(rng, n_a + n_b, d)
    surrogates = np.arange(n_a + n_b, dtype=np.int64) + 1
    records = surrogates // 2  # two chunks a record
    namespaces = ["A"] * n_a + ["B"] * n_b
    gen = generation(
        tmp_path, vectors, id_map_for(surrogates, records=records, namespaces=namespaces), factory="HNSW16"
    )
    added = unit_vectors(rng, 40, d)
    delta_surrogates = np.arange(40, dtype=np.int64) + 100_000
    handle = Handle.of(gen).with_delta(added, id_map_for(delta_surrogates, records=delta_surrogates, namespaces="A"))
    all_vectors = np.concatenate([vectors, added])
    all_surrogates = np.concatenate([surrogates, delta_surrogates])
    all_records = np.concatenate([records, delta_surrogates])
    in_a = np.concatenate([np.arange(n_a + n_b) < n_a, np.ones(40, bool)])
    query = vectors[0]
    # records far from the query: the nearest 500 are left out
    nearest = set(records_of(handle.search(query, k_records=500, namespace="A")))
    far = sorted({int(r) for r in records[:n_a]} - nearest)
    picked = rng.choice(far, 60, replace=False)
    dead = [int(s) for s in surrogates[np.isin(records, picked[:5])][::2]]  # one chunk of five records
    handle = handle.with_tombstones(dead)
    chosen = [
        *picked.tolist(),
        *delta_surrogates[:5].tolist(),
        *records[n_a : n_a + 20].tolist(),
        10**9,
        int(picked[0]),
    ]
    within = record_id_rows([record_uuid(r) for r in chosen])
    allowed = in_a & np.isin(all_records, chosen) & ~np.isin(all_surrogates, dead)
    assert len(set(all_records[allowed].tolist())) > 60
    for k in (10, 50, 200):
        hits = handle.search(query, k_records=k, namespace="A", within=within)
        truth = brute_force(query, all_vectors, all_surrogates, all_records, k, allowed)
        assert records_of(hits) == truth and len(hits) == min(k, len(set(all_records[allowed].tolist())))
        assert not set(dead) & {h.surrogate for h in hits}
    assert handle.search(query, k_records=10, namespace="A", within=record_id_rows([])) == []
    assert handle.search(query, k_records=10, namespace="B", within=within[:60]) == []


def test_records_whose_keys_collide_are_told_apart_by_their_ids(tmp_path: Path) -> None:
    """Record ids are looked up by a 64-bit mix of their halves; two ids built to mix alike still
    find only their own vectors."""
    mix = np.uint64(0x9E3779B97F4A7C15)
    a0, a1, b0 = np.uint64(7), np.uint64(11), np.uint64(12345)
    with np.errstate(over="ignore"):
        b1 = a0 * mix ^ a1 ^ b0 * mix  # so that b0 * mix ^ b1 == a0 * mix ^ a1
    first, second = (uuid.UUID(bytes=np.array(halves, np.uint64).tobytes()) for halves in ((a0, a1), (b0, b1)))
    keys = _record_keys(record_id_rows([first, second]))
    assert keys[0] == keys[1], "the two ids must collide for this test to test anything"
    ids = [first, second, first, uuid.UUID(int=99)]
    vectors = unit_vectors(np.random.default_rng(2), 4, 8)
    gen = generation(tmp_path, vectors, IdMap.from_rows([1, 2, 3, 4], ids, [1] * 4, ["ns"] * 4))
    assert gen.rows_of_records(record_id_rows([first])).tolist() == [0, 2]
    assert gen.rows_of_records(record_id_rows([second, uuid.UUID(int=5)])).tolist() == [1]
    hits = Handle.of(gen).search(vectors[1], k_records=5, namespace="ns", within=record_id_rows([first]))
    assert [h.record_id for h in hits] == [first]


def test_deltas_and_tombstones_make_new_handles(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    vectors = unit_vectors(rng, 200, 8)
    gen = generation(tmp_path, vectors, id_map_for(np.arange(200) + 1))
    first = Handle.of(gen)
    added = unit_vectors(rng, 20, 8)
    second = first.with_delta(added, id_map_for(np.arange(20) + 1000, records=np.arange(20) + 5000))
    assert (first.count, second.count, second.delta_count) == (200, 220, 20)
    assert (first.seen, second.seen) == (200, 1019)
    replaced = first.with_delta(added[:1], id_map_for([3000]))
    replaced.close()  # a count that began with it asks it afterwards: it must not read as empty
    assert replaced.seen == 3000
    assert second.base is first.base, "the base generation is shared, not copied"
    assert second.search(added[3], k_records=1, namespace="ns")[0].surrogate == 1003
    assert first.search(added[3], k_records=1, namespace="ns")[0].surrogate != 1003  # the old handle is unchanged

    third = second.with_tombstones([1003, 1])
    assert third.tombstones == {1, 1003} and second.tombstones == frozenset()
    assert 1003 not in {h.surrogate for h in third.search(added[3], k_records=30, namespace="ns")}
    assert third.search(vectors[0], k_records=1, namespace="ns")[0].surrogate != 1

    more = unit_vectors(rng, 5, 8)
    fourth = third.with_delta(more, id_map_for(np.arange(5) + 2000))
    assert fourth.stats().delta_count == 25 and fourth.stats().tombstones == 2
    assert fourth.stats().delta_share == pytest.approx(25 / 200)

    with pytest.raises(ValueError, match="already in the handle"):
        fourth.with_delta(more[:1], id_map_for([2000]))
    with pytest.raises(ValueError, match="already in the handle"):
        fourth.with_delta(more[:1], id_map_for([5]))  # in the base
    with pytest.raises(ValueError, match="float32"):
        fourth.with_delta(unit_vectors(rng, 1, 9), id_map_for([3000]))
    with pytest.raises(ValueError, match="NaN"):
        fourth.with_delta(np.full((1, 8), np.nan, np.float32), id_map_for([3000]))
    with pytest.raises(ValueError, match="unit length"):
        fourth.with_delta(np.full((1, 8), 1.0, np.float32), id_map_for([3000]))
    with pytest.raises(ValueError, match="query"):
        fourth.search(np.ones(9, np.float32), k_records=1, namespace="ns")


def test_a_handle_refuses_a_base_generation_of_another_space(tmp_path: Path) -> None:
    rng = np.random.default_rng(10)
    other_space = generation(tmp_path, unit_vectors(rng, 5, 12), id_map_for(np.arange(5)), name="g3")
    with pytest.raises(ValueError, match="space"):
        Handle(space(8), base=other_space)


def test_handles_without_a_generation_search_the_delta(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    empty = Handle.empty(space(8))
    assert (empty.count, empty.seen, empty.generation_id) == (0, 0, None)
    assert empty.search(unit_vectors(rng, 1, 8)[0], k_records=3, namespace="ns") == []
    vectors = unit_vectors(rng, 10, 8)
    handle = empty.with_delta(vectors, id_map_for(np.arange(10), namespaces=["x"] * 5 + ["y"] * 5))
    assert (handle.count, handle.delta_count, handle.seen) == (10, 10, 9)
    hits = handle.search(vectors[7], k_records=3, namespace="y")
    assert hits[0].surrogate == 7 and hits[0].record_id == record_uuid(7) and hits[0].revision == 1
    assert {h.surrogate for h in hits} <= {5, 6, 7, 8, 9}


def test_a_closed_handle_refuses_to_search(tmp_path: Path) -> None:
    rng = np.random.default_rng(12)
    gen = generation(tmp_path, unit_vectors(rng, 10, 8), id_map_for(np.arange(10)))
    handle = Handle.of(gen)
    handle.close()
    handle.close()
    assert handle.closed and handle.base is None
    with pytest.raises(HandleClosed):
        handle.search(unit_vectors(rng, 1, 8)[0], k_records=1, namespace="ns")


@pytest.mark.anyio
async def test_a_replaced_handle_closes_when_its_last_lease_ends(tmp_path: Path) -> None:
    rng = np.random.default_rng(13)
    gen = generation(tmp_path, unit_vectors(rng, 10, 8), id_map_for(np.arange(10)))
    first = Handle.of(gen)
    cell = HandleCell(first)
    second = first.with_tombstones([1])
    third = second.with_tombstones([2])

    async with cell.lease() as a, cell.lease() as b:
        assert a is b is first and cell.open_leases == 2
        assert cell.swap(second) is first
        assert not first.closed and cell.live_handles == 2
        async with cell.lease() as c:
            assert c is second
            cell.swap(third)  # second is leased: stays open
            assert not second.closed
        assert second.closed, "closed as its only lease ended"
        assert cell.generations_in_use() == {"g"}
        assert not first.closed
    assert first.closed and not third.closed
    assert (cell.open_leases, cell.live_handles) == (0, 1)
    cell.swap(third)  # no-op
    fourth = third.with_tombstones([3])
    cell.swap(fourth)
    assert third.closed, "an unleased handle closes as soon as it is replaced"
    with pytest.raises(ValueError):
        cell.swap(third)


@pytest.mark.anyio
async def test_a_cell_can_start_empty(tmp_path: Path) -> None:
    cell = HandleCell()
    async with cell.lease() as nothing:
        assert nothing is None and cell.open_leases == 1
        first = Handle.empty(space(8))
        assert cell.swap(first) is None
        async with cell.lease() as handle:
            assert handle is first
    assert (cell.open_leases, cell.live_handles, cell.generations_in_use()) == (0, 1, frozenset())
    assert not first.closed


@pytest.mark.anyio
async def test_leases_end_on_errors_and_cancellation(tmp_path: Path) -> None:
    rng = np.random.default_rng(14)
    gen = generation(tmp_path, unit_vectors(rng, 10, 8), id_map_for(np.arange(10)))
    first = Handle.of(gen)
    cell = HandleCell(first)
    with pytest.raises(RuntimeError, match="inside"):
        async with cell.lease():
            cell.swap(first.with_tombstones([1]))
            raise RuntimeError("inside")
    assert first.closed and cell.open_leases == 0

    entered = anyio.Event()
    async with anyio.create_task_group() as tg:

        async def hold() -> None:
            async with cell.lease():
                entered.set()
                await anyio.sleep_forever()

        tg.start_soon(hold)
        await entered.wait()
        assert cell.open_leases == 1
        held = current(cell)
        cell.swap(held.with_tombstones([2]))
        tg.cancel_scope.cancel()
    assert held.closed and cell.open_leases == 0 and cell.live_handles == 1

    cell.close()
    assert current(cell).closed
    with pytest.raises(HandleClosed):
        async with cell.lease():
            pass


def test_closed_handles_release_their_generation(tmp_path: Path) -> None:
    rng = np.random.default_rng(15)
    gen = generation(tmp_path, unit_vectors(rng, 10, 8), id_map_for(np.arange(10)))
    ref = weakref.ref(gen)
    handles = [Handle.of(gen)]
    handles.append(handles[0].with_tombstones([1]))
    del gen
    handles[0].close()
    gc.collect()
    assert ref() is not None, "still used by the second handle"
    handles[1].close()
    gc.collect()
    assert ref() is None, "the generation (and its FAISS index and mapping) was freed"


def test_small_deltas_are_merged_geometrically(tmp_path: Path) -> None:
    """Adding a few vectors at a time never copies the whole delta; parts stay few."""
    rng = np.random.default_rng(16)
    gen = generation(tmp_path, unit_vectors(rng, 50, 8), id_map_for(np.arange(50) + 1))
    handles = [Handle.of(gen)]
    vectors = unit_vectors(rng, 500, 8)
    for i in range(500):
        handles.append(handles[-1].with_delta(vectors[i : i + 1], id_map_for([1000 + i])))
        sizes = [d.count for d in handles[-1].deltas]
        assert all(a >= 4 * b for a, b in itertools.pairwise(sizes)), sizes
    last = handles[-1]
    assert last.delta_count == 500 and len(last.deltas) <= 6 and last.seen == 1499
    for i in range(0, 500, 37):
        assert last.search(vectors[i], k_records=1, namespace="ns")[0].surrogate == 1000 + i
    # Every earlier handle still sees exactly what it had.
    assert handles[10].count == 60 and handles[10].search(vectors[10], k_records=1, namespace="ns")[0].surrogate != 1010


def test_a_search_runs_faiss_single_threaded_in_its_own_thread_only(tmp_path: Path) -> None:
    """OpenMP's thread count is per calling thread: a search pins its worker thread to one
    (a one-vector search gains nothing from a spinning team) and leaves other threads alone."""
    import threading

    import faiss

    from recalld.actors.index.vectors import BUILD_THREADS

    rng = np.random.default_rng(7)
    vectors = unit_vectors(rng, 50, 16)
    handle = Handle.of(generation(tmp_path, vectors, id_map_for(np.arange(50, dtype=np.int64) + 1)))
    seen: list[int] = []

    def search_in_a_worker() -> None:
        handle.search(vectors[0], k_records=3, namespace="ns")
        seen.append(faiss.omp_get_max_threads())

    worker = threading.Thread(target=search_in_a_worker)
    worker.start()
    worker.join()
    assert seen == [1]
    assert faiss.omp_get_max_threads() == BUILD_THREADS


def test_a_namespace_that_holds_every_vector_searches_unfiltered_yet_skips_tombstones(tmp_path: Path) -> None:
    """One namespace over the whole HNSW generation: no namespace filter, only the tombstones'."""
    rng = np.random.default_rng(11)
    n, d = 6_000, 16
    vectors = unit_vectors(rng, n, d)
    surrogates = rng.permutation(n).astype(np.int64) + 1
    gen = generation(tmp_path, vectors, id_map_for(surrogates), factory="HNSW16")
    query = vectors[0]
    top = Handle.of(gen).search(query, k_records=10, namespace="ns")
    assert top[0].surrogate == surrogates[0]  # the vector itself
    handle = Handle.of(gen).with_tombstones(h.surrogate for h in top[:5])
    hits = handle.search(query, k_records=10, namespace="ns")
    assert len(hits) == 10 and not {h.surrogate for h in hits} & handle.tombstones
    truth = brute_force(query, vectors, surrogates, surrogates, 10, ~np.isin(surrogates, list(handle.tombstones)))
    assert len(set(records_of(hits)) & set(truth)) >= 9
    # FAISS itself skips them (the handle's second check would hide a selector that did not)
    _, rows, _ = gen.search(query, 10, namespace="ns", exclude=SurrogateSet(handle.tombstones))
    assert len(rows) == 10 and not set(gen.id_map.surrogate[rows].tolist()) & handle.tombstones


def test_a_search_that_scans_every_vector_asks_for_twice_k_records_worth_of_chunks(tmp_path: Path) -> None:
    """A flat set or a small HNSW namespace costs the same whatever it is asked for: its first
    round asks for as many chunks as 2k records hold on average. A large HNSW namespace widens
    its beam with every vector asked for: it starts at 2k and doubles."""
    rng = np.random.default_rng(12)
    chunks, records, d = 5, 2_000, 16
    vectors = unit_vectors(rng, chunks * records, d)
    surrogates = np.arange(chunks * records, dtype=np.int64) + 1
    ids = id_map_for(
        surrogates, records=np.repeat(np.arange(records), chunks), namespaces=["A"] * 1_000 + ["B"] * 9_000
    )
    flat = generation(tmp_path / "flat", vectors, ids)
    hnsw = generation(tmp_path / "hnsw", vectors, ids, factory="HNSW16")
    assert flat.first_fetch("A", 10) == flat.first_fetch("B", 10) == 2 * 10 * chunks
    assert hnsw.first_fetch("A", 10) == 2 * 10 * chunks  # 1,000 vectors: scored exactly
    assert hnsw.first_fetch("B", 10) == 2 * 10
    assert flat.first_fetch("nobody", 10) == 2 * 10
    # Many revisions of few records (a delta after many updates): one chunk per revision.
    revisions = IdMap.from_rows(
        surrogates[:400], [record_uuid(i // 40) for i in range(400)], [1 + i % 40 for i in range(400)], ["ns"] * 400
    )
    assert generation(tmp_path / "updates", vectors[:400], revisions).first_fetch("ns", 10) == 2 * 10


def test_records_with_many_more_chunks_than_average_still_come_back_whole(tmp_path: Path) -> None:
    """One long record holds every vector near the query: the first round, sized by the average,
    finds that record alone, and the rounds after it find the rest."""
    rng = np.random.default_rng(13)
    d = 16
    query = unit_vectors(rng, 1, d)[0]
    near = query + 0.05 * unit_vectors(rng, 400, d)
    near /= np.linalg.norm(near, axis=1, keepdims=True)
    vectors = np.concatenate([near, unit_vectors(rng, 500, d)]).astype(np.float32)
    surrogates = np.arange(len(vectors), dtype=np.int64) + 1
    record_of = np.concatenate([np.zeros(400, np.int64), np.arange(1, 501)])
    gen = generation(tmp_path, vectors, id_map_for(surrogates, records=record_of))
    assert gen.first_fetch("ns", 10) < 400
    hits = Handle.of(gen).search(query, k_records=10, namespace="ns")
    assert records_of(hits) == brute_force(query, vectors, surrogates, record_of, 10, np.ones(len(vectors), bool))
    assert records_of(hits)[0] == 0 and len(hits) == 10
