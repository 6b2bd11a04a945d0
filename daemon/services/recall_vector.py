"""The vector route of a recall: embed the query (or take its vector from the cache), then search
the leased index handle. Its own module so that `recalld.services.recall` stays the routes' conductor."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from recalld.actors.embedding.embedder import Embedder
from recalld.actors.embedding.errors import EmbeddingError
from recalld.actors.embedding.query_cache import QueryVectorCache
from recalld.actors.index.manager import IndexManager
from recalld.actors.index.problems import IndexUnavailable
from recalld.services.recall_indexing import IndexingStatus
from recalld.store.search import Candidate, Filters


class RouteDown(Exception):
    """A route cannot answer now; `reason` is a stable code."""

    def __init__(self, reason: str, message: str = "") -> None:
        super().__init__(message or reason)
        self.reason = reason
        self.message = message


@dataclass
class VectorAnswer:
    candidates: list[Candidate]
    embed_ms: float
    generation: str | None
    pending: int = 0
    """Records of the namespace not searchable yet: the answer is partial when above 0."""


class VectorRoute:
    """The vector route: embed the query (purpose `query`; a repeated query's vector comes from
    `query_vectors`), then search the leased handle (only the records `within`, when given).
    The answer says how many records of the namespace it could not search yet (`status`)."""

    def __init__(
        self,
        embedder: Embedder,
        index: IndexManager,
        query_vectors: QueryVectorCache,
        status: IndexingStatus | None = None,
    ) -> None:
        self._embedder = embedder
        self._index = index
        self._query_vectors = query_vectors
        self._status = status or IndexingStatus(index)

    def will_embed(self, query: str) -> bool:
        """Whether answering `query` now would call the model (its vector is not cached). Looks
        without counting a cache lookup: the route itself counts its own."""
        space = self._embedder.space
        return space is not None and (space, self._embedder.render_query(query).text) not in self._query_vectors

    async def __call__(
        self,
        filters: Filters,
        query: str,
        cap: int,
        deadline: float,
        within: list[uuid.UUID] | None,
        vector_known: Callable[[], None],
    ) -> VectorAnswer:
        """Candidates for `query` (at most `cap` records), or RouteDown; `deadline` is anyio time,
        and `vector_known` is called once the query vector is at hand."""
        index = self._index
        problem = index.problem()
        if problem is not None:
            raise RouteDown(*problem)
        # Counted as the request comes (at most once a second per namespace, see IndexingStatus).
        pending = await self._status.pending(filters.namespace)
        started = time.perf_counter()
        text = self._embedder.render_query(query).text
        space = self._embedder.space
        vector = self._query_vectors.get(space, text) if space is not None else None
        if vector is None:
            try:
                result = await self._embedder.embed(
                    [text], purpose="query", namespace=filters.namespace, deadline=deadline
                )
            except EmbeddingError as exc:
                raise RouteDown(exc.reason.value, exc.message) from None
            vector = result.vectors[0]
            self._query_vectors.put(result.space, text, vector)
        embed_ms = (time.perf_counter() - started) * 1000
        vector_known()
        try:
            hits, generation = await index.search(vector, namespace=filters.namespace, k_records=cap, within=within)
        except IndexUnavailable as exc:
            raise RouteDown(exc.reason, exc.message) from None
        candidates = [Candidate(h.record_id, h.revision, h.score, h.surrogate) for h in hits]
        return VectorAnswer(candidates, embed_ms, generation, pending)
