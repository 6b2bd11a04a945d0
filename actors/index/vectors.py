"""Searchable, immutable vector sets: an `IndexIDMap2` plus its id map, filtered by namespace.

The FAISS facts this relies on (faiss 1.15): searches on an index nobody modifies are thread-safe
and release the GIL; `IndexIDMap2.search` translates a selector on external ids (surrogates) to
internal positions itself, by temporarily writing into the `SearchParameters` it is given, so
parameters are built per search and never shared.
"""

from __future__ import annotations

from typing import Final, Literal

import faiss
import numpy as np
import numpy.typing as npt

from actors.index.idmap import IdMap, Surrogates, frozen_array

Vectors = npt.NDArray[np.float32]

HNSW_EF_SEARCH: Final = 200
"""The least beam width of an HNSW search (wider when it asks for more hits); new generations
store it too. Measured on the 100k-passage bench generation (HNSW32, 384 dimensions), recall@10
against exact search: 0.955 at 64, 0.972 at 128, 0.987 at 200, for 0.34, 0.55 and 0.90 ms."""
EXACT_NAMESPACE_MAX: Final = 4096
"""An HNSW namespace this small is scored exactly: a graph walk filtered down to a small share of
its nodes finds too few of them (FAISS's own advice for very selective filters)."""
_EXACT_BLOCK = 16384
BUILD_THREADS: Final = faiss.omp_get_max_threads()
"""FAISS's OpenMP threads as the process started (one per core): what a build uses."""


def one_thread_per_search() -> None:
    """Make FAISS calls from the calling thread single-threaded. A one-vector search gains
    nothing from an OpenMP team, whose idle members spin: measured on 100k vectors, 4.6 ms of
    CPU per search with the default team of two, 2.3 ms with one, at the same speed. The
    setting belongs to the calling thread (an OpenMP per-thread variable), so every search sets
    it in the worker thread it runs in, and a build sets BUILD_THREADS back."""
    faiss.omp_set_num_threads(1)


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
    index nobody modifies are thread-safe, and every search builds its own `SearchParameters`
    (`IndexIDMap2.search` writes a translated selector into the parameters it is given).
    """

    __slots__ = ("__weakref__", "_ef_search", "_family", "_id_map", "_index", "_ns_selector", "_ns_surrogates")

    def __init__(
        self, index: faiss.Index, id_map: IdMap, *, family: Literal["flat", "hnsw"], ef_search: int | None
    ) -> None:
        if len(id_map) and np.any(np.diff(id_map.surrogate) <= 0):
            raise ValueError("id map must be sorted by surrogate, without duplicates")
        self._index = index
        self._id_map = id_map
        self._family = family
        # a generation built with a narrower stored beam still searches with at least ours
        self._ef_search = max(ef_search or 0, HNSW_EF_SEARCH)
        self._ns_surrogates: dict[str, Surrogates] = {}
        self._ns_selector: dict[str, faiss.IDSelectorBatch] = {}
        # One stable sort groups rows by namespace and keeps each group sorted by surrogate.
        by_namespace = np.argsort(id_map.namespace_code, kind="stable")
        bounds = np.searchsorted(id_map.namespace_code[by_namespace], np.arange(len(id_map.namespaces) + 1))
        for code, name in enumerate(id_map.namespaces):
            members = id_map.surrogate[by_namespace[bounds[code] : bounds[code + 1]]]
            if len(members):
                members.setflags(write=False)
                self._ns_surrogates[name] = members
                self._ns_selector[name] = faiss.IDSelectorBatch(members)

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
        return frozenset(self._ns_surrogates)

    def namespace_count(self, namespace: str) -> int:
        members = self._ns_surrogates.get(namespace)
        return 0 if members is None else len(members)

    def rows_of(self, surrogates: Surrogates) -> npt.NDArray[np.intp]:
        """Id-map rows of `surrogates`; -1 where a surrogate is not in this set."""
        keys = self._id_map.surrogate
        rows = np.searchsorted(keys, surrogates)
        rows = np.minimum(rows, max(len(keys) - 1, 0))
        found = (keys[rows] == surrogates) if len(keys) else np.zeros(len(surrogates), dtype=bool)
        return np.where(found, rows, -1)

    def search(
        self, query: Vectors, k: int, *, namespace: str, exclude: SurrogateSet | None
    ) -> tuple[npt.NDArray[np.float32], Surrogates, bool]:
        """The best ≤ k vectors of `namespace`, not in `exclude`, by descending inner product.

        Returns (scores, surrogates, exhausted); `exhausted` means nothing else in the namespace
        could qualify, so asking for more would return nothing new. Exclusion happens inside
        FAISS (`IDSelectorAnd(namespace, IDSelectorNot(excluded))`), so excluded vectors never
        take a place among the k.
        """
        one_thread_per_search()
        members = self._ns_surrogates.get(namespace)
        if members is None:
            return np.empty(0, np.float32), np.empty(0, np.int64), True
        k_eff = min(k, len(members))
        if self._family == "hnsw" and (k_eff >= len(members) or len(members) <= EXACT_NAMESPACE_MAX):
            return self._exact(query, k_eff, members, exclude)
        namespace_sel = self._ns_selector[namespace]
        not_excluded = exclude.exclude_selector if exclude is not None else None
        selector = namespace_sel if not_excluded is None else faiss.IDSelectorAnd(namespace_sel, not_excluded)
        params = search_parameters(selector, ef_search=max(self._ef_search, k_eff) if self._family == "hnsw" else None)
        distances, labels = self._index.search(query.reshape(1, -1), k_eff, params=params)
        returned = labels[0] >= 0
        # FAISS applied the namespace selector already; checking membership again (sorted
        # array, O(k log n)) keeps the namespace promise even if a FAISS version ignored it.
        at = np.minimum(np.searchsorted(members, labels[0]), len(members) - 1)
        keep = returned & (members[at] == labels[0])
        scores, found = distances[0][keep], labels[0][keep]
        # A flat search is exact: fewer hits than asked means no other vector qualifies.
        exhausted = k_eff >= len(members) or (self._family == "flat" and int(returned.sum()) < k_eff)
        return scores, found, exhausted

    def _exact(
        self, query: Vectors, k: int, members: Surrogates, exclude: SurrogateSet | None
    ) -> tuple[npt.NDArray[np.float32], Surrogates, bool]:
        candidates = members if exclude is None else members[~exclude.contains(members)]
        best_scores = np.empty(0, np.float32)
        best = np.empty(0, np.int64)
        # Block by block, keeping the running top k: memory stays bounded for any namespace.
        for start in range(0, len(candidates), _EXACT_BLOCK):
            block = candidates[start : start + _EXACT_BLOCK]
            scores = (self._index.reconstruct_batch(block) @ query).astype(np.float32)
            best_scores = np.concatenate([best_scores, scores])
            best = np.concatenate([best, block])
            order = np.lexsort((best, -best_scores))[:k]
            best_scores, best = best_scores[order], best[order]
        return best_scores, best, len(candidates) <= k


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
