"""Searchable, immutable vector sets: an `IndexIDMap2` plus its id map, filtered by namespace.

The FAISS facts this relies on (faiss 1.15): searches on an index nobody modifies are thread-safe
and release the GIL. Vectors are added in id-map order (generations check it on load), so the
position of a vector inside the `IndexIDMap2` is its id-map row: searches go to the inner index
with a namespace selector on positions (a bitmap) and get rows back, with no id translation.
Parameters are built per search and never shared.
"""

from __future__ import annotations

import math
from typing import Final, Literal

import faiss
import numpy as np
import numpy.typing as npt
from threadpoolctl import threadpool_limits

from recalld.actors.index.idmap import IdMap, RecordIds, Surrogates, frozen_array
from recalld.actors.index.settings import HNSW_EF_SEARCH

Vectors = npt.NDArray[np.float32]

EXACT_NAMESPACE_MAX: Final = 4096
"""An HNSW namespace this small is scored exactly: a graph walk filtered down to a small share of
its nodes finds too few of them (FAISS's own advice for very selective filters)."""
_EXACT_BLOCK = 16384
BUILD_THREADS: Final = faiss.omp_get_max_threads()
"""FAISS's OpenMP threads as the process started (one per core): what a build uses."""


def single_threaded_blas() -> None:
    """Make every BLAS library loaded in this process run each call on the calling thread alone,
    for the rest of the process (a process-wide setting: call it once, at start).

    Exact scoring multiplies a block of stored vectors by the query (`_exact`), a matrix-vector
    product numpy hands to OpenBLAS, which splits one over a few thousand rows across a team of
    threads that then busy-wait for the next call. Measured on a 3,000-record HNSW namespace
    (scored exactly): 14.8 ms of daemon CPU per vector recall at one client and 31.8 at eight,
    against 1.8 with the pool pinned to one thread, for the same answers at the same speed. The
    limit goes through threadpoolctl, so it holds whatever OPENBLAS_NUM_THREADS or
    OMP_NUM_THREADS say; FAISS's own OpenMP teams are set per call (below)."""
    threadpool_limits(limits=1, user_api="blas")


def one_thread_per_search() -> None:
    """Make FAISS calls from the calling thread single-threaded. A one-vector search gains
    nothing from an OpenMP team, whose idle members spin: measured on 100k vectors, 4.6 ms of
    CPU per search with the default team of two, 2.3 ms with one, at the same speed. The
    setting belongs to the calling thread (an OpenMP per-thread variable), so every search sets
    it in the worker thread it runs in, and a build sets BUILD_THREADS back."""
    faiss.omp_set_num_threads(1)


def _record_keys(record_ids: RecordIds) -> npt.NDArray[np.uint64]:
    """Each 16-byte record id mixed into one integer: sorting and searching these is five times
    faster than the ids themselves, whatever the ids look like (client-chosen ids may share a
    prefix or a suffix). Two ids may mix alike: a key finds candidates, the id decides."""
    halves = np.ascontiguousarray(record_ids).view(np.uint64)
    with np.errstate(over="ignore"):  # the multiplication wraps around by design
        keys: npt.NDArray[np.uint64] = halves[:, 0] * np.uint64(0x9E3779B97F4A7C15) ^ halves[:, 1]
    return keys


def _distinct_revisions(record_keys: npt.NDArray[np.uint64], revisions: npt.NDArray[np.int32]) -> int:
    """About how many distinct record revisions rows of record keys (`_record_keys`) and their
    revisions hold. Revisions, not records: a set holding many revisions of a few records (a delta
    after many updates) has a few chunks per revision, not many per record. Two (id, revision)
    pairs that mix alike count once: an estimate, which is all `first_fetch` needs."""
    with np.errstate(over="ignore"):
        mixed = record_keys ^ revisions.astype(np.uint64) * np.uint64(0xC2B2AE3D27D4EB4F)
    return len(np.unique(mixed))


class SurrogateSet:
    """An immutable set of surrogates with the FAISS selectors that exclude it (shared by threads)."""

    __slots__ = ("_array", "_batch", "_not")

    def __init__(self, surrogates: frozenset[int]) -> None:
        self._array = frozen_array(sorted(surrogates), np.int64)
        self._batch = faiss.IDSelectorBatch(self._array) if len(self._array) else None
        self._not = faiss.IDSelectorNot(self._batch) if self._batch is not None else None

    def __len__(self) -> int:
        return len(self._array)

    def contains(self, surrogates: Surrogates) -> npt.NDArray[np.bool_]:
        return np.isin(surrogates, self._array)

    @property
    def exclude_selector(self) -> faiss.IDSelector | None:
        """Selects everything not in the set; None when the set is empty."""
        return self._not


class VectorSet:
    """Vectors in an `IndexIDMap2` plus their id map (sorted by surrogate), searchable by namespace.

    Immutable once built and safe to search from several threads at once: FAISS searches on an
    index nobody modifies are thread-safe, and every search builds its own `SearchParameters`.
    """

    __slots__ = (
        "__weakref__",
        "_by_record",
        "_ef_search",
        "_family",
        "_id_map",
        "_index",
        "_inner",
        "_ns_chunks_per_record",
        "_ns_code",
        "_ns_rows",
        "_ns_selector",
    )

    def __init__(
        self, index: faiss.IndexIDMap2, id_map: IdMap, *, family: Literal["flat", "hnsw"], ef_search: int | None
    ) -> None:
        if len(id_map) and np.any(np.diff(id_map.surrogate) <= 0):
            raise ValueError("id map must be sorted by surrogate, without duplicates")
        self._index = index
        self._inner = faiss.downcast_index(index.index)  # positions are id-map rows
        self._id_map = id_map
        keys = _record_keys(id_map.record_id)
        # Sorted record keys and their rows, for searches within records: 16 bytes a vector, and
        # 14 ms at 100k vectors, paid here (a generation loads in a worker thread), not by a search.
        order = np.argsort(keys)
        self._by_record = keys[order], order
        self._family = family
        # a generation built with a narrower stored beam still searches with at least ours
        self._ef_search = max(ef_search or 0, HNSW_EF_SEARCH)
        self._ns_code = {name: code for code, name in enumerate(id_map.namespaces)}
        self._ns_rows: dict[str, npt.NDArray[np.intp]] = {}
        self._ns_chunks_per_record: dict[str, float] = {}
        # None for a namespace that holds every vector: nothing to filter
        self._ns_selector: dict[str, faiss.IDSelectorBitmap | None] = {}
        # One stable sort groups rows by namespace, each group in row (so surrogate) order.
        by_namespace = np.argsort(id_map.namespace_code, kind="stable")
        bounds = np.searchsorted(id_map.namespace_code[by_namespace], np.arange(len(id_map.namespaces) + 1))
        for code, name in enumerate(id_map.namespaces):
            rows = by_namespace[bounds[code] : bounds[code + 1]]
            if not len(rows):
                continue
            rows.setflags(write=False)
            self._ns_rows[name] = rows
            self._ns_chunks_per_record[name] = len(rows) / _distinct_revisions(keys[rows], id_map.revision[rows])
            if len(rows) < len(id_map):
                members = np.zeros(len(id_map), dtype=bool)
                members[rows] = True
                # FAISS reads bit i of the bitmap as byte i >> 3, bit i & 7: little bit order
                bitmap = np.packbits(members, bitorder="little")
                # faiss's Python wrapper takes the array alone (and keeps it); its stubs list only the C++ form
                self._ns_selector[name] = faiss.IDSelectorBitmap(bitmap)  # type: ignore[call-arg, arg-type]
            else:
                self._ns_selector[name] = None

    @property
    def index(self) -> faiss.Index:
        return self._index

    @property
    def id_map(self) -> IdMap:
        return self._id_map

    @property
    def family(self) -> Literal["flat", "hnsw"]:
        return self._family

    @property
    def count(self) -> int:
        return len(self._id_map)

    @property
    def namespaces(self) -> frozenset[str]:
        return frozenset(self._ns_rows)

    def namespace_count(self, namespace: str) -> int:
        rows = self._ns_rows.get(namespace)
        return 0 if rows is None else len(rows)

    def first_fetch(self, namespace: str, k_records: int, *, exact: bool = False) -> int:
        """How many vectors a search for `k_records` distinct records first asks this set for.

        A search that scores every vector it may return (a flat set, an HNSW namespace small
        enough to be scored exactly, or a search `within` records: `exact`) costs the same
        whatever it asks for, so it asks for as many as 2 * k_records records hold on average,
        and one round is usually enough: on 500 man pages (19 chunks a page) asking for 2 * k
        took one to five rounds (mostly two or three), each a whole scan. An HNSW walk widens its
        beam, and costs more, with every vector asked for: it starts at 2 * k (one chunk per
        record), and the caller doubles it while records are missing.
        """
        members = self.namespace_count(namespace)
        if not exact and self._family == "hnsw" and members > EXACT_NAMESPACE_MAX:
            return 2 * k_records
        return math.ceil(2 * k_records * self._ns_chunks_per_record.get(namespace, 1.0))

    def scored_exactly(self, namespace: str, k: int) -> bool:
        """Whether an unfiltered search of `namespace` for `k` vectors scores its vectors one by
        one (`_exact`) rather than through FAISS's own search: an HNSW namespace of at most
        `EXACT_NAMESPACE_MAX` vectors, or `k` reaching every one of them."""
        members = self.namespace_count(namespace)
        return self._family == "hnsw" and members > 0 and (k >= members or members <= EXACT_NAMESPACE_MAX)

    def rows_of(self, surrogates: Surrogates) -> npt.NDArray[np.intp]:
        """Id-map rows of `surrogates`; -1 where a surrogate is not in this set."""
        keys = self._id_map.surrogate
        rows = np.searchsorted(keys, surrogates)
        rows = np.minimum(rows, max(len(keys) - 1, 0))
        found = (keys[rows] == surrogates) if len(keys) else np.zeros(len(surrogates), dtype=bool)
        return np.where(found, rows, -1)

    def rows_of_records(self, records: RecordIds) -> npt.NDArray[np.intp]:
        """Id-map rows of every vector of `records` (any revision), in row order."""
        sorted_keys, order = self._by_record
        wanted = _record_keys(records)
        first = np.searchsorted(sorted_keys, wanted, "left")
        counts = np.searchsorted(sorted_keys, wanted, "right") - first
        # positions first[i] .. first[i] + counts[i] - 1 for every i, without a Python loop
        starts = np.repeat(first - np.cumsum(counts) + counts, counts)
        rows = order[np.arange(int(counts.sum())) + starts]
        owners = np.repeat(np.arange(len(wanted)), counts)
        same = np.all(self._id_map.record_id[rows] == records[owners], axis=1)
        return np.unique(rows[same])

    def search(
        self,
        query: Vectors,
        k: int,
        *,
        namespace: str,
        exclude: SurrogateSet | None,
        within: RecordIds | None = None,
        ef_search: int | None = None,
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.intp], bool]:
        """The best ≤ k vectors of `namespace`, not in `exclude`, by descending inner product;
        only vectors of the records `within` when given, scored exactly (records picked by
        filters the index does not know, such as their kind: a graph walk filtered down to a few
        of its nodes finds too few of them).

        Returns (scores, id-map rows, exhausted); `exhausted` means nothing else in the namespace
        (or `within`) could qualify, so asking for more would return nothing new. Filtering
        happens inside FAISS (namespace bitmap on rows, and `exclude` on surrogates), so
        filtered-out vectors never take a place among the k. `ef_search`: an HNSW walk's beam
        (`[index] hnsw_ef_search`; at least k), else the wider of the stored one and the default.
        """
        one_thread_per_search()
        members = self._ns_rows.get(namespace)
        if members is None:
            return np.empty(0, np.float32), np.empty(0, np.intp), True
        if within is not None:
            rows = self.rows_of_records(within)
            chosen = rows[self._id_map.namespace_code[rows] == self._ns_code[namespace]]
            return self._exact(query, min(k, len(chosen)), chosen, exclude)
        k_eff = min(k, len(members))
        if self.scored_exactly(namespace, k):
            return self._exact(query, k_eff, members, exclude)
        in_namespace, not_excluded = self._ns_selector[namespace], self._excluding(exclude)
        selector: faiss.IDSelector | None = in_namespace or not_excluded
        if in_namespace is not None and not_excluded is not None:
            selector = faiss.IDSelectorAnd(in_namespace, not_excluded)
        beam = max(ef_search or self._ef_search, k_eff)
        params = search_parameters(selector, ef_search=beam if self._family == "hnsw" else None)
        distances, labels = self._inner.search(query.reshape(1, -1), k_eff, params=params)
        rows = labels[0]
        returned = rows >= 0
        # FAISS applied the selectors already; checking the namespace again (O(k)) keeps the
        # promise even if a FAISS version ignored them.
        keep = returned & (self._id_map.namespace_code[np.where(returned, rows, 0)] == self._ns_code[namespace])
        # A flat search is exact: fewer hits than asked means no other vector qualifies.
        exhausted = k_eff >= len(members) or (self._family == "flat" and int(returned.sum()) < k_eff)
        return distances[0][keep], rows[keep].astype(np.intp), exhausted

    def _excluding(self, exclude: SurrogateSet | None) -> faiss.IDSelector | None:
        """`exclude`'s selector (on surrogates) read through this set's row -> surrogate map."""
        if exclude is None or exclude.exclude_selector is None:
            return None
        # the C++ selector points into the id map and `exclude`'s selector: both outlive the search
        return faiss.IDSelectorTranslated(self._index.id_map, exclude.exclude_selector)  # type: ignore[arg-type]

    def _exact(
        self, query: Vectors, k: int, members: npt.NDArray[np.intp], exclude: SurrogateSet | None
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.intp], bool]:
        candidates = members if exclude is None else members[~exclude.contains(self._id_map.surrogate[members])]
        best_scores = np.empty(0, np.float32)
        best = np.empty(0, np.intp)
        # Block by block, keeping the running top k: memory stays bounded for any namespace.
        for start in range(0, len(candidates), _EXACT_BLOCK):
            block = candidates[start : start + _EXACT_BLOCK]
            scores = (self._inner.reconstruct_batch(block) @ query).astype(np.float32)
            best_scores, best = _top(np.concatenate([best_scores, scores]), np.concatenate([best, block]), k)
        return best_scores, best, len(candidates) <= k


def _top(
    scores: npt.NDArray[np.float32], rows: npt.NDArray[np.intp], k: int
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.intp]]:
    """The k best, best first; rows are in surrogate order, so ties go by surrogate. A partition
    first (linear) leaves only the k best and whatever ties the k-th to sort."""
    if k < 1:
        return scores[:0], rows[:0]
    if len(scores) > k:
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        keep = scores >= kth
        scores, rows = scores[keep], rows[keep]
    order = np.lexsort((rows, -scores))[:k]
    return scores[order], rows[order]


def search_parameters(selector: faiss.IDSelector | None, *, ef_search: int | None) -> faiss.SearchParameters:
    """Fresh parameters for one search (HNSW ones when `ef_search` is given).

    Never share them between concurrent searches: `IndexIDMap2.search` swaps its own translated
    selector into the object it is given for the duration of the call. The caller keeps
    `selector` alive until the search returns (the parameters hold only a C++ pointer).
    """
    params: faiss.SearchParameters
    if ef_search is None:
        params = faiss.SearchParameters()
    else:
        # faiss 1.15's bundled stubs omit SearchParametersHNSW; the class exists at runtime.
        hnsw_params = faiss.SearchParametersHNSW()  # type: ignore[attr-defined]
        hnsw_params.efSearch = ef_search
        params = hnsw_params
    params.sel = selector
    return params


def new_flat_index(dimension: int) -> faiss.IndexIDMap2:
    """An empty `IndexIDMap2` over an exact inner-product index (what deltas use)."""
    return faiss.IndexIDMap2(faiss.IndexFlatIP(dimension))
