"""The embedder actor: the only path from recalld to an embedding model.

It owns the provider and, around every provider call, the things callers must not each redo:
the start-up probe that learns the vector space, micro-batching of concurrent callers, a token
bucket, a circuit breaker, the deadline handed down to the provider, validation of every vector
and one usage row per (purpose, namespace) per call.

Hosted by the supervisor as `run(task_status=...)`; everyone else calls `embed()`, which posts
the caller's texts to the actor's mailbox (`recalld.actors.kernel.mailbox`, the one way an actor receives
work). The parts live in `recalld.actors.embedding`: `dispatch` (batching and provider calls), `probe`
(the start-up probe), `meter` (counters and usage rows). anyio only.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import anyio
import numpy as np
from anyio.abc import TaskStatus

from recalld.actors.embedding import template as templates
from recalld.actors.embedding.dispatch import Dispatcher, EmbedRequest
from recalld.actors.embedding.errors import EmbeddingError, Reason, refused_by_circuit
from recalld.actors.embedding.meter import Meter
from recalld.actors.embedding.pace import BULK_LANE, LANES, Foreground, lane_of
from recalld.actors.embedding.probe import PROBE_TEXT, Prober
from recalld.actors.embedding.ratelimit import TokenBucket
from recalld.actors.embedding.settings import (
    EmbedderHealth,
    EmbedderSettings,
    EmbedderStats,
    EmbeddingSettingsSource,
    ProbeResult,
)
from recalld.actors.embedding.template import RenderedInput
from recalld.actors.embedding.validation import Vectors
from recalld.actors.kernel.breaker import BreakerSnapshot, BreakerState, CircuitBreaker, CircuitOpen
from recalld.actors.kernel.mailbox import Envelope, Mailbox
from recalld.actors.kernel.supervisor import stop_requested
from recalld.actors.ports.embedding import EmbeddingProvider, ProviderInfo, TokenCounter, VectorSpace
from recalld.actors.ports.usage import Purpose, UsageSink

__all__ = [
    "PROBE_TEXT",
    "EmbedResult",
    "Embedder",
    "EmbedderHealth",
    "EmbedderSettings",
    "EmbedderStats",
    "EmbeddingSettingsSource",
    "ProbeResult",
]


@dataclass(frozen=True, slots=True)
class EmbedResult:
    vectors: Vectors
    """(len(texts), dimension) float32, in the caller's order, validated."""
    space: VectorSpace


class Embedder:
    """The embedder actor. Make one per daemon; run it under the supervisor.

    Guarantees of `embed()`:
    - the vectors are in the caller's order, validated against `space` (count, dimension,
      finite, non-zero, unit norm when the space is normalised), or it raises EmbeddingError;
    - it returns or raises by the caller's deadline (plus scheduling noise), whatever the
      provider does; a provider call made for it never gets more than
      min(timeout_s, the latest deadline among the callers in its batch);
    - when the circuit is open it fails at once with `circuit_open`, without queueing;
    - callers are served by priority, query before duplicate check before indexing, and a
      provider call never mixes them (see `Dispatcher`): a query waits behind at most the call
      in flight, and a query's deadline never cuts an indexing call short;
    - with a `foreground` shared by the daemon's embedders, its queries and checks hold it while
      they wait, and an indexing call waits (at most `bulk_yield_s`) while someone else holds it.
    """

    def __init__(
        self,
        provider: EmbeddingProvider,
        *,
        usage: UsageSink,
        settings: EmbedderSettings | None = None,
        token_counter: TokenCounter | None = None,
        clock: Callable[[], float] = anyio.current_time,
        foreground: Foreground | None = None,
    ) -> None:
        """`foreground`: the daemon's count of work callers wait for (None: indexing never
        waits for it)."""
        self.foreground = foreground
        self.settings = settings or EmbedderSettings()
        s = self.settings
        if s.max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        templates.template(s.template_version)  # unknown versions fail here, at construction
        self._provider = provider
        self._info: ProviderInfo = provider.describe()
        self._clock = clock
        self._breaker = CircuitBreaker(s.breaker_failures, s.breaker_reset_s, clock=clock)
        self._meter = Meter(self._info, s, usage, token_counter)
        self._counters = self._meter.counters
        self._prober = Prober(provider, self._info, s, self._meter, clock)
        self._dispatcher = Dispatcher(
            provider,
            self._info,
            s,
            breaker=self._breaker,
            bucket=TokenBucket(s.rate_per_s, clock=clock),
            meter=self._meter,
            space=lambda: self._prober.space,
            clock=clock,
            foreground=foreground,
            owner=self,
        )
        # A fresh mailbox per run (see `run`); None before the first.
        self._mailbox: Mailbox[EmbedRequest, Vectors] | None = None
        self._accepting = False

    # --- public interface ---------------------------------------------------------------------

    @property
    def info(self) -> ProviderInfo:
        return self._info

    @property
    def space(self) -> VectorSpace | None:
        """The vector space this provider produces; None until a probe has succeeded."""
        return self._prober.space

    @property
    def probe(self) -> ProbeResult | None:
        return self._prober.result

    @property
    def breaker_state(self) -> BreakerState:
        return self._breaker.state

    def breaker(self) -> BreakerSnapshot:
        return self._breaker.snapshot()

    def render_document(self, title: str, chunk: str) -> RenderedInput:
        """Model input for a chunk, with the template version the space declares."""
        return templates.render_document(title, chunk, version=self.settings.template_version)

    def render_query(self, query: str) -> RenderedInput:
        return templates.render_query(query, version=self.settings.template_version)

    def render_title(self, title: str) -> RenderedInput:
        return templates.render_title(title, version=self.settings.template_version)

    async def embed(
        self,
        texts: Sequence[str],
        *,
        purpose: Purpose,
        namespace: str | None,
        deadline: float | None = None,
    ) -> EmbedResult:
        """Embed already-rendered `texts` (see `render_*`) by `deadline` (absolute anyio time;
        None: now + timeout_s). Raises EmbeddingError with a reason code on any failure."""
        space = self._ready_space()
        if any(not text for text in texts):
            raise ValueError("empty input text: render something before embedding it")
        now = self._clock()
        deadline = now + self.settings.timeout_s if deadline is None else deadline
        self._counters.requests += 1
        if not texts:
            return EmbedResult(np.empty((0, space.dimension), dtype=np.float32), space)
        if deadline <= now:
            raise self._meter.refuse(EmbeddingError(Reason.DEADLINE_EXCEEDED, "deadline passed before the request"))
        try:
            self._breaker.check()
        except CircuitOpen as refusal:
            raise self._meter.refuse(refused_by_circuit(refusal)) from None

        lane = lane_of(purpose)
        # Indexing goes in parts the provider takes about bulk_call_s for: the most a query waits.
        step = self._dispatcher.pace.batch if lane == BULK_LANE else self.settings.max_batch
        mailbox = self._mailbox
        assert mailbox is not None  # accepting implies a run, and each run makes its mailbox
        calls: list[Envelope[EmbedRequest, Vectors]] = []
        # A caller waits for a query or a check: held until answered, indexing makes room.
        foreground = self.foreground
        held = foreground.hold(self) if foreground is not None and lane != BULK_LANE else contextlib.nullcontext()
        with held:
            try:
                # The mailbox is unbounded, so posting never waits: no yield between the checks
                # above and the queueing, and a stop (which closes the mailbox) cannot come in between.
                for i in range(0, len(texts), step):
                    request = EmbedRequest(list(texts[i : i + step]), purpose, namespace, deadline)
                    calls.append(await mailbox.post(request, lane=lane))
                with anyio.CancelScope(deadline=deadline):
                    for call in calls:
                        await call.wait()
            finally:
                for call in calls:
                    # Cancelled or out of time: a part still queued is never served; one taken is
                    # dropped before its provider call, or its result is.
                    mailbox.withdraw(call)
        vectors: list[Vectors] = []
        for call in calls:
            if not call.replied:
                raise self._meter.refuse(EmbeddingError(Reason.DEADLINE_EXCEEDED, "no vectors before the deadline"))
            vectors.append(call.result())  # raises the part's EmbeddingError
        matrix = vectors[0] if len(vectors) == 1 else np.concatenate(vectors)
        return EmbedResult(matrix, space)

    def health(self) -> EmbedderHealth:
        """Readiness of the vector features (the daemon maps `fail` to warn or fail by policy)."""
        state = self._breaker.state
        status: Literal["pass", "fail"] = "fail"
        reason: str | None
        if not self._accepting:
            reason, message = Reason.EMBEDDER_NOT_READY.value, "embedder is not running"
        elif self._prober.space is None:
            probe = self._prober.result
            reason = probe.reason if probe is not None else Reason.EMBEDDER_NOT_READY.value
            message = probe.message if probe is not None else "start-up probe has not finished"
        elif state is not BreakerState.CLOSED:
            snap = self._breaker.snapshot()
            reason = Reason.CIRCUIT_OPEN.value
            message = f"circuit {state.value} after provider failures (last: {snap.last_failure})"
        else:
            status, reason, message = "pass", None, f"serving {self._prober.space.describe()}"
        return EmbedderHealth(
            status=status,
            reason=reason,
            message=message,
            space=self._prober.space,
            breaker=state.value,
            probe=self._prober.result,
        )

    def stats(self) -> EmbedderStats:
        c = self._counters
        snap = self._breaker.snapshot()
        return EmbedderStats(
            provider=self._info.provider,
            model=self._info.model,
            running=self._accepting,
            space=self._prober.space.key if self._prober.space else None,
            calls_total=c.calls,
            call_failures_total=c.call_failures,
            failures_by_reason=dict(c.by_reason),
            requests_total=c.requests,
            texts_total=c.texts,
            input_tokens_total=c.tokens,
            estimated_tokens_total=c.estimated_tokens,
            provider_seconds_total=c.provider_seconds,
            batch_size_buckets=dict(c.buckets),
            batch_texts_max=c.batch_max,
            queued_requests=self._mailbox.queued if self._mailbox is not None else 0,
            in_flight_calls=self._dispatcher.in_flight,
            breaker_state=snap.state.value,
            breaker_opened_total=snap.opened_total,
            usage_rows_written=self._meter.usage.written,
            usage_rows_failed=self._meter.usage.failed,
            usage_rows_dropped=self._meter.usage.dropped,
        )

    async def flush_usage(self) -> None:
        """Wait until every usage row produced so far is written (or failed); at once when the
        actor is not running."""
        await self._meter.usage.flush()

    # --- the actor ----------------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Probe, signal ready, serve until cancelled or asked to stop (then drain and return).

        A failed probe does not stop the start: the actor signals ready with no space (recall
        keeps its full-text route), `health()` says why, and the probe is retried in the
        background with backoff.

        Each run serves a mailbox of its own, unbounded (a caller's deadline bounds its wait, and
        the breaker refuses work at once when the provider is down): requests queued when a run
        ends are failed with `embedder_not_ready`, not handed to the next run, whose probe may
        find another space.
        """
        stop = stop_requested()
        # A restart probes afresh: the provider behind it may have changed since.
        self._prober.reset()
        mailbox = self._mailbox = Mailbox[EmbedRequest, Vectors](capacity=math.inf, name="embedder", lanes=LANES)
        try:
            async with self._provider, anyio.create_task_group() as tasks:
                # Not the supervisor's stop: calls still finishing during a graceful stop meter
                # too, so the usage writer stops once they are done.
                metered = anyio.Event()
                await tasks.start(functools.partial(self._meter.usage.run, stop=metered))
                if not await self._prober.probe_once():
                    tasks.start_soon(self._prober.reprobe)
                self._accepting = True
                task_status.started()
                async with mailbox.receiving() as inbox, anyio.create_task_group() as calls:
                    calls.start_soon(self._dispatcher.serve, inbox, calls)
                    await stop.wait()
                    # Graceful stop: refuse new work, let queued and in-flight calls finish.
                    self._accepting = False
                    mailbox.close()
                metered.set()  # what waits is written now (given up on if the store is down)
                await self.flush_usage()
                tasks.cancel_scope.cancel()
        finally:
            self._accepting = False
            mailbox.close()
            mailbox.fail_queued(EmbeddingError(Reason.EMBEDDER_NOT_READY, "embedder stopped"))

    def _ready_space(self) -> VectorSpace:
        if not self._accepting:
            raise self._meter.refuse(EmbeddingError(Reason.EMBEDDER_NOT_READY, "embedder is not running"))
        space = self._prober.space
        if space is None:
            probe = self._prober.result
            reason = Reason(probe.reason) if probe is not None and probe.reason else Reason.EMBEDDER_NOT_READY
            detail = probe.message if probe is not None else "not probed yet"
            raise self._meter.refuse(EmbeddingError(reason, f"no vector space: start-up probe failed ({detail})"))
        return space
