"""Background embedding makes room for foreground work: an indexing call waits while work a
caller waits for (a query or duplicate check in another embedder, a check's reads, a write) is
in progress, for at most `bulk_yield_s`, and never for the embedder's own queries.

The providers are the OpenAI wire format on loopback (a real aiohttp server on asyncio; the same
service as an httpx transport on trio, whose mock clock makes the times exact)."""

from __future__ import annotations

import anyio
import pytest

from recalld.actors.embedding.pace import Foreground
from tests.support.embedders import slow_embedder
from tests.support.embedding_service import EmbeddingService
from tests.support.waits import eventually_async

pytestmark = [pytest.mark.anyio, pytest.mark.anyio_backends("asyncio", "trio")]


async def test_indexing_waits_while_foreground_work_is_in_progress(unit: float, backend: str, noise: float) -> None:
    foreground = Foreground()
    service = EmbeddingService(dimension=8)
    finished: list[float] = []
    async with slow_embedder(service, backend, unit, foreground, bulk_yield_s=50 * unit) as embedder:

        async def index() -> None:
            await embedder.embed(["chunk"], purpose="index", namespace="ns1")
            finished.append(anyio.current_time())

        async with anyio.create_task_group() as tasks:
            with foreground.hold():  # a duplicate check reading titles, elsewhere in the daemon
                tasks.start_soon(index)
                await anyio.sleep(3 * unit)  # the check's time: what indexing must stay out of
                assert service.calls_to("/v1/embeddings")[1:] == [], "indexing called the provider meanwhile"
            released = anyio.current_time()
    # its call, whole, once the hold was released: not at the end of the 50 units it may wait
    assert unit <= finished[0] - released <= 5 * unit + noise


async def test_indexing_waits_at_most_bulk_yield_s(unit: float, backend: str, noise: float) -> None:
    foreground = Foreground()
    service = EmbeddingService(dimension=8)
    async with slow_embedder(service, backend, unit, foreground, bulk_yield_s=2 * unit) as embedder:
        with foreground.hold():  # held throughout: a stream of requests that never pauses
            started = anyio.current_time()
            await embedder.embed(["chunk 1"], purpose="index", namespace="ns1")
            await embedder.embed(["chunk 2"], purpose="index", namespace="ns1")
            took = anyio.current_time() - started
    # each call waited its 2 units and then went, 3 units a call: indexing is slowed, not stopped
    assert 6 * unit <= took <= 12 * unit + noise, took


async def test_a_query_or_check_in_another_embedder_holds_the_foreground(unit: float, backend: str) -> None:
    foreground = Foreground()
    titles, chunks = EmbeddingService(dimension=8), EmbeddingService(dimension=8)
    async with (
        slow_embedder(titles, backend, unit, foreground, bulk_yield_s=50 * unit) as title_embedder,
        slow_embedder(chunks, backend, unit, foreground, bulk_yield_s=50 * unit) as chunk_embedder,
    ):
        finished: dict[str, float] = {}

        async def check() -> None:
            await title_embedder.embed(["a new title"], purpose="dedupe", namespace="ns1")
            finished["check"] = anyio.current_time()

        async def index() -> None:
            await chunk_embedder.embed(["chunk"], purpose="index", namespace="ns1")
            finished["index"] = anyio.current_time()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(check)
            await eventually_async(
                lambda: foreground.waiting(apart_from=chunk_embedder), 10, "the check held", poll=0.001 * unit
            )
            tasks.start_soon(index)
    # the chunk embedder's call went only once the title embedder had answered the check
    assert finished["index"] - finished["check"] >= unit


async def test_an_embedders_own_query_is_not_kept_waiting(unit: float, backend: str, noise: float) -> None:
    foreground = Foreground()
    service = EmbeddingService(dimension=8)
    async with slow_embedder(service, backend, unit, foreground, bulk_yield_s=50 * unit) as embedder:
        with foreground.hold():  # indexing waits for this ...
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(lambda: embedder.embed(["chunk"], purpose="index", namespace="ns1"))
                await anyio.sleep(unit)
                asked = anyio.current_time()
                # ... but a query of the same embedder is served at once, not after the wait
                await embedder.embed(["the query"], purpose="query", namespace="ns1")
                answered = anyio.current_time()
                tasks.cancel_scope.cancel()
    assert answered - asked <= 3 * unit + noise


async def test_indexing_waits_out_the_moment_between_two_requests(unit: float, backend: str, noise: float) -> None:
    """A client sends its next request a moment after the last answer: the hold lapses for that
    moment, and indexing must not slip in then (it would take the cores for a whole call)."""
    foreground = Foreground()
    service = EmbeddingService(dimension=8)
    finished: list[float] = []
    settings = {"bulk_yield_s": 50 * unit, "yield_quiet_s": unit}
    async with slow_embedder(service, backend, unit, foreground, **settings) as embedder:

        async def index() -> None:
            await embedder.embed(["chunk"], purpose="index", namespace="ns1")
            finished.append(anyio.current_time())

        async with anyio.create_task_group() as tasks:
            with foreground.hold():  # one request ...
                tasks.start_soon(index)
                await anyio.sleep(2 * unit)
            await anyio.sleep(0.2 * unit)  # ... the client's turn ...
            with foreground.hold():  # ... and its next
                await anyio.sleep(2 * unit)
                assert service.calls_to("/v1/embeddings")[1:] == [], "indexing went between two requests"
            released = anyio.current_time()
    # after the last request, a quiet moment, then its call: not the 50 units it may wait
    assert 2 * unit <= finished[0] - released <= 6 * unit + noise
