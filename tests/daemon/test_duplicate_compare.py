"""The duplicate check's comparisons (daemon/duplicates.py `compare`, `audit_pairs`,
`TitleMatrix`) against a brute-force reference on random unit vectors."""

from __future__ import annotations

import itertools
import uuid

import numpy as np
import pytest

from actors.duplicates import reported
from daemon.duplicates import TitleMatrix, audit_pairs, compare


def unit(rng: np.random.Generator, n: int, d: int = 16) -> np.ndarray:
    v = rng.standard_normal((n, d)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.mark.parametrize(("stored", "candidates"), [(50, 10), (50, 50), (2000, 1900)])
def test_compare_scores_every_candidate_with_a_vector_exactly(stored: int, candidates: int) -> None:
    rng = np.random.default_rng(stored + candidates)
    matrix = TitleMatrix(16)
    vectors = unit(rng, stored)
    matrix.add([(f"title {i}", vectors[i]) for i in range(stored)])
    query = unit(rng, 1)[0]
    chosen = rng.choice(stored, size=candidates, replace=False)
    asked = [(uuid.UUID(int=int(i)), f"title {i}") for i in chosen] + [(uuid.uuid4(), "no vector yet")]
    threshold = 0.2
    scored, compared = compare(matrix.matrix, len(matrix.rows), matrix.rows, asked, query, threshold)
    assert compared == candidates
    expected = {uuid.UUID(int=int(i)): float(vectors[i].astype(np.float64) @ query.astype(np.float64)) for i in chosen}
    near = {record_id: score for record_id, _, score in scored}
    # everything that warns is there, with its exact score (others near the threshold may be too)
    assert {k for k, v in expected.items() if reported(v) >= threshold} <= near.keys()
    assert all(abs(near[k] - expected[k]) < 1e-9 for k in near)


def test_compare_leaves_rows_appended_after_the_call_for_the_next_check() -> None:
    rng = np.random.default_rng(1)
    matrix = TitleMatrix(16)
    matrix.add([("a", unit(rng, 1)[0])])
    array, count = matrix.matrix, len(matrix.rows)
    matrix.add([(f"t{i}", v) for i, v in enumerate(unit(rng, 2000))])  # grows into another array
    _, compared = compare(array, count, matrix.rows, [(uuid.uuid4(), "a"), (uuid.uuid4(), "t5")], unit(rng, 1)[0], 0.0)
    assert compared == 1


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
