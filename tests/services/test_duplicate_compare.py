"""The duplicate check's comparisons (daemon/services/duplicates_rows.py `KindTitles`, `top_hits`;
daemon/services/duplicates_audit.py `audit_pairs`) against a brute-force reference on random unit vectors."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Sequence

import numpy as np
import pytest

from recalld.actors.duplicates.rules import reported
from recalld.services.duplicates import Checked, _exclusions, _named_never
from recalld.services.duplicates_audit import audit_pairs
from recalld.services.duplicates_rows import BATCH_BLOCK, MIN_COMPACT, KindTitles, batch_hits, comparable, top_hits

Hit = tuple[uuid.UUID, str, float]


def unit(rng: np.random.Generator, n: int, d: int = 16) -> np.ndarray:
    v = rng.standard_normal((n, d)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def filled(vectors: np.ndarray, without: int = 0) -> KindTitles:
    """A record "title i" per vector, all but the last `without` with their vector read."""
    titles = KindTitles()
    for i in range(len(vectors)):
        titles.put(uuid.UUID(int=i), f"title {i}")
    titles.use_space("space", vectors.shape[1])
    known = {f"title {i}": vectors[i] for i in range(len(vectors) - without)}
    titles.fill(known.get)
    return titles


def all_of_them(hits: Sequence[Hit], beyond: float) -> bool:
    return False  # never enough: every row above the floor is wanted


@pytest.mark.parametrize(("stored", "floor", "first"), [(50, 0.2, 64), (2000, 0.2, 8), (2000, 0.5, 64)])
def test_top_hits_finds_every_row_above_the_floor_exactly(stored: int, floor: float, first: int) -> None:
    rng = np.random.default_rng(stored)
    vectors = unit(rng, stored)
    titles = filled(vectors, without=5)
    query = unit(rng, 1)[0]
    snapshot = titles.snapshot()
    excluded = titles.excluded(uuid.UUID(int=3), "title 7")  # the record itself and its exact duplicate
    assert excluded == [3, 7]
    mask = comparable(snapshot, excluded)
    assert int(mask.sum()) == stored - 5 - 2
    hits = top_hits(snapshot, mask, query, floor, all_of_them, first=first)
    exact = {i: float(vectors[i].astype(np.float64) @ query.astype(np.float64)) for i in range(stored - 5)}
    wanted = {uuid.UUID(int=i) for i, v in exact.items() if reported(v) >= floor and i not in (3, 7)}
    got = {record_id: score for record_id, _, score in hits}
    assert wanted <= got.keys() and uuid.UUID(int=3) not in got and uuid.UUID(int=7) not in got
    assert all(abs(score - exact[record_id.int]) < 1e-9 for record_id, score in got.items())
    assert [score for _, _, score in hits] == sorted(got.values(), reverse=True)  # the highest first


@pytest.mark.parametrize(("stored", "queries"), [(0, 3), (40, 1), (2000, BATCH_BLOCK + 5)])
def test_a_batch_finds_what_each_query_alone_finds(stored: int, queries: int) -> None:
    rng = np.random.default_rng(stored + queries)
    vectors = unit(rng, stored)
    titles = filled(vectors, without=min(stored, 5))
    snapshot = titles.snapshot()
    asked = unit(rng, queries)
    excluded = [sorted({int(row) for row in rng.integers(0, max(stored, 1), 3)} & set(range(stored))) for _ in asked]
    found = batch_hits(snapshot, excluded, asked, 0.2, [all_of_them] * queries)
    assert len(found) == queries
    for query, rows, (hits, compared) in zip(asked, excluded, found, strict=True):
        mask = comparable(snapshot, rows)
        assert compared == int(mask.sum())
        alone = top_hits(snapshot, mask, query, 0.2, all_of_them)
        assert [(i, n) for i, n, _ in hits] == [(i, n) for i, n, _ in alone]
        assert all(abs(a[2] - b[2]) < 1e-9 for a, b in zip(hits, alone, strict=True))


def test_top_hits_stops_at_the_best_when_they_are_enough() -> None:
    rng = np.random.default_rng(3)
    vectors = unit(rng, 500, d=4)  # in 4 dimensions many rows are near the query
    titles = filled(vectors)
    snapshot = titles.snapshot()
    mask = comparable(snapshot, [])
    query = unit(rng, 1, d=4)[0]
    asked: list[float] = []

    def enough(hits: Sequence[Hit], beyond: float) -> bool:
        asked.append(beyond)
        return True

    hits = top_hits(snapshot, mask, query, 0.0, enough, first=10)
    above = sorted((float(v @ query) for v in vectors if float(v @ query) >= 0.0), reverse=True)
    assert len(hits) == 10 and len(above) > 10
    assert [round(s, 5) for _, _, s in hits] == [round(s, 5) for s in above[:10]]
    assert len(asked) == 1 and asked[0] >= above[10]  # the next best cosine, less than the last taken
    every = top_hits(snapshot, mask, query, 0.0, all_of_them, first=10)
    assert [s for _, _, s in every if s >= 0.0] == sorted(s for _, _, s in every if s >= 0.0)[::-1]
    assert len([s for _, _, s in every if s >= 0.0]) == len(above)  # and those just below it, to rescore


def test_retitles_and_forgets_change_what_is_compared_and_a_snapshot_does_not() -> None:
    rng = np.random.default_rng(5)
    vectors = unit(rng, 10)
    titles = filled(vectors)
    before = titles.snapshot()
    titles.remove(uuid.UUID(int=1))
    titles.put(uuid.UUID(int=2), "a new title")  # retitled: its vector is read again
    titles.put(uuid.UUID(int=3), "title 3")  # unchanged
    assert len(titles) == 9 and set(titles.waiting.values()) == {"a new title"}
    after = titles.snapshot()
    assert int(comparable(after, []).sum()) == 8
    assert int(comparable(before, []).sum()) == 10  # taken before: its rows are as they were
    titles.fill({"a new title": vectors[0]}.get)
    assert int(comparable(titles.snapshot(), []).sum()) == 9
    assert titles.excluded(None, "title 0") == [0] and titles.excluded(None, "a new title") == [10]


def test_dead_rows_are_compacted_away_and_the_live_keep_their_vectors() -> None:
    rng = np.random.default_rng(9)
    count = 2 * MIN_COMPACT + 10
    vectors = unit(rng, count)
    titles = filled(vectors)
    old = titles.snapshot()
    for i in range(0, count - 5):
        titles.remove(uuid.UUID(int=i))
    snapshot = titles.snapshot()
    # compacted once the dead outnumbered the live: the rows left are fewer than the dead since
    assert len(titles) == 5 and snapshot.count < MIN_COMPACT + 5
    query = vectors[count - 1]
    hits = top_hits(snapshot, comparable(snapshot, []), query, -1.0, all_of_them)
    assert {record_id.int for record_id, _, _ in hits} == set(range(count - 5, count))
    assert hits[0][0] == uuid.UUID(int=count - 1) and abs(hits[0][2] - 1.0) < 1e-6
    assert int(comparable(old, []).sum()) == count  # a snapshot taken before still reads its rows


def test_a_batch_item_never_names_itself_or_a_later_item_after_a_compaction_meanwhile() -> None:
    """Review finding 1a: another check compacts the shared titles (every row renumbered) while
    a batch check awaits its embedding; rows excluded before that exclude the wrong ones."""
    rng = np.random.default_rng(11)
    count = 2100
    vectors = unit(rng, count)
    titles = filled(vectors)
    items = [Checked("ns", "story", f"title {i}", uuid.UUID(int=i)) for i in (2050, 2060)]
    norms = [f"title {i}" for i in (2050, 2060)]
    stale, _ = _exclusions(items, norms, {"story": titles})
    assert stale[0] == {2050, 2060}
    for i in range(1100):  # forgets, read by another check's refresh: compacted
        titles.remove(uuid.UUID(int=i))
    rows = [titles.row_of(item.record_id) for item in items]
    assert rows[0] is not None and rows[0] < 2050  # renumbered
    snapshot = titles.snapshot()
    found = batch_hits(snapshot, [stale[0]], vectors[[2050]], -1.0, [all_of_them], [_named_never(items, 0)])
    named = {record_id for record_id, _, _ in found[0][0]}
    assert items[0].record_id not in named and items[1].record_id not in named
    # taken in the same step as the snapshot, the rows are the right ones
    fresh, ofs = _exclusions(items, norms, {"story": titles})
    assert fresh[0] == set(rows) and ofs == [count - 1100 - 2, count - 1100 - 1]
    (hits, compared), (_, later) = batch_hits(
        snapshot, fresh, vectors[[2050, 2060]], -1.0, [all_of_them] * 2, [_named_never(items, 0), set()]
    )
    assert compared == ofs[0] and later == ofs[1] and len(hits) == ofs[0]


def test_a_snapshot_names_the_space_of_its_vectors() -> None:
    """Review finding 1c: a check compares only with a snapshot of its own space."""
    titles = filled(unit(np.random.default_rng(4), 5))
    assert titles.snapshot().space == "space"
    titles.use_space("another space", 8)
    assert titles.snapshot().space == "another space"


def test_a_switch_of_space_reads_every_vector_again() -> None:
    titles = filled(unit(np.random.default_rng(2), 20))
    titles.use_space("space", 16)
    assert not titles.waiting
    titles.use_space("another space", 8)
    assert len(titles.waiting) == 20 and not comparable(titles.snapshot(), []).any()


def test_the_audit_finds_each_pair_once_as_brute_force_does() -> None:
    rng = np.random.default_rng(7)
    base = unit(rng, 40)
    vectors = np.concatenate([base, base[:10] + 0.05 * unit(rng, 10)])  # ten near twins
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    threshold = 0.9
    expected = {
        (i, j)
        for i, j in itertools.combinations(range(len(vectors)), 2)
        if reported(float(vectors[i] @ vectors[j])) >= threshold
    }
    kind_rows = np.arange(len(vectors), dtype=np.int64)
    found: set[tuple[int, int]] = set()
    for start in range(0, len(vectors), 7):  # pages of 7 records
        page = np.arange(start, min(start + 7, len(vectors)), dtype=np.int64)
        for i, j, _ in audit_pairs(vectors.astype(np.float32), page, page, kind_rows, threshold):
            found.add((int(page[i]), j))
    assert found == expected and len(expected) >= 10


@pytest.mark.parametrize(("records", "page"), [(3000, 1500), (2500, 1024 + 7)])
def test_the_audit_misses_no_pair_of_thousands_of_random_vectors(records: int, page: int) -> None:
    rng = np.random.default_rng(records)
    dimension, threshold = 8, 0.95  # few dimensions: thousands of pairs reach the threshold
    vectors = unit(rng, 2 * records, dimension)
    kind_rows = np.sort(rng.choice(2 * records, records, replace=False)).astype(np.int64)  # the kind's rows
    kind = vectors[kind_rows].astype(np.float64)
    products = kind @ kind.T
    expected = {(i, j) for i, j in zip(*np.nonzero(products >= threshold - 1e-3), strict=True) if i < j}
    expected = {(i, j) for i, j in expected if reported(float(products[i, j])) >= threshold}
    found: dict[tuple[int, int], float] = {}
    for start in range(0, records, page):
        at = np.arange(start, min(start + page, records), dtype=np.int64)
        for i, j, score in audit_pairs(vectors, kind_rows[at], at, kind_rows, threshold):
            assert (int(at[i]), j) not in found  # each pair once
            found[(int(at[i]), j)] = score
    assert found.keys() == expected and len(expected) > 100
    assert all(score == reported(float(products[i, j])) for (i, j), score in found.items())
