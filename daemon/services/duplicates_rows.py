"""The live titles of one namespace and kind as one matrix, so that a duplicate check is a matrix
product and a few numpy calls whatever the number of titles (with 100,000 titles the
per-title Python work, not the product, cost 675 ms a check; docs/DUPLICATES.md, "Cost per check").

No I/O: `daemon/services/duplicates_live.py` keeps a `KindTitles` in step with PostgreSQL by change marks and
fills its vectors; `daemon/services/duplicates.py` compares with a `Snapshot` of it in a worker thread.

Rows are only ever appended: a record retitled or forgotten leaves a dead row behind, and the
matrix is compacted (into new arrays) when dead rows outnumber the live. A row's vector is
written once, while the row is not yet comparable, so a snapshot's rows never change under the
worker thread that reads them, while the event loop appends, kills or fills others.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

import faiss
import numpy as np
import numpy.typing as npt

DEAD, WAITING, READY = 0, 1, 2
"""A row's state: its record is gone (or has another title now); live, its vector not read yet;
live and comparable."""

MIN_CAPACITY = 1024
MIN_COMPACT = 1024
"""Dead rows below this are never compacted away: a few are cheaper to skip than to copy."""

RESCORE_MARGIN = 0.01
"""Scores within this of a cut are scored again in float64, so that a score equal to the
threshold compares equal whatever order BLAS summed the float32 products in."""


@dataclass(frozen=True)
class Snapshot:
    """What one comparison reads, taken on the event loop: the arrays as they are, the states of
    their first `count` rows copied (rows at and after it are left for the next check)."""

    vectors: npt.NDArray[np.float32]
    ready: npt.NDArray[np.bool_]
    ids: list[uuid.UUID]
    norms: list[str]
    count: int
    space: str | None = None
    """The space its vectors are in: another check may switch the matrix to its own space
    (`use_space`) while a check awaits, and a query is compared only with rows of its space."""


class KindTitles:
    """The live records of one namespace and kind: id, normalised title and, once read, the title
    vector in `space` (None: not known yet), one row each."""

    def __init__(self) -> None:
        self.space: str | None = None
        self.dimension = 0
        self._vectors: npt.NDArray[np.float32] = np.empty((0, 0), dtype=np.float32)
        self._state: npt.NDArray[np.int8] = np.zeros(MIN_CAPACITY, dtype=np.int8)
        self._ids: list[uuid.UUID] = []
        self._norms: list[str] = []
        self._row_of: dict[uuid.UUID, int] = {}
        self._rows_of_norm: dict[str, set[int]] = {}
        self._waiting: dict[int, str] = {}
        """Live rows whose vector is not read yet, with their normalised titles."""

    def __len__(self) -> int:
        """Live records, with a vector or not."""
        return len(self._row_of)

    @property
    def waiting(self) -> dict[int, str]:
        return self._waiting

    def members(self) -> list[tuple[uuid.UUID, str]]:
        """(id, normalised title) of every live record."""
        return [(record_id, self._norms[row]) for record_id, row in self._row_of.items()]

    def put(self, record_id: uuid.UUID, norm: str) -> None:
        """The record is live with this title (a new row unless it had it already)."""
        row = self._row_of.get(record_id)
        if row is not None:
            if self._norms[row] == norm:
                return
            self.remove(record_id)
        row = len(self._ids)
        if row == len(self._state):
            self._grow()
        self._ids.append(record_id)
        self._norms.append(norm)
        self._row_of[record_id] = row
        self._rows_of_norm.setdefault(norm, set()).add(row)
        self._state[row] = WAITING
        self._waiting[row] = norm

    def remove(self, record_id: uuid.UUID) -> None:
        """The record is forgotten or left the kind (nothing when it was not here)."""
        row = self._row_of.pop(record_id, None)
        if row is None:
            return
        self._state[row] = DEAD
        self._waiting.pop(row, None)
        same = self._rows_of_norm[self._norms[row]]
        same.discard(row)
        if not same:
            del self._rows_of_norm[self._norms[row]]
        dead = len(self._ids) - len(self._row_of)
        if dead >= MIN_COMPACT and dead > len(self._row_of):
            self._compact()

    def use_space(self, space: str, dimension: int) -> None:
        """Vectors of `space` from now on: on a change of space (a model switch) every live row
        waits for its vector in the new one."""
        if space == self.space:
            return
        self.space, self.dimension = space, dimension
        self._vectors = np.empty((len(self._state), dimension), dtype=np.float32)
        for row in self._row_of.values():
            self._state[row] = WAITING
            self._waiting[row] = self._norms[row]

    def fill(self, found: Callable[[str], npt.NDArray[np.float32] | None]) -> None:
        """Write the vectors `found` knows (by normalised title) into the waiting rows; rows it
        does not know keep waiting."""
        if self.space is None:
            raise RuntimeError("fill before use_space")
        for row, norm in list(self._waiting.items()):
            vector = found(norm)
            if vector is not None:
                self._vectors[row] = vector
                self._state[row] = READY
                del self._waiting[row]

    def excluded(self, record_id: uuid.UUID | None, norm: str) -> list[int]:
        """The live rows a check of `norm` as record `record_id` does not compare with: the
        record itself and its exact duplicates (the same normalised title)."""
        rows = set(self._rows_of_norm.get(norm, ()))
        own = self._row_of.get(record_id) if record_id is not None else None
        if own is not None:
            rows.add(own)
        return sorted(rows)

    def row_of(self, record_id: uuid.UUID) -> int | None:
        """The live record's row (None: not live here)."""
        return self._row_of.get(record_id)

    def snapshot(self) -> Snapshot:
        count = len(self._ids)
        return Snapshot(self._vectors, self._state[:count] == READY, self._ids, self._norms, count, self.space)

    def _grow(self) -> None:
        capacity = 2 * len(self._state)
        state = np.zeros(capacity, dtype=np.int8)
        state[: len(self._state)] = self._state
        self._state = state
        if self.space is not None:
            # a new array: a snapshot taken before keeps reading the old one
            vectors = np.empty((capacity, self.dimension), dtype=np.float32)
            vectors[: len(self._ids)] = self._vectors[: len(self._ids)]
            self._vectors = vectors

    def _compact(self) -> None:
        """Drop the dead rows, into new arrays and lists (snapshots keep the old ones)."""
        keep = sorted(self._row_of.values())
        capacity = max(MIN_CAPACITY, 2 * len(keep))
        state = np.zeros(capacity, dtype=np.int8)
        state[: len(keep)] = self._state[keep]
        if self.space is not None:
            vectors = np.empty((capacity, self.dimension), dtype=np.float32)
            vectors[: len(keep)] = self._vectors[keep]
            self._vectors = vectors
        self._state = state
        self._ids = [self._ids[row] for row in keep]
        self._norms = [self._norms[row] for row in keep]
        self._row_of = {record_id: row for row, record_id in enumerate(self._ids)}
        self._rows_of_norm = {}
        for row, norm in enumerate(self._norms):
            self._rows_of_norm.setdefault(norm, set()).add(row)
        self._waiting = {row: self._norms[row] for row in range(len(keep)) if state[row] == WAITING}


def comparable(snapshot: Snapshot, excluded: Iterable[int]) -> npt.NDArray[np.bool_]:
    """The snapshot's rows a check compares with: those with a vector, less `excluded`."""
    mask = snapshot.ready.copy()
    rows = [row for row in excluded if row < snapshot.count]
    mask[rows] = False
    return mask


def inner_products(vectors: npt.NDArray[np.float32], query: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """`vectors @ query` by FAISS's SIMD loop: one thread, and on a loaded 2-core machine two to
    three times as fast as numpy's BLAS matrix-vector product (which reads the same 2 KB a row;
    13-26 ms against 52-75 ms for 100,000 rows of 512)."""
    rows = np.ascontiguousarray(vectors, dtype=np.float32)
    wanted = np.ascontiguousarray(query, dtype=np.float32)
    out = np.empty(len(rows), dtype=np.float32)
    faiss.fvec_inner_products_ny(  # type: ignore[attr-defined]  # in the module, not in its stubs
        faiss.swig_ptr(out), faiss.swig_ptr(wanted), faiss.swig_ptr(rows), rows.shape[1], len(rows)
    )
    return out


def top_hits(
    snapshot: Snapshot,
    mask: npt.NDArray[np.bool_],
    query: npt.NDArray[np.float32],
    floor: float,
    enough: Callable[[list[tuple[uuid.UUID, str, float]], float], bool],
    first: int = 64,
) -> list[tuple[uuid.UUID, str, float]]:
    """Blocking (a worker thread): (id, normalised title, exact cosine) of the compared rows whose
    cosine reaches `floor`, the highest first, as many as `enough` needs.

    One matrix product over the rows; argpartition takes the best `first` of those above the
    floor, and more (all of them, sorted) only when `enough(hits so far, the cosine of the next
    one)` says the hits so far may not hold all that the stages let through. Cosines are
    recomputed in float64 for the hits returned."""
    if not snapshot.count:
        return []
    scores = inner_products(snapshot.vectors[: snapshot.count], query)
    return hits_of(snapshot, mask, scores, query, floor, enough, first)


def hits_of(
    snapshot: Snapshot,
    mask: npt.NDArray[np.bool_],
    scores: npt.NDArray[np.float32],
    query: npt.NDArray[np.float32],
    floor: float,
    enough: Callable[[list[tuple[uuid.UUID, str, float]], float], bool],
    first: int = 64,
) -> list[tuple[uuid.UUID, str, float]]:
    """`top_hits` with the query's float32 `scores` against the snapshot's rows already made."""
    above = np.flatnonzero(mask & (scores >= floor - RESCORE_MARGIN))
    if not len(above):
        return []
    if len(above) > first:
        best = above[np.argpartition(-scores[above], first - 1)[:first]]
        rest = True
    else:
        best, rest = above, False
    query64 = query.astype(np.float64)

    def exact(rows: npt.NDArray[np.intp]) -> list[tuple[uuid.UUID, str, float]]:
        ordered = rows[np.argsort(-scores[rows], kind="stable")]
        cosines = snapshot.vectors[ordered].astype(np.float64) @ query64
        return [
            (snapshot.ids[row], snapshot.norms[row], float(cosine))
            for row, cosine in zip(ordered.tolist(), cosines.tolist(), strict=True)
        ]

    hits = exact(best)
    if rest:
        beyond = float(np.max(scores[np.setdiff1d(above, best, assume_unique=True)]))
        if not enough(hits, beyond + RESCORE_MARGIN):
            hits = exact(above)
    return hits


BATCH_BLOCK = 64
"""Queries of a batch scored at a time: a block of scores is BATCH_BLOCK x (rows) floats, 25 MB
at 100,000 titles."""


def batch_hits(
    snapshot: Snapshot,
    excluded: Sequence[Iterable[int]],
    queries: npt.NDArray[np.float32],
    floor: float,
    enough: Sequence[Callable[[list[tuple[uuid.UUID, str, float]], float], bool]],
    never: Sequence[Collection[uuid.UUID]] = (),
) -> list[tuple[list[tuple[uuid.UUID, str, float]], int]]:
    """Blocking (a worker thread): `top_hits` for each of the `queries` (row i compared with the
    snapshot's ready rows less `excluded[i]`, its stages judged by `enough[i]`), with how many
    rows each compared. The scores of a block of queries are one matrix product (BLAS), not one
    pass over the rows per query: the matrix is read once a block.

    `never[i]`: ids query i must not name whatever rows `excluded[i]` holds (the item itself, the
    batch's later items): row numbers taken from another state of the titles (renumbered by a
    compaction, a record moved to a new row by a retitle) would exclude the wrong rows."""
    count = snapshot.count
    found: list[tuple[list[tuple[uuid.UUID, str, float]], int]] = []
    rows = snapshot.vectors[:count]
    for start in range(0, len(queries), BATCH_BLOCK):
        block = queries[start : start + BATCH_BLOCK]
        if not count:
            scores = np.empty((len(block), 0), dtype=np.float32)
        elif len(block) == 1:  # a check alone: FAISS's loop beats BLAS's matrix-vector product
            scores = inner_products(rows, block[0])[None, :]
        else:
            scores = block @ rows.T
        for offset, query in enumerate(block):
            at = start + offset
            mask = comparable(snapshot, excluded[at])
            hits = hits_of(snapshot, mask, scores[offset], query, floor, enough[at]) if count else []
            if at < len(never) and never[at]:
                hits = [hit for hit in hits if hit[0] not in never[at]]
            found.append((hits, int(np.count_nonzero(mask))))
    return found
