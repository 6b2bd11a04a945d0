"""The query-vector cache: least recently used goes first, and a vector never crosses spaces."""

from __future__ import annotations

import numpy as np
import pytest

from recalld.actors.embedding.query_cache import QueryVectorCache
from recalld.actors.ports.embedding import VectorSpace

SPACE = VectorSpace(provider="local", model="m", dimension=3, normalized=True, template_version=1)


def unit(*values: float) -> np.ndarray:
    vector = np.array(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def test_a_stored_vector_comes_back_and_counts_a_hit() -> None:
    cache = QueryVectorCache(4)
    assert cache.get(SPACE, "q") is None
    cache.put(SPACE, "q", unit(1, 2, 3))
    got = cache.get(SPACE, "q")
    assert got is not None and np.allclose(got, unit(1, 2, 3))
    assert (cache.hits, cache.misses) == (1, 1)


def test_the_least_recently_used_is_dropped_first() -> None:
    cache = QueryVectorCache(2)
    cache.put(SPACE, "a", unit(1, 0, 0))
    cache.put(SPACE, "b", unit(0, 1, 0))
    assert cache.get(SPACE, "a") is not None  # "a" is now the most recent
    cache.put(SPACE, "c", unit(0, 0, 1))
    assert len(cache) == 2
    assert cache.get(SPACE, "b") is None
    assert cache.get(SPACE, "a") is not None and cache.get(SPACE, "c") is not None


def test_asking_whether_a_vector_is_cached_counts_nothing_and_keeps_the_order() -> None:
    cache = QueryVectorCache(2)
    cache.put(SPACE, "a", unit(1, 0, 0))
    cache.put(SPACE, "b", unit(0, 1, 0))
    assert (SPACE, "a") in cache and (SPACE, "z") not in cache
    assert (cache.hits, cache.misses) == (0, 0)
    cache.put(SPACE, "c", unit(0, 0, 1))  # "a" is still the least recently used
    assert (SPACE, "a") not in cache and (SPACE, "b") in cache


@pytest.mark.parametrize(
    "other",
    [
        VectorSpace(provider="local", model="m", dimension=3, normalized=True, template_version=2),
        VectorSpace(provider="local", model="other", dimension=3, normalized=True, template_version=1),
        VectorSpace(provider="ollama", model="m", dimension=3, normalized=True, template_version=1),
    ],
)
def test_a_vector_of_one_space_is_never_served_for_another(other: VectorSpace) -> None:
    cache = QueryVectorCache(4)
    cache.put(SPACE, "q", unit(1, 2, 3))
    assert cache.get(other, "q") is None


def test_size_zero_keeps_nothing_and_a_negative_size_is_refused() -> None:
    cache = QueryVectorCache(0)
    cache.put(SPACE, "q", unit(1, 2, 3))
    assert cache.get(SPACE, "q") is None and len(cache) == 0
    with pytest.raises(ValueError):
        QueryVectorCache(-1)


def test_a_cached_vector_cannot_be_changed_by_the_caller() -> None:
    cache = QueryVectorCache(1)
    original = unit(1, 2, 3)
    cache.put(SPACE, "q", original)
    original[0] = 9.0  # the caller's array is not the cached one
    got = cache.get(SPACE, "q")
    assert got is not None and np.allclose(got, unit(1, 2, 3))
    with pytest.raises(ValueError):
        got[0] = 0.0
