"""The last few query vectors, so a question asked again skips the model.

Agents repeat themselves: the same lookup before every step, the same question from several
workers. The query's embedding is most of a recall's time on a CPU, and it depends only on the
vector space (model, dimension, template version, ...) and the rendered query text, so both
make the key: a model or template switch can never serve a vector of the old space.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from recalld.actors.ports.embedding import VectorSpace


class QueryVectorCache:
    """Least-recently-used cache of query vectors; `size` 0 keeps nothing."""

    def __init__(self, size: int) -> None:
        if size < 0:
            raise ValueError("size must be >= 0")
        self.size = size
        self.hits = 0
        self.misses = 0
        # Keyed by the space itself (a frozen struct: equal fields, equal key), not by
        # `space.key`, which hashes its JSON on every call.
        self._vectors: OrderedDict[tuple[VectorSpace, str], np.ndarray] = OrderedDict()

    def __len__(self) -> int:
        return len(self._vectors)

    def __contains__(self, key: tuple[VectorSpace, str]) -> bool:
        """Whether (space, text) is cached; unlike `get`, not counted and not touched."""
        return key in self._vectors

    def get(self, space: VectorSpace, text: str) -> np.ndarray | None:
        vector = self._vectors.get((space, text))
        if vector is None:
            self.misses += 1
            return None
        self._vectors.move_to_end((space, text))
        self.hits += 1
        return vector

    def put(self, space: VectorSpace, text: str, vector: np.ndarray) -> None:
        if self.size == 0:
            return
        frozen = np.array(vector, dtype=np.float32, copy=True)
        frozen.flags.writeable = False  # shared by every later hit
        self._vectors[(space, text)] = frozen
        self._vectors.move_to_end((space, text))
        while len(self._vectors) > self.size:
            self._vectors.popitem(last=False)
