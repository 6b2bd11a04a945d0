"""The embedder actor: the only path from recalld to an embedding model.

It owns the provider and, around every provider call, the things callers must not each redo:
the start-up probe that learns the vector space, micro-batching of concurrent callers, a token
bucket, a circuit breaker, the deadline handed down to the provider, validation of every vector
and one usage row per (purpose, namespace) per call.

Hosted by the supervisor as `run(task_status=...)`; everyone else calls `embed()`. anyio only.
"""

from __future__ import annotations

import functools
import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

import anyio
import numpy as np
from anyio.abc import TaskStatus

from actors.embedding import template as templates
from actors.embedding.breaker import BreakerSnapshot, BreakerState, CircuitBreaker, Permit
from actors.embedding.errors import EmbeddingError, Reason
from actors.embedding.metering import apportion, estimate_tokens
from actors.embedding.pricing import price
from actors.embedding.ratelimit import TokenBucket
from actors.embedding.settings import (
    EmbedderHealth,
    EmbedderSettings,
    EmbedderStats,
    EmbeddingSettingsSource,
    ProbeResult,
)
from actors.embedding.template import RenderedInput
from actors.embedding.validation import (
    Vectors,
    as_matrix,
    check_dimension,
    is_normalized,
    row_errors,
    validate_batch,
)
from actors.kernel.batching import WriteBehind
from actors.kernel.ports import (
    EmbeddingProvider,
    ProviderBatch,
    ProviderInfo,
    Purpose,
    SinkUnavailable,
    TokenCounter,
    UsageRow,
    UsageSink,
    VectorSpace,
)
from actors.kernel.supervisor import stop_requested

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

log = logging.getLogger("recalld.embedder")

PROBE_TEXT = "recalld start-up probe: a short English sentence about searching notes by meaning."
"""Fixed, so that every probe of a space embeds the same input."""

# Upper bounds (texts per provider call) of the batch-size histogram in `stats()`.
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)


@dataclass(frozen=True, slots=True)
class EmbedResult:
    vectors: Vectors
    """(len(texts), dimension) float32, in the caller's order, validated."""
    space: VectorSpace


@dataclass(slots=True)
class _Counters:
    calls: int = 0
    call_failures: int = 0
    by_reason: dict[str, int] = field(default_factory=dict)
    requests: int = 0
    texts: int = 0
    tokens: int = 0
    estimated_tokens: int = 0
    provider_seconds: float = 0.0
    buckets: dict[str, int] = field(default_factory=lambda: {**{str(b): 0 for b in BATCH_BUCKETS}, "+Inf": 0})
    batch_max: int = 0

    def failure(self, reason: Reason) -> None:
        self.by_reason[reason.value] = self.by_reason.get(reason.value, 0) + 1

    def batch(self, size: int) -> None:
        label = next((str(b) for b in BATCH_BUCKETS if size <= b), "+Inf")
        self.buckets[label] += 1
        self.batch_max = max(self.batch_max, size)


class _Request:
    """One caller's slice of texts (at most max_batch) waiting for a provider call."""

    __slots__ = ("abandoned", "deadline", "done", "error", "namespace", "purpose", "texts", "vectors")

    def __init__(self, texts: list[str], purpose: Purpose, namespace: str | None, deadline: float) -> None:
        self.texts = texts
        self.purpose = purpose
        self.namespace = namespace
        self.deadline = deadline
        self.done = anyio.Event()
        self.vectors: Vectors | None = None
        self.error: EmbeddingError | None = None
        self.abandoned = False

    def finish(self, vectors: Vectors | None = None, error: EmbeddingError | None = None) -> None:
        if self.done.is_set():
            return
        self.vectors, self.error = vectors, error
        self.done.set()


class Embedder:
    """The embedder actor. Make one per daemon; run it under the supervisor.

    Guarantees of `embed()`:
    - the vectors are in the caller's order, validated against `space` (count, dimension,
      finite, non-zero, unit norm when the space is normalised), or it raises EmbeddingError;
    - it returns or raises by the caller's deadline (plus scheduling noise), whatever the
      provider does; a provider call made for it never gets more than
      min(timeout_s, the latest deadline among the callers in its batch);
    - when the circuit is open it fails at once with `circuit_open`, without queueing.
    """

    def __init__(
        self,
        provider: EmbeddingProvider,
        *,
        usage: UsageSink,
        settings: EmbedderSettings | None = None,
        token_counter: TokenCounter | None = None,
        clock: Callable[[], float] = anyio.current_time,
    ) -> None:
        self.settings = settings or EmbedderSettings()
        s = self.settings
        if s.max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        templates.template(s.template_version)  # unknown versions fail here, at construction
        self._provider = provider
        self._info: ProviderInfo = provider.describe()
        self._usage = WriteBehind[UsageRow](
            usage.record,
            name="usage rows",
            linger_s=s.usage_linger_s,
            max_pending=s.usage_buffer,
            retry_on=(SinkUnavailable,),
            retry_s=s.usage_retry_s,
        )
        self._token_counter = token_counter
        self._clock = clock
        self._breaker = CircuitBreaker(s.breaker_failures, s.breaker_reset_s, clock=clock)
        self._bucket = TokenBucket(s.rate_per_s, clock=clock)
        self._counters = _Counters()
        self._queue: deque[_Request] = deque()
        self._wakeup: anyio.Event | None = None
        self._accepting = False
        self._in_flight = 0
        self._space: VectorSpace | None = None
        self._probe: ProbeResult | None = None
        self._probe_attempts = 0

    # --- public interface ---------------------------------------------------------------------

    @property
    def info(self) -> ProviderInfo:
        return self._info

    @property
    def space(self) -> VectorSpace | None:
        """The vector space this provider produces; None until a probe has succeeded."""
        return self._space

    @property
    def probe(self) -> ProbeResult | None:
        return self._probe

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
            raise self._refuse(EmbeddingError(Reason.DEADLINE_EXCEEDED, "deadline passed before the request"))
        try:
            self._breaker.check()
        except EmbeddingError as error:
            raise self._refuse(error) from None

        step = self.settings.max_batch
        parts = [_Request(list(texts[i : i + step]), purpose, namespace, deadline) for i in range(0, len(texts), step)]
        self._queue.extend(parts)
        if self._wakeup is not None:
            self._wakeup.set()
        try:
            with anyio.CancelScope(deadline=deadline):
                for part in parts:
                    await part.done.wait()
        finally:
            for part in parts:
                if not part.done.is_set():
                    # Cancelled or out of time: the dispatcher drops it or ignores its result.
                    part.abandoned = True
        for part in parts:
            if not part.done.is_set():
                raise self._refuse(EmbeddingError(Reason.DEADLINE_EXCEEDED, "no vectors before the deadline"))
            if part.error is not None:
                raise part.error
        vectors = [part.vectors for part in parts if part.vectors is not None]
        matrix = vectors[0] if len(vectors) == 1 else np.concatenate(vectors)
        return EmbedResult(matrix, space)

    def health(self) -> EmbedderHealth:
        """Readiness of the vector features (the daemon maps `fail` to warn or fail by policy)."""
        state = self._breaker.state
        status: Literal["pass", "fail"] = "fail"
        reason: str | None
        if not self._accepting:
            reason, message = Reason.EMBEDDER_NOT_READY.value, "embedder is not running"
        elif self._space is None:
            probe = self._probe
            reason = probe.reason if probe is not None else Reason.EMBEDDER_NOT_READY.value
            message = probe.message if probe is not None else "start-up probe has not finished"
        elif state is not BreakerState.CLOSED:
            snap = self._breaker.snapshot()
            reason = Reason.CIRCUIT_OPEN.value
            message = f"circuit {state.value} after provider failures (last: {snap.last_failure})"
        else:
            status, reason, message = "pass", None, f"serving {self._space.describe()}"
        return EmbedderHealth(
            status=status,
            reason=reason,
            message=message,
            space=self._space,
            breaker=state.value,
            probe=self._probe,
        )

    def stats(self) -> EmbedderStats:
        c = self._counters
        snap = self._breaker.snapshot()
        return EmbedderStats(
            provider=self._info.provider,
            model=self._info.model,
            running=self._accepting,
            space=self._space.key if self._space else None,
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
            queued_requests=len(self._queue),
            in_flight_calls=self._in_flight,
            breaker_state=snap.state.value,
            breaker_opened_total=snap.opened_total,
            usage_rows_written=self._usage.written,
            usage_rows_failed=self._usage.failed,
            usage_rows_dropped=self._usage.dropped,
        )

    async def flush_usage(self) -> None:
        """Wait until every usage row produced so far is written (or failed); at once when the
        actor is not running."""
        await self._usage.flush()

    # --- the actor ----------------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Probe, signal ready, serve until cancelled or asked to stop (then drain and return).

        A failed probe does not stop the start: the actor signals ready with no space (recall
        keeps its full-text route), `health()` says why, and the probe is retried in the
        background with backoff.
        """
        stop = stop_requested()
        # A restart probes afresh: the provider behind it may have changed since.
        self._space, self._probe = None, None
        self._wakeup = anyio.Event()
        try:
            async with self._provider, anyio.create_task_group() as tasks:
                # Not the supervisor's stop: calls still finishing during a graceful stop meter
                # too, so the usage writer stops once they are done.
                metered = anyio.Event()
                await tasks.start(functools.partial(self._usage.run, stop=metered))
                if not await self._probe_once():
                    tasks.start_soon(self._reprobe)
                self._accepting = True
                task_status.started()
                async with anyio.create_task_group() as calls:
                    calls.start_soon(self._dispatch, calls, stop)
                    await stop.wait()
                    # Graceful stop: refuse new work, let queued and in-flight calls finish.
                    self._accepting = False
                    self._wake()
                metered.set()  # what waits is written now (given up on if the store is down)
                await self.flush_usage()
                tasks.cancel_scope.cancel()
        finally:
            self._accepting = False
            self._fail_queued(EmbeddingError(Reason.EMBEDDER_NOT_READY, "embedder stopped"))

    async def _dispatch(self, calls: anyio.abc.TaskGroup, stop: anyio.Event) -> None:
        """Assemble batches from the queue and start provider calls, at most max_concurrency
        at a time. While all slots are busy the next batch keeps filling, so under load a call
        starts full the moment a slot frees and max_wait costs nothing; with no call in flight a
        batch starts at once."""
        slots = anyio.Semaphore(max(1, self._info.max_concurrency))
        max_batch, max_wait = self.settings.max_batch, self.settings.max_wait_s
        while True:
            if not self._queue:
                if not self._accepting:
                    break
                await self._wait_for_queue()
                continue
            batch: list[_Request] = []
            size = self._take(batch, 0, max_batch)
            if size == 0:
                continue
            # Idle, a request goes at once: any company would come by chance, and waiting for it
            # would add max_wait to every lone query. Busy, waiting fills the next free slot.
            if size < max_batch and max_wait > 0 and self._in_flight > 0:
                with anyio.move_on_after(max_wait):
                    while size < max_batch:
                        await self._wait_for_queue()
                        if not self._queue:
                            break  # stopping: nothing more will come
                        grown = self._take(batch, size, max_batch)
                        if grown == size and self._queue:
                            break  # the next request does not fit: send this batch now
                        size = grown
            await slots.acquire()
            size = self._take(batch, size, max_batch)
            self._in_flight += 1
            calls.start_soon(self._call, batch, slots)
        if stop.is_set():
            log.info("embedder draining stopped: queue empty")

    def _take(self, batch: list[_Request], size: int, max_batch: int) -> int:
        """Move requests that fit from the queue into `batch` (FIFO, skipping dead ones)."""
        now = self._clock()
        while self._queue:
            head = self._queue[0]
            if head.abandoned or head.done.is_set():
                self._queue.popleft()
                continue
            if head.deadline <= now:
                self._queue.popleft()
                head.finish(error=self._refuse(EmbeddingError(Reason.DEADLINE_EXCEEDED, "expired in the queue")))
                continue
            if size + len(head.texts) > max_batch:
                break
            batch.append(self._queue.popleft())
            size += len(head.texts)
        return size

    async def _wait_for_queue(self) -> None:
        while not self._queue and self._accepting:
            self._wakeup = anyio.Event()
            await self._wakeup.wait()

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    async def _call(self, batch: list[_Request], slots: anyio.Semaphore) -> None:
        try:
            await self._serve_batch(batch)
        finally:
            self._in_flight -= 1
            slots.release()
            for request in batch:
                request.finish(error=EmbeddingError(Reason.EMBEDDER_NOT_READY, "embedder stopped mid-call"))

    async def _serve_batch(self, batch: list[_Request]) -> None:
        s, space = self.settings, self._space
        assert space is not None  # requests are only queued once a space is known
        live = self._live(batch)
        if not live:
            return
        try:
            self._breaker.check()
            await self._bucket.acquire(deadline=max(r.deadline for r in live))
        except EmbeddingError as error:
            self._fail(live, self._refuse(error))
            return
        live = self._live(live)
        if not live:
            return
        try:
            permit = self._breaker.acquire()
        except EmbeddingError as error:
            self._fail(live, self._refuse(error))
            return

        texts = [text for request in live for text in request.texts]
        # Shortest first: a provider that pads per sub-batch pads least (results are unsorted).
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        now = self._clock()
        budget = min(s.timeout_s, max(r.deadline for r in live) - now)
        deadline_bound = budget < s.timeout_s
        self._counters.calls += 1
        self._counters.texts += len(texts)
        self._counters.batch(len(texts))
        refused: EmbeddingError | None = None
        try:
            result = await self._provider.embed([texts[i] for i in order], timeout=budget)
        except EmbeddingError as error:
            if error.reason is not Reason.INPUT_REJECTED or len(live) == 1:
                self._call_failed(live, permit, error, deadline_bound=deadline_bound)
                return
            refused = error
        except Exception as exc:
            log.exception("embedding provider raised an unexpected error", extra={"provider": self._info.provider})
            self._call_failed(live, permit, EmbeddingError(Reason.PROVIDER_ERROR, repr(exc)), deadline_bound=False)
            return
        except BaseException:
            self._breaker.abandoned(permit)
            raise
        finally:
            self._counters.provider_seconds += self._clock() - now
        if refused is not None:
            # One caller's input gets the whole call refused: ask for each caller's texts on
            # their own, so that only the callers whose inputs were refused fail.
            self._breaker.abandoned(permit)
            self._counters.call_failures += 1
            self._counters.failure(refused.reason)
            for request in live:
                await self._serve_batch([request])
            return

        try:
            matrix = as_matrix(result.vectors, expected_count=len(texts))
            check_dimension(matrix, space.dimension)
        except EmbeddingError as error:
            self._meter(live, order, result, texts)
            self._call_failed(live, permit, error, deadline_bound=False)
            return
        vectors = np.empty_like(matrix)
        vectors[order] = matrix
        verdicts = row_errors(vectors, normalized=space.normalized, tolerance=s.norm_tolerance)
        first_fault: EmbeddingError | None = None
        start = 0
        for request in live:
            end = start + len(request.texts)
            bad = next((i for i in range(start, end) if verdicts[i] is not None), None)
            if bad is None:
                request.finish(vectors=vectors[start:end].copy())
            else:
                verdict = verdicts[bad]
                assert verdict is not None
                first_fault = first_fault or verdict
                log.warning(
                    "embedding rejected",
                    extra={
                        "reason": verdict.reason.value,
                        "input": templates.fingerprint(texts[bad]),
                        "model": self._info.model,
                    },
                )
                request.finish(error=EmbeddingError(verdict.reason, f"input {bad - start}: {verdict.message}"))
            start = end
        if first_fault is None:
            self._breaker_outcome(permit, None)
        else:
            self._counters.call_failures += 1
            self._counters.failure(first_fault.reason)
            self._breaker_outcome(permit, first_fault)
        self._meter(live, order, result, texts)

    def _live(self, batch: list[_Request]) -> list[_Request]:
        now = self._clock()
        live = []
        for request in batch:
            if request.abandoned or request.done.is_set():
                continue
            if request.deadline <= now:
                request.finish(error=self._refuse(EmbeddingError(Reason.DEADLINE_EXCEEDED, "expired before the call")))
                continue
            live.append(request)
        return live

    def _call_failed(
        self, live: list[_Request], permit: Permit, error: EmbeddingError, *, deadline_bound: bool
    ) -> None:
        if error.reason is Reason.PROVIDER_TIMEOUT and deadline_bound:
            # The callers' deadline, not the provider, set this limit: no verdict on the provider.
            error = EmbeddingError(
                Reason.DEADLINE_EXCEEDED, f"provider did not answer before the deadline ({error.message})"
            )
            self._breaker.abandoned(permit)
        elif error.provider_fault:
            self._breaker_outcome(permit, error)
        else:
            self._breaker.abandoned(permit)
        self._counters.call_failures += 1
        self._counters.failure(error.reason)
        log.warning(
            "embedding call failed",
            extra={
                "reason": error.reason.value,
                "provider": self._info.provider,
                "texts": sum(len(r.texts) for r in live),
            },
        )
        self._fail(live, error)

    def _breaker_outcome(self, permit: Permit, error: EmbeddingError | None) -> None:
        before = self._breaker.state
        if error is None:
            self._breaker.succeeded(permit)
        else:
            self._breaker.failed(permit, error.reason.value)
        after = self._breaker.state
        if after is not before:
            snap = self._breaker.snapshot()
            log.warning(
                "embedding circuit %s",
                after.value,
                extra={"breaker": after.value, "last_failure": snap.last_failure},
            )

    def _fail(self, requests: list[_Request], error: EmbeddingError) -> None:
        for request in requests:
            request.finish(error=error)

    def _fail_queued(self, error: EmbeddingError) -> None:
        while self._queue:
            self._queue.popleft().finish(error=error)

    def _refuse(self, error: EmbeddingError) -> EmbeddingError:
        self._counters.failure(error.reason)
        return error

    def _ready_space(self) -> VectorSpace:
        if not self._accepting:
            raise self._refuse(EmbeddingError(Reason.EMBEDDER_NOT_READY, "embedder is not running"))
        if self._space is None:
            probe = self._probe
            reason = Reason(probe.reason) if probe is not None and probe.reason else Reason.EMBEDDER_NOT_READY
            detail = probe.message if probe is not None else "not probed yet"
            raise self._refuse(EmbeddingError(reason, f"no vector space: start-up probe failed ({detail})"))
        return self._space

    # --- metering -----------------------------------------------------------------------------

    def _meter(self, live: list[_Request], order: list[int], result: ProviderBatch, texts: list[str]) -> None:
        """One usage row per (purpose, namespace) in this call.

        Exact per-text counts from the provider are used as they are. A batch total is exact for
        a call of one group and apportioned (flagged estimated) across several; with nothing
        reported, tokens are counted with the tokenizer or estimated, and flagged.
        """
        counts: list[int]
        estimated: bool
        if result.token_counts is not None and len(result.token_counts) == len(texts):
            counts = [0] * len(texts)
            for position, index in enumerate(order):
                counts[index] = int(result.token_counts[position])
            estimated = False
        else:
            counts = self._count_tokens(texts)
            estimated = True
        groups: dict[tuple[str, str | None], int] = {}
        start = 0
        for request in live:
            key = (request.purpose, request.namespace)
            groups[key] = groups.get(key, 0) + sum(counts[start : start + len(request.texts)])
            start += len(request.texts)
        if result.token_counts is None and result.input_tokens is not None:
            groups = apportion(result.input_tokens, groups)
            estimated = len(groups) > 1
        at = datetime.now(UTC)
        for (purpose, namespace), tokens in groups.items():
            self._emit_usage(purpose, namespace, tokens, estimated, at)  # type: ignore[arg-type]

    def _emit_usage(self, purpose: Purpose, namespace: str | None, tokens: int, estimated: bool, at: datetime) -> None:
        priced = price(self._info.model, tokens, self.settings.prices)
        row = UsageRow(
            purpose=purpose,
            namespace=namespace,
            provider=self._info.provider,
            model=priced.model,
            input_tokens=tokens,
            estimated=estimated,
            cost_micros=priced.cost_micros,
            at=at,
        )
        self._counters.tokens += tokens
        if estimated:
            self._counters.estimated_tokens += tokens
        self._usage.add(row)

    def _count_tokens(self, texts: list[str]) -> list[int]:
        if self._token_counter is not None:
            try:
                return self._token_counter.count_tokens(texts)
            except Exception:
                log.exception("token counter failed; estimating from length")
        return estimate_tokens(texts)

    # --- probing ------------------------------------------------------------------------------

    def _probe_result(
        self,
        started: float,
        dimension: int | None,
        normalized: bool | None,
        space: VectorSpace | None,
        *,
        message: str,
        reason: str | None = None,
    ) -> ProbeResult:
        """What /readyz shows of a probe: `pass` exactly when it produced a space."""
        info = self._info
        return ProbeResult(
            status="pass" if space is not None else "fail",
            reason=reason,
            message=message,
            provider=info.provider,
            model=info.model,
            dimension=dimension,
            normalized=normalized,
            max_input_tokens=info.max_input_tokens,
            latency_ms=(self._clock() - started) * 1000,
            attempts=self._probe_attempts,
            at=datetime.now(UTC),
            space=space,
        )

    async def _probe_once(self) -> bool:
        s, info = self.settings, self._info
        self._probe_attempts += 1
        started = self._clock()
        timeout = s.probe_timeout_s or s.timeout_s
        dimension: int | None = None
        normalized: bool | None = None
        try:
            try:
                result = await self._provider.embed([PROBE_TEXT], timeout=timeout)
            except EmbeddingError:
                raise
            except Exception as exc:
                raise EmbeddingError(Reason.PROVIDER_ERROR, repr(exc)) from exc
            self._meter_probe(result)
            matrix = validate_batch(result.vectors, expected_count=1, dimension=None, normalized=False)
            dimension = int(matrix.shape[1])
            normalized = is_normalized(matrix, tolerance=s.norm_tolerance)
        except EmbeddingError as error:
            self._probe = self._probe_result(
                started, dimension, normalized, None, reason=error.reason.value, message=error.message
            )
            log.warning(
                "embedding probe failed",
                extra={"reason": error.reason.value, "provider": info.provider, "model": info.model},
            )
            return False
        space = VectorSpace(
            provider=info.provider,
            model=info.model,
            dimension=dimension,
            normalized=normalized,
            template_version=s.template_version,
            builder_version=s.builder_version,
        )
        self._space = space
        self._probe = self._probe_result(started, dimension, normalized, space, message=f"probe ok: {space.describe()}")
        log.info(
            "embedding probe passed",
            extra={
                "space": space.key,
                "provider": info.provider,
                "model": info.model,
                "dimension": dimension,
            },
        )
        return True

    def _meter_probe(self, result: ProviderBatch) -> None:
        if result.token_counts is not None:
            tokens, estimated = sum(int(n) for n in result.token_counts), False
        elif result.input_tokens is not None:
            tokens, estimated = result.input_tokens, False
        else:
            tokens, estimated = sum(self._count_tokens([PROBE_TEXT])), True
        self._emit_usage("probe", None, tokens, estimated, datetime.now(UTC))

    async def _reprobe(self) -> None:
        wait = self.settings.probe_retry_s
        while self._space is None:
            await anyio.sleep(wait)
            if await self._probe_once():
                return
            wait = min(wait * 2, max(self.settings.probe_retry_s, self.settings.breaker_reset_s))
