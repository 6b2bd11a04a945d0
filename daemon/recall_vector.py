"""The vector route of recall: embed the query (or take its cached vector), search the leased
index handle. Moved out of daemon/recall.py (issue 24) so that module stays under 500 lines;
`RecallService` takes the function this builds."""

from __future__ import annotations

import time
import uuid

from actors.embedder import Embedder
from actors.embedding.errors import EmbeddingError
from actors.embedding.query_cache import QueryVectorCache
from actors.index_manager import IndexManager, IndexUnavailable
from daemon.indexing_status import IndexingStatus
from daemon.recall import RouteDown, VectorAnswer, VectorSearch
from daemon.store.search import Candidate, Filters


def vector_search(
    embedder: Embedder, index: IndexManager, query_vectors: QueryVectorCache, status: IndexingStatus | None = None
) -> VectorSearch:
    """The vector route: embed the query (purpose `query`; a repeated query's vector comes from
    `query_vectors`), then search the leased handle (only the records `within`, when given).
    The answer says how many records of the namespace it could not search yet (`status`)."""
    status = status or IndexingStatus(index)

    async def route(
        filters: Filters, query: str, cap: int, deadline: float, within: list[uuid.UUID] | None
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
        try:
            hits, generation = await index.search(vector, namespace=filters.namespace, k_records=cap, within=within)
        except IndexUnavailable as exc:
            raise RouteDown(exc.reason, exc.message) from None
        candidates = [Candidate(h.record_id, h.revision, h.score, h.surrogate) for h in hits]
        return VectorAnswer(candidates, embed_ms, generation, pending)

    return route
