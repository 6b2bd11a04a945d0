from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from recalld.actors.embedding.errors import EmbeddingError, Reason
from recalld.actors.embedding.validation import is_normalized, row_errors, validate_batch


def unit(d: int, axis: int = 0) -> list[float]:
    v = [0.0] * d
    v[axis] = 1.0
    return v


GOOD = [unit(4, 0), unit(4, 1)]

CASES: list[tuple[str, Any, int, int | None, bool, Reason | None]] = [
    # name, vectors, expected_count, dimension, normalized, expected reason (None = accepted)
    ("good normalised batch", GOOD, 2, 4, True, None),
    ("good raw batch", [[3.0, 4.0, 0.0, 0.0]], 1, 4, False, None),
    ("probe learns any dimension", [unit(7)], 1, None, True, None),
    ("numpy input", np.eye(3, dtype=np.float32), 3, 3, True, None),
    ("empty batch for no inputs", [], 0, 4, True, None),
    ("short batch", [unit(4)], 2, 4, True, Reason.EMBEDDING_COUNT_MISMATCH),
    ("long batch", [unit(4)] * 3, 2, 4, True, Reason.EMBEDDING_COUNT_MISMATCH),
    ("no vectors at all", [], 1, 4, True, Reason.EMBEDDING_COUNT_MISMATCH),
    ("wrong dimension", [unit(5)], 1, 4, True, Reason.EMBEDDING_DIMENSION_MISMATCH),
    ("ragged rows", [unit(4), unit(3)], 2, 4, True, Reason.EMBEDDING_DIMENSION_MISMATCH),
    ("empty vector", [[]], 1, 4, True, Reason.EMBEDDING_DIMENSION_MISMATCH),
    ("empty vector in the probe", [[]], 1, None, True, Reason.EMBEDDING_DIMENSION_MISMATCH),
    ("NaN", [[math.nan, 1.0, 0.0, 0.0]], 1, 4, True, Reason.EMBEDDING_NOT_FINITE),
    ("Inf", [[math.inf, 0.0, 0.0, 0.0]], 1, 4, False, Reason.EMBEDDING_NOT_FINITE),
    ("overflows float32", [[1e300, 0.0, 0.0, 0.0]], 1, 4, False, Reason.EMBEDDING_NOT_FINITE),
    ("zero vector", [[0.0] * 4], 1, 4, False, Reason.EMBEDDING_ZERO_VECTOR),
    ("not normalised", [[0.5, 0.5, 0.0, 0.0]], 1, 4, True, Reason.EMBEDDING_NOT_NORMALIZED),
    ("within tolerance", [[1.0005, 0.0, 0.0, 0.0]], 1, 4, True, None),
    ("just outside tolerance", [[1.002, 0.0, 0.0, 0.0]], 1, 4, True, Reason.EMBEDDING_NOT_NORMALIZED),
    ("strings are not numbers", [["a", "b", "c", "d"]], 1, 4, True, Reason.PROVIDER_RESPONSE_INVALID),
    ("not a matrix", np.zeros((1, 2, 2)), 1, 2, True, Reason.PROVIDER_RESPONSE_INVALID),
]


@pytest.mark.parametrize(
    ("vectors", "count", "dimension", "normalized", "reason"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_validate_batch(
    vectors: Any, count: int, dimension: int | None, normalized: bool, reason: Reason | None
) -> None:
    if reason is None:
        matrix = validate_batch(vectors, expected_count=count, dimension=dimension, normalized=normalized)
        assert matrix.dtype == np.float32 and matrix.flags.c_contiguous
        assert matrix.shape[0] == count
    else:
        with pytest.raises(EmbeddingError) as caught:
            validate_batch(vectors, expected_count=count, dimension=dimension, normalized=normalized)
        assert caught.value.reason is reason
        assert caught.value.provider_fault


def test_row_errors_point_at_the_bad_rows_only() -> None:
    matrix = np.array([unit(3, 0), [math.nan, 0, 0], unit(3, 2), [0, 0, 0]], dtype=np.float32)
    verdicts = row_errors(matrix, normalized=True)
    assert verdicts[0] is None and verdicts[2] is None
    assert verdicts[1] is not None and verdicts[1].reason is Reason.EMBEDDING_NOT_FINITE
    assert verdicts[3] is not None and verdicts[3].reason is Reason.EMBEDDING_ZERO_VECTOR


def test_is_normalized_is_what_the_probe_learns() -> None:
    assert is_normalized(np.eye(2, dtype=np.float32))
    assert not is_normalized(np.array([[2.0, 0.0]], dtype=np.float32))


def test_reason_codes_are_stable_snake_case() -> None:
    for reason in Reason:
        assert reason.value == reason.name.lower()
    assert not EmbeddingError(Reason.CIRCUIT_OPEN, "x").provider_fault
    assert not EmbeddingError(Reason.DEADLINE_EXCEEDED, "x").provider_fault
    assert EmbeddingError(Reason.PROVIDER_TIMEOUT, "x").provider_fault
