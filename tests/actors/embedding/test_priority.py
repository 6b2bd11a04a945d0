"""Queries first: the embedder serves a query before duplicate checks and indexing, never in the
same provider call as them, and behind at most the calls in flight.

The provider is the OpenAI wire format on loopback (a real aiohttp server on asyncio; the same
service as an httpx transport on trio, whose mock clock makes the times exact)."""

from __future__ import annotations

import anyio
import pytest

from recalld.actors.embedding.embedder import EmbedResult
from recalld.actors.embedding.errors import EmbeddingError, Reason
from recalld.providers.http import HTTP_MAX_CONCURRENCY
from tests.support.embedders import slow_embedder
from tests.support.embedding_service import EmbeddingService
from tests.support.waits import eventually_async

pytestmark = [pytest.mark.anyio, pytest.mark.anyio_backends("asyncio", "trio")]


async def wait_for_busy_provider(service: EmbeddingService, unit: float) -> None:
    """Until every provider slot holds an indexing call (a condition, not a sleep)."""
    await eventually_async(
        lambda: service.in_flight,
        20 * unit,
        "an indexing call in every provider slot",
        accept=lambda busy: busy >= HTTP_MAX_CONCURRENCY,
        poll=0.001,
    )


async def test_a_query_goes_before_queued_indexing_alone_in_its_call(unit: float, backend: str) -> None:
    service = EmbeddingService(dimension=8)
    chunks = [f"chunk {i}" for i in range(40)]  # ten rounds of indexing calls
    indexed: list[EmbedResult] = []
    async with slow_embedder(service, backend, unit, max_batch=4) as embedder:
        async with anyio.create_task_group() as tasks:

            async def index() -> None:
                indexed.append(await embedder.embed(chunks, purpose="index", namespace="ns1"))

            tasks.start_soon(index)
            await wait_for_busy_provider(service, unit)
            in_flight = len(service.calls_to("/v1/embeddings"))
            asked = anyio.current_time()
            # Behind ten rounds of indexing this would wait ten units; first in line, two at most:
            # the calls in flight, then its own.
            answer = await embedder.embed(["the query"], purpose="query", namespace="ns1", deadline=asked + 20 * unit)
            answered = anyio.current_time()
    assert answer.vectors.shape == (1, 8)
    calls = [call.inputs for call in service.calls_to("/v1/embeddings")]
    assert calls.index(["the query"]) == in_flight, "an indexing call went to the provider before the query"
    if backend == "trio":  # the mock clock's time is exact; a real clock's would be the machine's noise
        assert answered - asked <= 2 * unit
    query_calls = [inputs for inputs in calls if "the query" in inputs]
    assert query_calls == [["the query"]], "a query shared a provider call with indexing"
    assert indexed and indexed[0].vectors.shape == (40, 8)  # indexing went on, all of it


async def test_a_duplicate_check_goes_after_queries_and_before_indexing(unit: float, backend: str) -> None:
    service = EmbeddingService(dimension=8)
    async with slow_embedder(service, backend, unit, max_batch=4) as embedder:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(lambda: embedder.embed([f"chunk {i}" for i in range(40)], purpose="index", namespace="a"))
            await wait_for_busy_provider(service, unit)
            # queued in this order; served in the other
            tasks.start_soon(lambda: embedder.embed(["a new title"], purpose="dedupe", namespace="a"))
            tasks.start_soon(lambda: embedder.embed(["the query"], purpose="query", namespace="a"))
    sent = [text for call in service.calls_to("/v1/embeddings")[1:] for text in call.inputs]
    assert sent.index("the query") < sent.index("a new title") < sent.index("chunk 39")
    assert sent.index("a new title") < sent.index(f"chunk {HTTP_MAX_CONCURRENCY + 1}")


async def test_a_query_deadline_never_cuts_indexing_short(unit: float, backend: str) -> None:
    service = EmbeddingService(dimension=8)
    chunks = [f"chunk {i}" for i in range(8)]
    indexed: list[EmbedResult] = []
    async with slow_embedder(service, backend, unit, max_batch=4) as embedder:
        async with anyio.create_task_group() as tasks:

            async def index() -> None:
                indexed.append(await embedder.embed(chunks, purpose="index", namespace="ns1"))

            tasks.start_soon(index)
            await wait_for_busy_provider(service, unit)
            # Less time than the call in flight takes: the query fails by its own deadline ...
            with pytest.raises(EmbeddingError) as caught:
                await embedder.embed(
                    ["hurried"], purpose="query", namespace="ns1", deadline=anyio.current_time() + 0.5 * unit
                )
    assert caught.value.reason is Reason.DEADLINE_EXCEEDED
    # ... and indexing is not cut short by it: every chunk embedded, no call failed.
    assert indexed and indexed[0].vectors.shape == (8, 8)
    assert embedder.stats().call_failures_total == 0


async def test_indexing_calls_are_sized_by_the_providers_speed(unit: float, backend: str) -> None:
    service = EmbeddingService(dimension=8)
    # every call takes one unit whatever its size: the cost of a text falls as calls grow
    async with slow_embedder(service, backend, unit, max_batch=16, bulk_call_s=4 * unit) as embedder:
        await embedder.embed([f"chunk {i}" for i in range(200)], purpose="index", namespace="ns1")
    sizes = [len(call.inputs) for call in service.calls_to("/v1/embeddings")[1:]]
    assert sizes[0] == 1, "before measuring, an indexing call carries one text"
    assert max(sizes) <= 16 and sizes[-2] > 4, sizes
