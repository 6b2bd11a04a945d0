"""Synthetic stored vectors for the benches that cannot embed their data (a million passages would
take this machine most of a day): unit vectors drawn near a RANK-dimensional subspace,
`normalize(A z + NOISE e)`, so the data has the low intrinsic dimension real text embeddings have,
not the worst case of uniform directions."""

from __future__ import annotations

import numpy as np

RANK = 32
NOISE = 0.35


def synthetic(rng: np.random.Generator, basis: np.ndarray, n: int) -> np.ndarray:
    """`n` unit vectors near the subspace `basis` spans (see the module's docstring)."""
    x: np.ndarray = rng.standard_normal((n, RANK)).astype(np.float32) @ basis
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    x += NOISE * rng.standard_normal(x.shape).astype(np.float32) / np.sqrt(x.shape[1])
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype("<f4")
