"""The embedder actor over real providers: the OpenAI/Ollama wire format on loopback (a real
aiohttp server on asyncio, the same service as an httpx transport on trio's mock clock) and the
real local model."""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import numpy as np
import pytest

from recalld.actors.embedding.embedder import Embedder, EmbedderSettings, EmbedResult
from recalld.actors.embedding.errors import EmbeddingError, Reason
from recalld.actors.kernel.breaker import BreakerState
from recalld.actors.kernel.supervisor import ChildSpec, Supervisor
from recalld.actors.ports.embedding import EmbeddingProvider
from recalld.actors.ports.usage import SinkUnavailable, UsageRow, UsageSink
from recalld.providers.http import HTTP_MAX_CONCURRENCY, OllamaProvider, OpenAIProvider
from recalld.providers.local import LocalProvider
from tests.support.embedding_service import EmbeddingService, serve, tokens
from tests.support.usage_sink import ListSink
from tests.support.waits import eventually_async

pytestmark = [pytest.mark.anyio, pytest.mark.anyio_backends("asyncio", "trio")]


@pytest.fixture
def service() -> EmbeddingService:
    return EmbeddingService(dimension=8)


@pytest.fixture
def sink() -> ListSink:
    return ListSink()


Harness = Callable[..., Any]


@pytest.fixture
def harness(service: EmbeddingService, sink: ListSink, backend: str, unit: float) -> Harness:
    """`async with harness(**settings) as embedder`: an OpenAI provider on loopback, the actor
    running in a task group; `kind="ollama"` for Ollama."""

    @asynccontextmanager
    async def start(kind: str = "openai", usage: UsageSink | None = None, **settings: Any) -> AsyncIterator[Embedder]:
        defaults: dict[str, Any] = {
            "timeout_s": 10 * unit,
            "max_wait_s": 0.5 * unit,
            "breaker_reset_s": 5 * unit,
            "probe_retry_s": 1 * unit,
            "prices": {"text-embedding-3-small": 20.0},
        }
        async with serve(service, backend) as (url, client):
            provider: EmbeddingProvider
            if kind == "openai":
                provider = OpenAIProvider(client, url=f"{url}/v1", model="text-embedding-3-small")
            else:
                provider = OllamaProvider(client, url=url, model="all-minilm")
            embedder = Embedder(provider, usage=usage or sink, settings=EmbedderSettings(**{**defaults, **settings}))
            async with anyio.create_task_group() as tasks:
                await tasks.start(embedder.run)
                yield embedder
                tasks.cancel_scope.cancel()

    return start


async def gather(embedder: Embedder, batches: list[list[str]], **kw: Any) -> list[EmbedResult | EmbeddingError]:
    """Call embed() concurrently, one task per batch; results in batch order."""
    out: list[EmbedResult | EmbeddingError | None] = [None] * len(batches)

    async def one(i: int) -> None:
        try:
            out[i] = await embedder.embed(
                batches[i], purpose=kw.get("purpose", "query"), namespace=kw.get("namespace", "ns1")
            )
        except EmbeddingError as error:
            out[i] = error

    async with anyio.create_task_group() as tasks:
        for i in range(len(batches)):
            tasks.start_soon(one, i)
    return [r for r in out if r is not None]


def reasons(results: list[EmbedResult | EmbeddingError]) -> list[str]:
    return [r.reason.value if isinstance(r, EmbeddingError) else "ok" for r in results]


# --- probe and space -----------------------------------------------------------------------


async def test_probe_learns_the_space_and_is_metered(
    harness: Harness, service: EmbeddingService, sink: ListSink
) -> None:
    async with harness() as embedder:
        space = embedder.space
        assert space is not None
        assert (space.provider, space.model, space.dimension, space.normalized) == (
            "openai",
            "text-embedding-3-small",
            8,
            True,
        )
        assert (space.metric, space.template_version) == ("ip", embedder.settings.template_version)
        probe = embedder.probe
        assert probe is not None and probe.status == "pass" and probe.dimension == 8
        assert embedder.health().status == "pass"
        await embedder.flush_usage()
    [row] = sink.rows
    assert (row.purpose, row.namespace, row.estimated) == ("probe", None, False)
    assert row.is_system


async def test_failed_probe_still_starts_and_recovers_in_the_background(
    harness: Harness, service: EmbeddingService, unit: float
) -> None:
    service.fault = "http500"
    async with harness() as embedder:
        assert embedder.space is None
        health = embedder.health()
        assert (health.status, health.reason) == ("fail", "provider_error")
        with pytest.raises(EmbeddingError) as caught:
            await embedder.embed(["hello"], purpose="query", namespace="ns1")
        assert caught.value.reason is Reason.PROVIDER_ERROR
        service.fault = "ok"
        # what /readyz reads
        await eventually_async(lambda: embedder.space, 20 * unit, "the probe passing", poll=0.1 * unit)
        assert embedder.health().status == "pass"
        assert embedder.probe is not None and embedder.probe.attempts >= 2
        result = await embedder.embed(["hello"], purpose="query", namespace="ns1")
        assert np.allclose(result.vectors[0], service.vector("hello"), atol=1e-6)


async def test_not_running_means_not_ready(service: EmbeddingService, sink: ListSink) -> None:
    embedder = Embedder(LocalProvider(), usage=sink)
    with pytest.raises(EmbeddingError) as caught:
        await embedder.embed(["x"], purpose="query", namespace="ns1")
    assert caught.value.reason is Reason.EMBEDDER_NOT_READY
    assert embedder.health().reason == "embedder_not_ready"


# --- micro-batching ------------------------------------------------------------------------


async def test_concurrent_callers_are_merged_into_one_provider_call(
    harness: Harness, service: EmbeddingService
) -> None:
    texts = [f"caller {i} asks {'a rather long question ' * (i % 3)}" for i in range(10)]
    async with harness(max_batch=32) as embedder:
        results = await gather(embedder, [[t] for t in texts])
        stats = embedder.stats()
    calls = service.calls_to("/v1/embeddings")[1:]  # after the probe
    assert len(calls) == 1 and sorted(calls[0].inputs) == sorted(texts)
    assert [len(t) for t in calls[0].inputs] == sorted(len(t) for t in texts)  # shortest first
    for text, result in zip(texts, results, strict=True):
        assert isinstance(result, EmbedResult)
        assert np.allclose(result.vectors[0], service.vector(text), atol=1e-6)  # each got its own
    assert stats.batch_texts_max == 10 and stats.calls_total == 1


@pytest.mark.anyio_backends("asyncio")  # it measures real time, which trio's mock clock would jump over
async def test_a_lone_request_does_not_wait_for_company(harness: Harness) -> None:
    async with harness(max_wait_s=3.0) as embedder:
        started = time.perf_counter()
        result = await embedder.embed(["just me"], purpose="query", namespace="ns1")
        elapsed = time.perf_counter() - started
    assert result.vectors.shape[0] == 1
    assert elapsed < 1.0, f"an idle embedder sent a lone request after {elapsed:.2f} s, not at once"


async def test_batches_never_exceed_max_batch(harness: Harness, service: EmbeddingService) -> None:
    async with harness(max_batch=4) as embedder:
        results = await gather(embedder, [[f"text {i}"] for i in range(10)] + [[f"big {i}" for i in range(9)]])
    sizes = sorted(len(c.inputs) for c in service.calls_to("/v1/embeddings")[1:])
    assert max(sizes) <= 4 and sum(sizes) == 19
    big = results[-1]
    assert isinstance(big, EmbedResult) and big.vectors.shape == (9, 8)
    assert np.allclose(big.vectors, [service.vector(f"big {i}") for i in range(9)], atol=1e-6)  # caller's order


async def test_a_caller_that_gives_up_while_queued_is_never_sent_to_the_provider(
    harness: Harness, service: EmbeddingService, unit: float
) -> None:
    busy = [f"busy {i}" for i in range(HTTP_MAX_CONCURRENCY)]
    async with harness(max_batch=1, max_wait_s=0) as embedder:
        service.fault, service.slow_s = "slow", 3 * unit
        async with anyio.create_task_group() as tasks:
            for text in busy:
                tasks.start_soon(functools.partial(embedder.embed, [text], purpose="index", namespace="ns1"))
            await anyio.wait_all_tasks_blocked()  # every provider slot is taken by a slow call
            with anyio.move_on_after(unit) as gave_up:
                await embedder.embed(["given up"], purpose="query", namespace="ns1")
            assert gave_up.cancelled_caught
    sent = [text for call in service.calls_to("/v1/embeddings")[1:] for text in call.inputs]
    assert sorted(sent) == sorted(busy)


async def test_a_bad_vector_fails_only_its_caller(harness: Harness, service: EmbeddingService) -> None:
    async with harness() as embedder:
        service.fail_next("nan")  # the first vector the server sends: the shortest input
        results = await gather(embedder, [["short"], ["a much longer input text"]])
    assert reasons(results) == ["embedding_not_finite", "ok"]


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("wrong_dim", "embedding_dimension_mismatch"),
        ("short", "embedding_count_mismatch"),
        ("unnormalized", "embedding_not_normalized"),
    ],
)
async def test_bad_batches_are_errors_with_reasons(
    harness: Harness, service: EmbeddingService, fault: str, reason: str
) -> None:
    async with harness(kind="ollama") as embedder:
        service.fail_next(fault)
        results = await gather(embedder, [["one"], ["two"]])
    assert reasons(results) == [reason, reason]


# --- breaker -------------------------------------------------------------------------------


async def test_breaker_opens_rejects_then_lets_one_probe_through(
    harness: Harness, service: EmbeddingService, unit: float
) -> None:
    async with harness(breaker_failures=3, max_batch=1) as embedder:
        service.fail_next("http500", "http500", "http500")
        for _ in range(3):
            with pytest.raises(EmbeddingError) as caught:
                await embedder.embed(["x"], purpose="query", namespace="ns1")
            assert caught.value.reason is Reason.PROVIDER_ERROR
        assert embedder.breaker_state is BreakerState.OPEN
        sent = len(service.calls)
        with pytest.raises(EmbeddingError) as caught:
            await embedder.embed(["x"], purpose="query", namespace="ns1")
        assert caught.value.reason is Reason.CIRCUIT_OPEN
        assert len(service.calls) == sent  # refused without a provider call
        assert embedder.health().reason == "circuit_open"

        await anyio.sleep(5 * unit)
        assert embedder.breaker_state is BreakerState.HALF_OPEN
        service.fail_next("slow")  # the probe takes a while; others arrive meanwhile
        service.slow_s = 1 * unit
        results = await gather(embedder, [[f"q{i}"] for i in range(5)])
        assert len(service.calls) == sent + 1  # exactly one probe went out
        assert sorted(reasons(results)) == ["circuit_open"] * 4 + ["ok"]
        assert embedder.breaker_state is BreakerState.CLOSED
        assert embedder.stats().breaker_opened_total == 1


async def test_failed_half_open_probe_reopens(harness: Harness, service: EmbeddingService, unit: float) -> None:
    async with harness(breaker_failures=1) as embedder:
        service.fail_next("http500", "http500")
        with pytest.raises(EmbeddingError):
            await embedder.embed(["x"], purpose="query", namespace="ns1")
        await anyio.sleep(5 * unit)
        with pytest.raises(EmbeddingError) as caught:
            await embedder.embed(["x"], purpose="query", namespace="ns1")
        assert caught.value.reason is Reason.PROVIDER_ERROR
        assert embedder.breaker_state is BreakerState.OPEN
        assert embedder.stats().breaker_opened_total == 2


@pytest.mark.parametrize(
    ("fault", "callers", "state"),
    [
        ("nan", [["short"], ["a much longer input text"]], BreakerState.CLOSED),  # the other row was fine
        ("nan", [["alone"]], BreakerState.OPEN),  # every text of the call unusable
        ("unnormalized", [["one"], ["two"]], BreakerState.OPEN),  # every row of the call unusable
    ],
)
async def test_bad_vectors_count_against_the_provider_only_when_every_row_is_bad(
    harness: Harness, service: EmbeddingService, fault: str, callers: list[list[str]], state: BreakerState
) -> None:
    # A poisoned input must not open the circuit for everyone (and a broken provider must): the
    # index catch-up holds records by their input only while the provider is seen answering.
    async with harness(kind="ollama", breaker_failures=1) as embedder:
        service.fail_next(fault)
        results = await gather(embedder, callers)
        assert reasons(results)[0].startswith("embedding_not_")  # the bad row's caller failed
        assert embedder.breaker_state is state


async def test_a_half_open_probe_that_draws_a_bad_input_lets_the_next_caller_probe(
    harness: Harness, service: EmbeddingService, unit: float
) -> None:
    async with harness(breaker_failures=1, max_batch=1) as embedder:
        service.fail_next("http500")
        with pytest.raises(EmbeddingError):
            await embedder.embed(["x"], purpose="query", namespace="ns1")
        await anyio.sleep(5 * unit)
        assert embedder.breaker_state is BreakerState.HALF_OPEN
        service.fail_next("nan")
        with pytest.raises(EmbeddingError) as caught:
            await embedder.embed(["poisoned"], purpose="index", namespace="ns1")
        assert caught.value.reason is Reason.EMBEDDING_NOT_FINITE
        assert embedder.breaker_state is BreakerState.HALF_OPEN, "one bad input is no verdict on the provider"
        await embedder.embed(["fine"], purpose="query", namespace="ns1")
        assert embedder.breaker_state is BreakerState.CLOSED


# --- deadlines and rate limit --------------------------------------------------------------


async def test_deadline_is_handed_down_and_kept(
    harness: Harness, service: EmbeddingService, unit: float, noise: float
) -> None:
    async with harness(breaker_failures=1, timeout_s=30 * unit) as embedder:
        service.fault, service.slow_s = "slow", 60 * unit
        start = anyio.current_time()
        with pytest.raises(EmbeddingError) as caught:
            await embedder.embed(["x"], purpose="query", namespace="ns1", deadline=start + 2 * unit)
        elapsed = anyio.current_time() - start
        assert caught.value.reason is Reason.DEADLINE_EXCEEDED
        # at the deadline, far below the 30-unit timeout and the 60-unit delay
        assert 2 * unit - 0.01 <= elapsed <= 2 * unit + noise, elapsed
        # The caller's deadline bound the call, so it says nothing about the provider.
        assert embedder.breaker_state is BreakerState.CLOSED


async def test_configured_timeout_bounds_the_call_and_counts_as_a_fault(
    harness: Harness, service: EmbeddingService, unit: float, noise: float
) -> None:
    async with harness(breaker_failures=1, timeout_s=1 * unit, max_wait_s=0.0) as embedder:
        service.fault, service.slow_s = "slow", 60 * unit
        start = anyio.current_time()
        with pytest.raises(EmbeddingError) as caught:
            await embedder.embed(["x"], purpose="query", namespace="ns1", deadline=start + 30 * unit)
        assert caught.value.reason is Reason.PROVIDER_TIMEOUT
        assert anyio.current_time() - start <= 1 * unit + noise  # not the 60-unit delay
        assert embedder.breaker_state is BreakerState.OPEN


async def test_past_deadline_fails_without_a_call(harness: Harness, service: EmbeddingService) -> None:
    async with harness() as embedder:
        with pytest.raises(EmbeddingError) as caught:
            await embedder.embed(["x"], purpose="query", namespace="ns1", deadline=anyio.current_time())
        assert caught.value.reason is Reason.DEADLINE_EXCEEDED
    assert len(service.calls) == 1  # the probe only


async def test_rate_limit_spaces_calls_and_refuses_past_the_deadline(
    harness: Harness, service: EmbeddingService, unit: float
) -> None:
    # rate in calls per real second: 1 per unit; the probe does not use the bucket.
    async with harness(rate_per_s=1 / unit, max_wait_s=0.0) as embedder:
        burst = round(max(1.0, 1 / unit))  # one second's worth of calls go at once
        start = anyio.current_time()
        for i in range(burst + 1):
            await embedder.embed([f"call {i}"], purpose="query", namespace="ns1")
        assert anyio.current_time() - start >= 0.9 * unit
        with pytest.raises(EmbeddingError) as caught:
            await embedder.embed(["c"], purpose="query", namespace="ns1", deadline=anyio.current_time() + 0.3 * unit)
        assert caught.value.reason is Reason.RATE_LIMITED


async def test_a_refused_input_fails_only_its_caller(harness: Harness, service: EmbeddingService) -> None:
    service.refuse = "POISON"
    texts = ["a fine question", "POISON pill", "another fine one"]
    async with harness(max_batch=32) as embedder:
        outcomes: dict[str, EmbedResult | EmbeddingError] = {}

        async def call(text: str) -> None:
            try:
                outcomes[text] = await embedder.embed([text], purpose="query", namespace="ns1")
            except EmbeddingError as error:
                outcomes[text] = error

        async with anyio.create_task_group() as tasks:
            for text in texts:
                tasks.start_soon(call, text)
        state = embedder.breaker_state
    refused = outcomes.pop("POISON pill")
    assert isinstance(refused, EmbeddingError) and refused.reason is Reason.INPUT_REJECTED
    for text, outcome in outcomes.items():
        assert isinstance(outcome, EmbedResult), outcome
        assert np.allclose(outcome.vectors[0], service.vector(text))
    calls = service.calls_to("/v1/embeddings")[1:]  # after the probe
    assert len(calls[0].inputs) == 3, "the three were asked for together first"
    assert sorted(len(c.inputs) for c in calls[1:]) == [1, 1, 1], "then each on its own"
    assert state is BreakerState.CLOSED, "a refused input says nothing about the provider"


# --- metering ------------------------------------------------------------------------------


async def test_usage_rows_carry_reported_tokens_and_cost(harness: Harness, sink: ListSink) -> None:
    texts = ["how long do refunds take", "where is my invoice"]
    async with harness() as embedder:
        await embedder.embed(texts, purpose="query", namespace="ns1")
        await embedder.flush_usage()
    [row] = sink.work()
    assert (row.purpose, row.namespace, row.provider, row.model) == (
        "query",
        "ns1",
        "openai",
        "text-embedding-3-small",
    )
    assert row.input_tokens == sum(tokens(t) for t in texts) == 13
    assert not row.estimated and row.output_tokens == 0
    assert row.cost_micros == 0  # 13 tokens at 20 per 1,000 = 0.26 micro-units
    assert not row.is_system


async def test_one_row_per_purpose_and_namespace_sharing_a_call(
    harness: Harness, service: EmbeddingService, sink: ListSink
) -> None:
    async with harness() as embedder:
        async with anyio.create_task_group() as tasks:
            # duplicate checks and evaluation share a lane, so they may share a call
            tasks.start_soon(lambda: embedder.embed(["alpha beta gamma delta"] * 3, purpose="dedupe", namespace="a"))
            tasks.start_soon(lambda: embedder.embed(["one two"], purpose="eval", namespace="b"))
            tasks.start_soon(lambda: embedder.embed(["three four"], purpose="eval", namespace="b"))
        await embedder.flush_usage()
    assert len(service.calls) == 2  # probe + one merged call
    rows = {(r.purpose, r.namespace): r for r in sink.work()}
    assert set(rows) == {("dedupe", "a"), ("eval", "b")}
    # The server reported one total; split by share, the parts add up to it exactly.
    assert sum(r.input_tokens for r in rows.values()) == 3 * 6 + 4 + 4
    assert all(r.estimated for r in rows.values())
    assert rows[("dedupe", "a")].input_tokens > rows[("eval", "b")].input_tokens


async def test_unreported_tokens_are_estimated_and_unknown_models_cost_nothing(
    harness: Harness, service: EmbeddingService, sink: ListSink
) -> None:
    async with harness(kind="ollama", prices={"text-embedding-3-small": 20.0}) as embedder:
        service.fail_next("no_usage")
        await embedder.embed(["a query with six words"], purpose="dedupe", namespace="ns1")
        await embedder.flush_usage()
    [row] = sink.work()
    assert row.estimated and row.input_tokens > 0
    assert (row.model, row.cost_micros) == (None, 0)  # all-minilm is not in the catalogue


async def test_priced_rows_cost_micro_units(harness: Harness, sink: ListSink) -> None:
    async with harness(prices={"text-embedding-3-small": 130_000.0}) as embedder:
        await embedder.embed(["word " * 98], purpose="index", namespace="ns1")  # 100 tokens
        await embedder.flush_usage()
    [row] = sink.work()
    assert (row.input_tokens, row.cost_micros) == (100, 13_000)


async def test_usage_rows_gather_and_are_written_together(harness: Harness, sink: ListSink, unit: float) -> None:
    async with harness(usage_linger_s=30 * unit) as embedder:
        for text in ("one", "two", "three"):
            await embedder.embed([text], purpose="query", namespace="ns1")
        assert sink.rows == []  # still gathering: nothing has asked for them
        await embedder.flush_usage()
        assert [r.input_tokens > 0 for r in sink.work()] == [True, True, True]
        assert sink.writes == 1  # the probe's row and the three calls' in one write


async def test_a_failing_sink_never_fails_embedding(harness: Harness, service: EmbeddingService) -> None:
    class BrokenSink:
        async def record(self, rows: Sequence[UsageRow]) -> None:
            raise RuntimeError("database is down")

    async with harness(usage=BrokenSink()) as embedder:
        result = await embedder.embed(["x"], purpose="query", namespace="ns1")
        await embedder.flush_usage()
        assert result.vectors.shape == (1, 8)
        assert embedder.stats().usage_rows_failed == 2  # the probe's row and this call's


async def test_usage_rows_wait_out_a_sink_outage(harness: Harness, sink: ListSink, unit: float) -> None:
    class FlakySink:
        """PostgreSQL down for the first two writes (`UsageStore` raises SinkUnavailable then)."""

        def __init__(self) -> None:
            self.refusals = 2

        async def record(self, rows: Sequence[UsageRow]) -> None:
            if self.refusals:
                self.refusals -= 1
                raise SinkUnavailable("ConnectionRefusedError")
            await sink.record(rows)

    flaky = FlakySink()
    async with harness(usage=flaky, usage_linger_s=0.1 * unit, usage_retry_s=unit) as embedder:
        await embedder.embed(["x"], purpose="query", namespace="ns1")
        with anyio.fail_after(10 * unit):
            await embedder.flush_usage()  # across two failed writes and their retries
        stats = embedder.stats()
    assert flaky.refusals == 0
    assert [(r.purpose, r.namespace) for r in sink.work()] == [("query", "ns1")]
    assert (stats.usage_rows_written, stats.usage_rows_failed, stats.usage_rows_dropped) == (2, 0, 0)


# --- lifecycle -----------------------------------------------------------------------------


async def test_graceful_stop_under_the_supervisor_finishes_in_flight_calls(
    service: EmbeddingService, sink: ListSink, backend: str, unit: float
) -> None:
    async with serve(service, backend) as (url, client):
        provider = OpenAIProvider(client, url=f"{url}/v1", model="text-embedding-3-small")
        embedder = Embedder(provider, usage=sink, settings=EmbedderSettings(timeout_s=10 * unit, max_wait_s=0.0))
        supervisor = Supervisor([ChildSpec("embedder", embedder.run, shutdown_timeout=10 * unit)])
        stop = anyio.CancelScope()
        results: list[EmbedResult] = []

        async def supervise(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            with stop:
                await supervisor.run(task_status=task_status)

        async def call() -> None:
            results.append(await embedder.embed(["in flight"], purpose="query", namespace="ns1"))

        async with anyio.create_task_group() as tasks:
            await tasks.start(supervise)
            service.fail_next("slow")
            service.slow_s = 2 * unit
            tasks.start_soon(call)
            await eventually_async(lambda: service.in_flight, 5 * unit, "the server seeing the call", poll=0.01 * unit)
            stop.cancel()  # SIGTERM's path: the supervisor asks the embedder to stop
        assert len(results) == 1 and results[0].vectors.shape == (1, 8)  # finished, not cancelled
        assert [r.purpose for r in sink.rows] == ["probe", "query"]  # usage flushed on the way out
        assert not embedder.stats().running
        with pytest.raises(EmbeddingError) as caught:
            await embedder.embed(["after"], purpose="query", namespace="ns1")
        assert caught.value.reason is Reason.EMBEDDER_NOT_READY


async def test_an_embedder_cancelled_while_a_request_waits_for_a_slot_fails_it_with_a_reason(
    service: EmbeddingService, sink: ListSink, backend: str, unit: float
) -> None:
    async with serve(service, backend) as (url, client):
        provider = OpenAIProvider(client, url=f"{url}/v1", model="text-embedding-3-small")
        settings = EmbedderSettings(timeout_s=10 * unit, max_batch=1, max_wait_s=0.0)
        embedder = Embedder(provider, usage=sink, settings=settings)
        waiting: list[EmbeddingError] = []
        in_calls: list[EmbeddingError] = []

        async def busy(text: str) -> None:
            with pytest.raises(EmbeddingError) as caught:
                await embedder.embed([text], purpose="index", namespace="ns1")
            in_calls.append(caught.value)

        async def wait_for_a_slot() -> None:
            with pytest.raises(EmbeddingError) as caught:
                await embedder.embed(["no slot"], purpose="query", namespace="ns1")
            waiting.append(caught.value)

        async with anyio.create_task_group() as callers:
            async with anyio.create_task_group() as actor:
                await actor.start(embedder.run)
                service.fault, service.slow_s = "slow", 5 * unit
                for i in range(HTTP_MAX_CONCURRENCY):
                    callers.start_soon(busy, f"busy {i}")
                await anyio.wait_all_tasks_blocked()  # every slot busy
                callers.start_soon(wait_for_a_slot)
                await anyio.wait_all_tasks_blocked()
                # it waits in the mailbox, not in a batch held for a slot: whatever comes next
                # and goes first (a query before indexing) can still pass it
                assert embedder.stats().queued_requests == 1
                actor.cancel_scope.cancel()  # a crash or a restart, not a graceful stop
            callers.cancel_scope.cancel()
    assert [error.reason for error in waiting] == [Reason.EMBEDDER_NOT_READY]
    assert {error.reason for error in in_calls} == {Reason.EMBEDDER_NOT_READY}


# --- the real local model ------------------------------------------------------------------


@pytest.fixture(scope="module")
def model() -> LocalProvider:
    provider = LocalProvider()
    provider.load()
    return provider


@pytest.mark.anyio_backends("asyncio", "trio", real_clock=True)  # real clocks: inference takes real time
async def test_local_model_through_the_actor(model: LocalProvider, sink: ListSink) -> None:
    sentences = [f"Sentence number {i} about {'invoices' if i % 2 else 'refunds'}." for i in range(12)]
    embedder = Embedder(model, usage=sink, settings=EmbedderSettings(max_wait_s=0.05))
    async with anyio.create_task_group() as tasks:
        await tasks.start(embedder.run)
        assert embedder.space is not None and embedder.space.dimension == 384 and embedder.space.normalized
        results = await gather(embedder, [[s] for s in sentences], purpose="index", namespace="docs")
        await embedder.flush_usage()
        tasks.cancel_scope.cancel()
    direct, counts = model.encode(sentences)
    for i, result in enumerate(results):
        assert isinstance(result, EmbedResult)
        assert np.allclose(result.vectors[0], direct[i], atol=1e-5)
    # twelve callers, two model calls: the first bulk call carries one text to measure the
    # provider's pace (BulkPace), the other eleven go together in the second
    assert embedder.stats().calls_total == 2
    rows = sink.work()  # one usage row per call
    assert [(row.estimated, row.provider, row.namespace) for row in rows] == [(False, "local", "docs")] * 2
    assert sum(row.input_tokens for row in rows) == sum(counts)
