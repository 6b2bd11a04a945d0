"""The vector route of a recall: embed the query (or take its vector from the cache), then search
the leased index handle. Its own module so that `daemon.recall` stays the routes' conductor."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from actors.embedder import Embedder
from actors.embedding.errors import EmbeddingError
from actors.embedding.query_cache import QueryVectorCache
from actors.index_manager import IndexManager, IndexUnavailable
from daemon.indexing_status import IndexingStatus
from daemon.store.search import Candidate, Filters


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


# The vector route: (filters, query, candidate cap, deadline as anyio time, the only records to
# search or None for all, called once the query vector is at hand) -> answer, or RouteDown.
VectorSearch = Callable[[Filters, str, int, float, list[uuid.UUID] | None, Callable[[], None]], Awaitable[VectorAnswer]]


def vector_search(
    embedder: Embedder, index: IndexManager, query_vectors: QueryVectorCache, status: IndexingStatus | None = None
) -> VectorSearch:
    """The vector route: embed the query (purpose `query`; a repeated query's vector comes from
    `query_vectors`), then search the leased handle (only the records `within`, when given).
    The answer says how many records of the namespace it could not search yet (`status`)."""
    status = status or IndexingStatus(index)

    async def route(
        filters: Filters,
        query: str,
        cap: int,
        deadline: float,
        within: list[uuid.UUID] | None,
        vector_known: Callable[[], None],
    ) -> VectorAnswer:
        problem = index.problem()
        if problem is not None:
            raise RouteDown(*problem)
        # Counted as the request comes (at most once a second per namespace, see IndexingStatus).
        pending = await status.pending(filters.namespace)
        started = time.perf_counter()
        text = embedder.render_query(query).text
        space = embedder.space
        vector = query_vectors.get(space, text) if space is not None else None
        if vector is None:
            try:
                result = await embedder.embed([text], purpose="query", namespace=filters.namespace, deadline=deadline)
            except EmbeddingError as exc:
                raise RouteDown(exc.reason.value, exc.message) from None
            vector = result.vectors[0]
            query_vectors.put(result.space, text, vector)
        embed_ms = (time.perf_counter() - started) * 1000
        vector_known()
        try:
            hits, generation = await index.search(vector, namespace=filters.namespace, k_records=cap, within=within)
        except IndexUnavailable as exc:
            raise RouteDown(exc.reason, exc.message) from None
        candidates = [Candidate(h.record_id, h.revision, h.score, h.surrogate) for h in hits]
        return VectorAnswer(candidates, embed_ms, generation, pending)

    return route
