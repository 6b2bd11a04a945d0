"""Copy-on-write search handles over a generation, a delta and a tombstone set.

A `Handle` is immutable: a base `Generation` (or none), small exact delta indexes for vectors
added since the base was built, and the surrogates that must never be returned. Changes make a new
handle that shares the unchanged parts, so a search never runs on an index that is being
modified. `HandleCell` holds the current handle; a search leases it, and a replaced handle is
closed only when its last lease ends.
"""

from __future__ import annotations

import functools
import math
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import anyio.lowlevel
import msgspec
import numpy as np
import numpy.typing as npt

from recalld.actors.embedding.validation import NORM_TOLERANCE, ZERO_NORM
from recalld.actors.index.generation import Generation
from recalld.actors.index.idmap import IdMap, RecordIds
from recalld.actors.index.vectors import SurrogateSet, Vectors, VectorSet, new_flat_index
from recalld.actors.ports.embedding import VectorSpace

Accept = Callable[[uuid.UUID, int], bool]
"""`accept(record_id, revision)`: False drops the candidate (stale revision, deleted, not allowed)."""


class HandleClosed(RuntimeError):
    """A closed handle (or cell) was used: a lease was not held, or was held too long."""


class Hit(msgspec.Struct, frozen=True):
    """One record found by the vector route: its best chunk's surrogate and score. A frozen
    msgspec struct: made 20-60 times a search, it builds ten times faster than a frozen
    dataclass (0.1 against 1 us)."""

    record_id: uuid.UUID
    revision: int
    surrogate: int
    score: float


@dataclass(frozen=True, slots=True)
class HandleStats:
    generation_id: str | None
    space_id: str
    base_count: int
    delta_count: int
    tombstones: int

    @property
    def delta_share(self) -> float:
        """Delta size relative to the base (what decides when to build a new generation)."""
        return self.delta_count / max(self.base_count, 1)


DELTA_MERGE_FACTOR = 4
"""A delta part is merged into the one before it unless that one is this many times larger:
parts stay few (log4 of the delta's size) and every vector is copied O(log n) times, so adding a
handful of vectors never copies the whole delta."""

_ROWS_PER_BLOCK = 256
"""Fetched rows are turned into Python values this many at a time (see `_search`): a search for
30 records of one chunk each needs one block; on the man pages (19 chunks a page) two or three."""


class Delta(VectorSet):
    """Vectors added after the base was built: one exact flat index, never modified once built."""

    __slots__ = ("_vectors",)

    def __init__(self, vectors: Vectors, id_map: IdMap) -> None:
        order = np.argsort(id_map.surrogate, kind="stable")
        self._vectors = np.ascontiguousarray(vectors[order])
        self._vectors.setflags(write=False)
        sorted_map = id_map.take(order)
        index = new_flat_index(vectors.shape[1])
        if len(sorted_map):
            index.add_with_ids(self._vectors, sorted_map.surrogate)
        super().__init__(index, sorted_map, family="flat", ef_search=None)

    @property
    def vectors(self) -> Vectors:
        return self._vectors

    def merged(self, other: Delta) -> Delta:
        return Delta(np.concatenate([self._vectors, other._vectors]), self._id_map.concat(other._id_map))

    def restricted(self, keep: npt.NDArray[np.bool_]) -> Delta:
        rows = np.flatnonzero(keep)
        return Delta(self._vectors[rows], self._id_map.take(rows))


class Handle:
    """An immutable view for searching: base generation + delta + tombstones, one vector space.

    Safe to search from several threads at once. `close()` drops its references to the FAISS
    indexes (they are freed once no other handle shares them and no running search holds them);
    a search started after `close()` raises `HandleClosed`.
    """

    __slots__ = (
        "_active",
        "_base",
        "_closed",
        "_deltas",
        "_lock",
        "_seen",
        "_space",
        "_space_id",
        "_tomb_set",
        "_tombstoned",
        "_tombstones",
    )

    def __init__(
        self,
        space: VectorSpace,
        *,
        base: Generation | None = None,
        deltas: tuple[Delta, ...] = (),
        tombstones: frozenset[int] = frozenset(),
    ) -> None:
        # The key hashes the space's JSON: computed once, not on every recall's check.
        self._space_id = space.key
        if base is not None and base.space_id != self._space_id:
            raise ValueError(f"base generation is in space {base.space_id}, the handle in {self._space_id}")
        if any(delta.index.d != space.dimension for delta in deltas):
            raise ValueError(f"a delta has another dimension than the space's {space.dimension}")
        self._space = space
        self._base = base
        self._deltas = tuple(delta for delta in deltas if delta.count)
        self._tombstones = frozenset(int(s) for s in tombstones)
        self._tomb_set = SurrogateSet(self._tombstones) if self._tombstones else None
        self._tombstoned: int | None = None  # tombstoned_count(), once asked
        # apart from the parts `close()` drops: a count may ask a handle closed meanwhile (`count_waiting`)
        base_mark = base.source_watermark if base is not None else 0
        self._seen = max([base_mark, *(int(delta.id_map.surrogate[-1]) for delta in self._deltas)])
        self._lock = threading.Lock()
        self._active = 0
        self._closed = False

    @classmethod
    def of(cls, generation: Generation) -> Handle:
        """A handle serving `generation` alone."""
        return cls(generation.manifest.space, base=generation)

    @classmethod
    def empty(cls, space: VectorSpace) -> Handle:
        """A handle of `space` with nothing in it yet (deltas can be added)."""
        return cls(space)

    # --- identity and stats ---

    @property
    def space(self) -> VectorSpace:
        return self._space

    @property
    def space_id(self) -> str:
        return self._space_id

    @property
    def base(self) -> Generation | None:
        return self._base

    @property
    def generation_id(self) -> str | None:
        return self._base.generation_id if self._base is not None else None

    @property
    def deltas(self) -> tuple[Delta, ...]:
        """The delta's parts, oldest first (a few exact flat indexes)."""
        return self._deltas

    @property
    def tombstones(self) -> frozenset[int]:
        return self._tombstones

    @property
    def count(self) -> int:
        """Vectors held (base + delta), tombstoned ones included."""
        return self._part_count(self._base) + self.delta_count

    @property
    def delta_count(self) -> int:
        """Vectors in the delta."""
        return sum(delta.count for delta in self._deltas)

    def tombstoned_count(self) -> int:
        """Vectors this handle holds (base or delta) that it must never return: chunks retired
        since they were loaded, by forgets and updates. Tombstones of chunks it does not hold
        (retired before its base was built) do not count. Counted once per handle: the builder
        asks on every step of its loop, and a handle never changes."""
        if self._tombstoned is None:
            dead = np.fromiter(self._tombstones, dtype=np.int64, count=len(self._tombstones))
            self._tombstoned = sum(int(np.count_nonzero(part.rows_of(dead) >= 0)) for part in self._parts())
        return self._tombstoned

    @property
    def seen(self) -> int:
        """The highest surrogate this handle has taken in: the base's source watermark or the
        delta's largest surrogate (0 for an empty handle). Vectors above it are not here yet.
        A fact of the handle: it holds after `close()` too."""
        return self._seen

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def active_searches(self) -> int:
        """Searches running right now (in any thread)."""
        return self._active

    def stats(self) -> HandleStats:
        return HandleStats(
            generation_id=self.generation_id,
            space_id=self.space_id,
            base_count=self._part_count(self._base),
            delta_count=self.delta_count,
            tombstones=len(self._tombstones),
        )

    def _parts(self) -> list[VectorSet]:
        base: list[VectorSet] = [self._base] if self._base is not None else []
        return base + list(self._deltas)

    @staticmethod
    def _part_count(part: VectorSet | None) -> int:
        return part.count if part is not None else 0

    # --- copy-on-write changes ---

    def with_delta(self, vectors: Vectors, id_map_rows: IdMap) -> Handle:
        """A new handle that also holds `vectors` (rows described by `id_map_rows`).

        ValueError for vectors of another dimension, not finite, zero or (in a normalised space)
        not unit length, and for surrogates already held by this handle. This handle is unchanged.
        """
        matrix = self._checked_vectors(vectors, len(id_map_rows))
        new = id_map_rows.surrogate
        if len(np.unique(new)) != len(new) or (len(new) and new.min() < 0):
            raise ValueError("delta surrogates must be unique and >= 0")
        for part in self._parts():
            if np.any(part.rows_of(new) >= 0):
                raise ValueError("a delta surrogate is already in the handle (surrogates are never reused)")
        deltas = [*self._deltas, Delta(matrix, id_map_rows)]
        while len(deltas) >= 2 and deltas[-2].count < DELTA_MERGE_FACTOR * deltas[-1].count:
            newest = deltas.pop()
            deltas[-1] = deltas[-1].merged(newest)
        return Handle(self._space, base=self._base, deltas=tuple(deltas), tombstones=self._tombstones)

    def with_tombstones(self, surrogates: Iterable[int]) -> Handle:
        """A new handle that never returns `surrogates` (in addition to the current tombstones)."""
        return Handle(
            self._space,
            base=self._base,
            deltas=self._deltas,
            tombstones=self._tombstones | {int(s) for s in surrogates},
        )

    def _checked_vectors(self, vectors: Vectors, rows: int) -> Vectors:
        matrix = np.asarray(vectors)
        if matrix.dtype != np.float32 or matrix.ndim != 2 or matrix.shape[1] != self._space.dimension:
            raise ValueError(f"vectors must be float32 (n, {self._space.dimension}), got {matrix.dtype} {matrix.shape}")
        if len(matrix) != rows:
            raise ValueError(f"{len(matrix)} vectors for {rows} id-map rows")
        if len(matrix):
            if not np.all(np.isfinite(matrix)):
                raise ValueError("vectors hold NaN or Inf")
            norms = np.linalg.norm(matrix.astype(np.float64), axis=1)
            if np.any(norms < ZERO_NORM):
                raise ValueError("a vector is zero")
            if self._space.normalized and np.any(np.abs(norms - 1.0) > NORM_TOLERANCE):
                raise ValueError("a vector is not unit length in a normalised space")
        return matrix

    # --- search ---

    def search(
        self,
        query: Vectors,
        *,
        k_records: int,
        namespace: str,
        accept: Accept | None = None,
        within: RecordIds | None = None,
        ef_search: int | None = None,
    ) -> list[Hit]:
        """The best `k_records` distinct records of `namespace`, best first.

        Guarantees: no tombstoned surrogate and nothing outside `namespace` is returned (both are
        excluded inside FAISS, so they never crowd out a match); one hit per record, its best
        chunk; `accept` (called from this thread, at most once per record and revision) drops
        candidates; ties are ordered by surrogate, so equal inputs give equal answers. Fewer
        than `k_records` hits only when fewer matching records exist: each round asks FAISS for
        twice as many vectors until enough records are certain or the namespace is exhausted.
        `within` limits the search to those records (ids the handle does not hold are ignored),
        scored exactly. `ef_search`: the HNSW beam (`VectorSet.search`).

        Synchronous, under a lease; it holds its thread for the whole search, so the event loop
        calls it itself only for a search `actors/index/placement.py` deems cheap. Raises
        `HandleClosed` after `close()`.
        """
        if k_records < 1:
            raise ValueError("k_records must be at least 1")
        vector = np.ascontiguousarray(query, dtype=np.float32).reshape(-1)
        if vector.shape != (self._space.dimension,) or not np.all(np.isfinite(vector)):
            raise ValueError(f"query must be {self._space.dimension} finite floats")
        with self._lock:
            if self._closed:
                raise HandleClosed("search on a closed handle")
            self._active += 1
            parts = self._parts()
            excluded = self._tomb_set
        try:
            search = functools.partial(_search, k_records=k_records, namespace=namespace, ef_search=ef_search)
            return search(parts, excluded, vector, accept=accept, within=within)
        finally:
            with self._lock:
                self._active -= 1

    def close(self) -> None:
        """Refuse further searches and drop this handle's references to its indexes. Idempotent."""
        with self._lock:
            self._closed = True
            # Running searches hold their own references; the indexes outlive them.
            self._base = None
            self._deltas = ()
            self._tomb_set = None


def _search(
    parts: list[VectorSet],
    excluded: SurrogateSet | None,
    query: Vectors,
    *,
    k_records: int,
    namespace: str,
    accept: Accept | None,
    within: RecordIds | None,
    ef_search: int | None = None,
) -> list[Hit]:
    verdicts: dict[tuple[bytes, int], bool] = {}
    # More than k from the start (the last vector FAISS returns is never certain, an unseen one
    # may tie with it); each part says how many, then asks for twice as many each round.
    fetch = [part.first_fetch(namespace, k_records, exact=within is not None) for part in parts]
    while True:
        found: list[tuple[npt.NDArray[np.float32], IdMap, npt.NDArray[np.intp]]] = []
        # Below this score a part that was cut at its fetch may hold unseen vectors: only
        # candidates strictly above it are certain to be in their final order.
        cutoff = -math.inf
        exhausted = True
        for part, asked in zip(parts, fetch, strict=True):
            scores, rows, done = part.search(
                query, asked, namespace=namespace, exclude=excluded, within=within, ef_search=ef_search
            )
            if not done:
                exhausted = False
                cutoff = max(cutoff, float(scores.min()) if len(scores) else math.inf)
            found.append((scores, part.id_map, rows))
        scores = np.concatenate([f[0] for f in found]) if found else np.empty(0, np.float32)
        surrogates = np.concatenate([m.surrogate[r] for _, m, r in found]) if found else np.empty(0, np.int64)
        records = np.concatenate([m.record_id[r] for _, m, r in found]) if found else np.empty((0, 16), np.uint8)
        revisions = np.concatenate([m.revision[r] for _, m, r in found]) if found else np.empty(0, np.int32)
        keep = scores > cutoff if not exhausted else np.ones(len(scores), dtype=bool)
        if excluded is not None and len(surrogates):
            # The selector already excluded them; this second check costs little and keeps the
            # promise even if a FAISS version ignored the selector.
            keep &= ~excluded.contains(surrogates)
        order = np.flatnonzero(keep)
        order = order[np.lexsort((surrogates[order], -scores[order].astype(np.float64)))]

        hits: list[Hit] = []
        taken: set[bytes] = set()
        # Rows become Python values a block at a time: indexing numpy one scalar at a time costs
        # more than the search, and so does converting every row of a large fetch (a first fetch
        # sized for many chunks per record) when the first few hundred hold the k records.
        for start in range(0, len(order), _ROWS_PER_BLOCK):
            block = order[start : start + _ROWS_PER_BLOCK]
            packed = records[block].tobytes()
            for record, revision, surrogate, score in zip(
                [packed[i : i + 16] for i in range(0, len(packed), 16)],
                revisions[block].tolist(),
                surrogates[block].tolist(),
                scores[block].tolist(),
                strict=True,
            ):
                if record in taken:
                    continue
                if accept is not None:
                    key = (record, revision)
                    verdict = verdicts.get(key)
                    if verdict is None:
                        verdict = verdicts[key] = bool(accept(uuid.UUID(bytes=record), revision))
                    if not verdict:
                        continue
                taken.add(record)
                hits.append(Hit(uuid.UUID(bytes=record), revision, surrogate, score))
                if len(hits) == k_records:
                    return hits
        if exhausted:
            return hits
        fetch = [2 * asked for asked in fetch]


class HandleCell:
    """Holds the current handle (None until the first one) and the leases on the handles.

    Used from one event loop only (anyio, asyncio or trio); it never blocks and starts no threads.
    A lease pins the handle current when it began; `swap` makes a new handle current; a replaced
    handle is closed exactly when its last lease ends (at once if it has none).
    """

    def __init__(self, handle: Handle | None = None) -> None:
        if handle is not None and handle.closed:
            raise ValueError("cannot start from a closed handle")
        self._current = handle
        self._leases: dict[Handle, int] = {handle: 0} if handle is not None else {}
        self._open_leases = 0
        self._closed = False

    def current(self) -> Handle | None:
        return self._current

    @asynccontextmanager
    async def lease(self) -> AsyncIterator[Handle | None]:
        """Pin the current handle (None if there is none yet) until the block ends.

        The pinned handle stays open until the block ends, by error or cancellation included.
        Run searches on the loop itself or in worker threads that cannot be abandoned
        (`anyio.to_thread.run_sync` without `abandon_on_cancel`), so that the block outlives
        them (`actors/index/placement.py`). Raises `HandleClosed`
        after `close()`.
        """
        await anyio.lowlevel.checkpoint()
        if self._closed:
            raise HandleClosed("the handle cell is closed")
        handle = self._current
        if handle is not None:
            self._leases[handle] += 1
        self._open_leases += 1
        try:
            yield handle
        finally:
            self._open_leases -= 1
            if handle is not None:
                self._release(handle)

    def swap(self, new: Handle) -> Handle | None:
        """Make `new` current and return the handle it replaced (closed now if unleased)."""
        if self._closed:
            raise HandleClosed("the handle cell is closed")
        if new.closed:
            raise ValueError("cannot make a closed handle current")
        old = self._current
        if new is old:
            return old
        self._current = new
        self._leases.setdefault(new, 0)
        if old is not None and self._leases[old] == 0:
            del self._leases[old]
            old.close()
        return old

    def close(self) -> None:
        """No new leases; every handle closes once its leases end (the unleased ones now)."""
        self._closed = True
        for handle, count in list(self._leases.items()):
            if count == 0:
                del self._leases[handle]
                handle.close()

    def _release(self, handle: Handle) -> None:
        self._leases[handle] -= 1
        if self._leases[handle] == 0 and (handle is not self._current or self._closed):
            del self._leases[handle]
            handle.close()

    @property
    def open_leases(self) -> int:
        return self._open_leases

    @property
    def live_handles(self) -> int:
        """Handles this cell has not closed yet: the current one plus replaced ones still leased."""
        return len(self._leases)

    def generations_in_use(self) -> frozenset[str]:
        """Generations an open handle still uses, current or leased: the sweeper keeps these."""
        return frozenset(h.generation_id for h in self._leases if h.generation_id is not None)
