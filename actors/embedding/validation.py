"""Checks every batch of vectors before anyone may use it: a bad vector is an error, never stored."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from recalld.actors.embedding.errors import EmbeddingError, Reason

Vectors = npt.NDArray[np.float32]

# float32 inference plus a provider's own rounding (JSON with ~7 digits) stays far inside this;
# a vector that is off by more was not normalised by the model.
NORM_TOLERANCE = 1e-3
# Below this a vector has no direction: cosine against it is meaningless.
ZERO_NORM = 1e-6


def as_matrix(vectors: Any, *, expected_count: int) -> Vectors:
    """Turn a provider's answer into an (n, d) float32 matrix or fail with a reason code.

    Ragged rows (different lengths) are a dimension mismatch; rows that are not numbers are
    `provider_response_invalid`.
    """
    if isinstance(vectors, np.ndarray):
        matrix = vectors
    else:
        rows = list(vectors)
        lengths = {len(row) for row in rows}
        if len(lengths) > 1:
            raise EmbeddingError(
                Reason.EMBEDDING_DIMENSION_MISMATCH,
                f"vectors of different lengths in one batch: {sorted(lengths)}",
            )
        try:
            matrix = np.asarray(rows, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise EmbeddingError(Reason.PROVIDER_RESPONSE_INVALID, f"vectors are not numbers: {exc}") from exc
        if matrix.size == 0:
            matrix = matrix.reshape(len(rows), 0)
    if matrix.ndim != 2:
        if matrix.ndim == 1 and matrix.shape[0] == 0:
            matrix = matrix.reshape(0, 0)
        else:
            raise EmbeddingError(
                Reason.PROVIDER_RESPONSE_INVALID, f"expected a 2-d batch of vectors, got shape {matrix.shape}"
            )
    if matrix.shape[0] != expected_count:
        raise EmbeddingError(
            Reason.EMBEDDING_COUNT_MISMATCH,
            f"provider returned {matrix.shape[0]} vectors for {expected_count} inputs",
        )
    with np.errstate(over="ignore"):
        # Overflow to inf is exactly what the finiteness check below reports.
        return np.ascontiguousarray(matrix, dtype=np.float32)


def row_errors(vectors: Vectors, *, normalized: bool, tolerance: float = NORM_TOLERANCE) -> list[EmbeddingError | None]:
    """Per-row verdicts (None = good) for finiteness, zero vectors and, if asked, unit norm.

    Per row so that one bad vector fails only the caller whose input it was.
    """
    finite = np.asarray(np.isfinite(vectors).all(axis=1), dtype=np.bool_)
    with np.errstate(over="ignore", invalid="ignore"):
        norms = np.linalg.norm(vectors.astype(np.float64), axis=1)
    out: list[EmbeddingError | None] = []
    for i in range(vectors.shape[0]):
        if not finite[i]:
            out.append(EmbeddingError(Reason.EMBEDDING_NOT_FINITE, f"vector {i} has NaN or Inf components"))
        elif norms[i] < ZERO_NORM:
            out.append(EmbeddingError(Reason.EMBEDDING_ZERO_VECTOR, f"vector {i} is all zeros"))
        elif normalized and abs(norms[i] - 1.0) > tolerance:
            out.append(
                EmbeddingError(
                    Reason.EMBEDDING_NOT_NORMALIZED,
                    f"vector {i} has norm {norms[i]:.6f}, the space expects 1 ± {tolerance}",
                )
            )
        else:
            out.append(None)
    return out


def validate_batch(
    vectors: Any,
    *,
    expected_count: int,
    dimension: int | None,
    normalized: bool,
    tolerance: float = NORM_TOLERANCE,
) -> Vectors:
    """Check a whole batch: count, dimension, then every row; raise the first failure.

    `dimension=None` (the start-up probe) accepts any non-zero dimension.
    Returns the batch as a C-contiguous float32 matrix.
    """
    matrix = as_matrix(vectors, expected_count=expected_count)
    check_dimension(matrix, dimension)
    for error in row_errors(matrix, normalized=normalized, tolerance=tolerance):
        if error is not None:
            raise error
    return matrix


def check_dimension(matrix: Vectors, dimension: int | None) -> None:
    """Fail with `embedding_dimension_mismatch` unless every row has `dimension` components."""
    width = matrix.shape[1]
    if width == 0 and matrix.shape[0] > 0:
        raise EmbeddingError(Reason.EMBEDDING_DIMENSION_MISMATCH, "provider returned empty vectors")
    if dimension is not None and matrix.shape[0] > 0 and width != dimension:
        raise EmbeddingError(
            Reason.EMBEDDING_DIMENSION_MISMATCH,
            f"provider returned {width}-d vectors, the space is {dimension}-d",
        )


def is_normalized(matrix: Vectors, *, tolerance: float = NORM_TOLERANCE) -> bool:
    """True when every row has unit L2 norm within `tolerance` (what the probe learns)."""
    norms = np.linalg.norm(matrix.astype(np.float64), axis=1)
    return bool(np.all(np.abs(norms - 1.0) <= tolerance))
