"""The audit's parts (`recalld dupes`, `DuplicateChecker.audit`): the title vectors of a space
this daemon has read, kept as one matrix, and the exact comparison of a page of records with
every record of its kind."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from recalld.actors.duplicates.rules import reported
from recalld.services.duplicates_rows import RESCORE_MARGIN


class TitleMatrix:
    """The title vectors of one space this daemon has read, by normalised title.

    Rows are only ever appended, and a full matrix is replaced by a larger copy, never resized
    in place: a comparison running in a worker thread reads the rows it was given while the
    event loop appends others."""

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        self.rows: dict[str, int] = {}
        self.matrix: npt.NDArray[np.float32] = np.empty((1024, dimension), dtype=np.float32)

    def add(self, items: Sequence[tuple[str, npt.NDArray[np.float32]]]) -> None:
        fresh = [(norm, vector) for norm, vector in items if norm not in self.rows]
        count = len(self.rows)
        if count + len(fresh) > len(self.matrix):
            grown = np.empty((max(2 * len(self.matrix), count + len(fresh)), self.dimension), dtype=np.float32)
            grown[:count] = self.matrix[:count]
            self.matrix = grown
        for offset, (norm, vector) in enumerate(fresh):
            self.matrix[count + offset] = vector
            self.rows[norm] = count + offset


AUDIT_BLOCK = 256
"""Page records compared at a time in an audit: a block of scores is AUDIT_BLOCK x (records of
the kind) floats, 100 MB at 100,000 records."""


def audit_pairs(
    vectors: npt.NDArray[np.float32],
    page_rows: npt.NDArray[np.int64],
    page_at: npt.NDArray[np.int64],
    kind_rows: npt.NDArray[np.int64],
    threshold: float,
) -> list[tuple[int, int, float]]:
    """Blocking (a worker thread): (page index, kind index, cosine) of every pair whose cosine
    reaches the threshold, each pair once: a page record (its vector at `page_rows[i]`, at
    position `page_at[i]` among its kind's records `kind_rows`, both in id order) is paired only
    with the kind's records after it."""
    kind_vectors = vectors[kind_rows]
    found: list[tuple[int, int, float]] = []
    for start in range(0, len(page_rows), AUDIT_BLOCK):
        block = vectors[page_rows[start : start + AUDIT_BLOCK]]
        first = int(page_at[start]) + 1  # the block's records are in id order: none pairs below this
        scores = block @ kind_vectors[first:].T
        for i, j in np.argwhere(scores >= threshold - RESCORE_MARGIN):
            row, other = start + int(i), first + int(j)
            if other <= int(page_at[row]):
                continue
            exact = float(block[i].astype(np.float64) @ kind_vectors[other].astype(np.float64))
            if reported(exact) >= threshold:
                found.append((row, other, reported(exact)))
    return found
