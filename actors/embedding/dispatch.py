"""The embedder's serving side: micro-batches from its mailbox, and the provider calls made for them."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import anyio
import numpy as np
from anyio.abc import TaskGroup

from recalld.actors.embedding import template as templates
from recalld.actors.embedding.errors import EmbeddingError, Reason, refused_by_circuit
from recalld.actors.embedding.meter import Meter
from recalld.actors.embedding.pace import BULK_LANE, LANES, QUERY_LANE, BulkPace, Foreground, lane_of
from recalld.actors.embedding.ratelimit import TokenBucket
from recalld.actors.embedding.settings import EmbedderSettings
from recalld.actors.embedding.validation import Vectors, as_matrix, check_dimension, row_errors
from recalld.actors.kernel.breaker import CircuitBreaker, CircuitOpen, Permit
from recalld.actors.kernel.mailbox import Envelope, Inbox
from recalld.actors.ports.embedding import EmbeddingProvider, ProviderInfo, VectorSpace
from recalld.actors.ports.usage import Purpose

log = logging.getLogger("recalld.embedder")


@dataclass(frozen=True, slots=True)
class EmbedRequest:
    """One caller's slice of texts (at most max_batch), as queued in the embedder's mailbox."""

    texts: list[str]
    purpose: Purpose
    namespace: str | None
    deadline: float


Call = Envelope[EmbedRequest, Vectors]


def texts_in(request: EmbedRequest) -> int:
    """A request's weight in a batch: its texts (max_batch bounds the texts per provider call)."""
    return len(request.texts)


def _answer(call: Call, vectors: Vectors | None = None, error: EmbeddingError | None = None) -> None:
    """Reply once; a call already answered keeps its first answer."""
    if call.replied:
        return
    if error is not None:
        call.fail(error)
    else:
        assert vectors is not None
        call.reply(vectors)


class Dispatcher:
    """Takes requests from the embedder's mailbox, merges them into provider calls and answers them.

    Guarantees:
    - callers are served by priority (`recalld.actors.embedding.pace`: queries, then duplicate checks,
      then indexing): a call carries requests of one lane only, so a query is never merged into
      indexing work, never shares its deadline and never fails because of it;
    - a batch is taken only when a provider slot is free, so a query waits behind at most the
      calls in flight (one, for the local model); an indexing call carries what the provider
      lately took `bulk_call_s` for (`BulkPace`), so that wait stays well under a query's deadline;
    - a provider call carries at most max_batch texts and requests are merged in mailbox order
      (a request that does not fit waits for the next call, it is not overtaken);
    - at most the provider's max_concurrency calls run at once; with no call in flight a batch
      starts at once (max_wait only ever applies to queries while another call runs), but an
      indexing batch first waits while foreground work is held by someone else (`Foreground`),
      at most `bulk_yield_s`, and no longer once a query or check of its own is queued;
    - a request whose deadline passed, or whose caller gave up, is dropped before the call;
      one that expired fails with `deadline_exceeded`;
    - a provider call gets min(timeout_s, the latest deadline among its callers) and the token
      bucket and breaker are consulted first; one caller's rejected input or bad vector fails only
      that caller;
    - every request taken is answered (vectors or an EmbeddingError), also when the embedder is
      stopped mid-call.
    """

    def __init__(
        self,
        provider: EmbeddingProvider,
        info: ProviderInfo,
        settings: EmbedderSettings,
        *,
        breaker: CircuitBreaker,
        bucket: TokenBucket,
        meter: Meter,
        space: Callable[[], VectorSpace | None],
        clock: Callable[[], float],
        foreground: Foreground | None = None,
        owner: object = None,
    ) -> None:
        """`foreground`: what indexing makes room for; `owner`: who this dispatcher's own
        queries and checks hold it as (their waiting never holds its indexing back)."""
        self._foreground = foreground
        self._owner = owner
        self._provider = provider
        self._info = info
        self._settings = settings
        self._breaker = breaker
        self._bucket = bucket
        self._meter = meter
        self._space = space
        self._clock = clock
        self.in_flight = 0
        self.pace = BulkPace(settings.bulk_call_s, settings.max_batch)
        """Texts per indexing call, from the provider's recent speed."""

    async def serve(self, inbox: Inbox[EmbedRequest, Vectors], calls: TaskGroup) -> None:
        """Assemble batches and start their provider calls in `calls`, until the mailbox is closed
        and empty."""
        slots = anyio.Semaphore(max(1, self._info.max_concurrency))
        batch: list[Call] = []  # taken from the mailbox, not yet handed to a provider call
        try:
            while True:
                # A free provider slot first, then the batch: what is taken goes out at once, so a
                # query that comes while every slot is busy is next in line, behind nothing but
                # the calls in flight (a batch held for a slot would go before it).
                await slots.acquire()
                try:
                    await self._take(inbox, batch)
                except anyio.EndOfStream:
                    slots.release()
                    break
                self.in_flight += 1
                calls.start_soon(self._call, batch, slots)
                batch = []
        finally:
            # Stopped (cancelled) while holding a batch: its callers hear it now, with a reason.
            self._fail(batch, EmbeddingError(Reason.EMBEDDER_NOT_READY, "embedder stopped"))
        log.info("embedder draining stopped: queue empty")

    async def _take(self, inbox: Inbox[EmbedRequest, Vectors], batch: list[Call]) -> None:
        """Fill `batch` with live requests of one lane, the first with work (`receive_lane`):
        queries before duplicate checks before indexing, never two lanes in one call."""
        max_batch, max_wait = self._settings.max_batch, self._settings.max_wait_s
        limits = [max_batch] * LANES
        size = 0
        while size == 0:
            limits[BULK_LANE] = self.pace.batch
            lane, taken = await inbox.receive_lane(limits, weight=texts_in)
            size = self._keep(batch, taken, 0)
        if lane == BULK_LANE:
            await self._make_room()
        if lane != QUERY_LANE:
            return  # bulk callers queue their texts at once: nothing to wait for
        # Idle, a query goes at once: any company would come by chance, and waiting for it would
        # add max_wait to every lone query. Busy, concurrent queries share the call.
        if size < max_batch and max_wait > 0 and self.in_flight > 0:
            with anyio.move_on_after(max_wait):
                while size < max_batch:
                    try:
                        taken = await inbox.receive_batch(max_batch - size, weight=texts_in, lane=QUERY_LANE)
                    except anyio.EndOfStream:
                        break  # stopping: nothing more will come
                    if not taken:
                        break  # the next query does not fit, or other work came: send this batch now
                    size = self._keep(batch, taken, size)
        self._fill(inbox, batch, size, max_batch)

    async def _make_room(self) -> None:
        """Before an indexing call: wait while someone else's foreground work is in progress
        and none of this embedder's own, until nothing has been held for `yield_quiet_s`, for
        at most `bulk_yield_s`. The work a caller waits for then has the cores to itself; the
        indexing call goes after, whatever is held."""
        foreground, owner = self._foreground, self._owner
        if foreground is None or not foreground.waiting(apart_from=owner) or foreground.holding(owner):
            return  # nobody else waits (or this embedder's own query does): at once
        with anyio.move_on_after(self._settings.bulk_yield_s):
            while not foreground.holding(owner):
                if foreground.waiting(apart_from=owner):
                    await foreground.changed()
                    continue
                # Released: go once it stays so for a moment (a client's next request follows
                # its last answer closely), or at once when nothing is held since.
                with anyio.move_on_after(self._settings.yield_quiet_s) as quiet:
                    await foreground.changed()
                if quiet.cancelled_caught:
                    return

    def _fill(self, inbox: Inbox[EmbedRequest, Vectors], batch: list[Call], size: int, max_batch: int) -> int:
        """Add the queries queued now that fit (mailbox order) to `batch`; returns its size in texts."""
        while size < max_batch:
            taken = inbox.receive_batch_nowait(max_batch - size, weight=texts_in, lane=QUERY_LANE)
            if not taken:
                break
            size = self._keep(batch, taken, size)
        return size

    def _keep(self, batch: list[Call], taken: Sequence[Call], size: int) -> int:
        """Append the live ones of `taken` to `batch`; answer the rest. Returns the batch's size."""
        now = self._clock()
        for call in taken:
            if call.caller_gone:
                _answer(call, error=EmbeddingError(Reason.DEADLINE_EXCEEDED, "caller gone"))  # nobody reads it
            elif call.request.deadline <= now:
                _answer(
                    call, error=self._meter.refuse(EmbeddingError(Reason.DEADLINE_EXCEEDED, "expired in the queue"))
                )
            else:
                batch.append(call)
                size += len(call.request.texts)
        return size

    async def _call(self, batch: list[Call], slots: anyio.Semaphore) -> None:
        try:
            await self._serve_batch(batch)
        finally:
            self.in_flight -= 1
            slots.release()
            for call in batch:
                _answer(call, error=EmbeddingError(Reason.EMBEDDER_NOT_READY, "embedder stopped mid-call"))

    async def _serve_batch(self, batch: list[Call]) -> None:
        s, space = self._settings, self._space()
        assert space is not None  # requests are only queued once a space is known
        live = self._live(batch)
        if not live:
            return
        try:
            self._breaker.check()
            await self._bucket.acquire(deadline=max(c.request.deadline for c in live))
        except CircuitOpen as refusal:
            self._fail(live, self._meter.refuse(refused_by_circuit(refusal)))
            return
        except EmbeddingError as error:
            self._fail(live, self._meter.refuse(error))
            return
        live = self._live(live)
        if not live:
            return
        try:
            permit = self._breaker.acquire()
        except CircuitOpen as refusal:
            self._fail(live, self._meter.refuse(refused_by_circuit(refusal)))
            return

        counters = self._meter.counters
        texts = [text for call in live for text in call.request.texts]
        # Shortest first: a provider that pads per sub-batch pads least (results are unsorted).
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        now = self._clock()
        budget = min(s.timeout_s, max(c.request.deadline for c in live) - now)
        deadline_bound = budget < s.timeout_s
        counters.calls += 1
        counters.texts += len(texts)
        counters.batch(len(texts))
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
            elapsed = self._clock() - now
            counters.provider_seconds += elapsed
            if lane_of(live[0].request.purpose) == BULK_LANE:
                self.pace.observe(len(texts), elapsed)
        parts = [call.request for call in live]
        if refused is not None:
            # One caller's input gets the whole call refused: ask for each caller's texts on
            # their own, so that only the callers whose inputs were refused fail.
            self._breaker.abandoned(permit)
            counters.call_failures += 1
            counters.failure(refused.reason)
            for call in live:
                await self._serve_batch([call])
            return

        try:
            matrix = as_matrix(result.vectors, expected_count=len(texts))
            check_dimension(matrix, space.dimension)
        except EmbeddingError as error:
            self._meter.call(parts, order, result, texts)
            self._call_failed(live, permit, error, deadline_bound=False)
            return
        vectors = np.empty_like(matrix)
        vectors[order] = matrix
        verdicts = row_errors(vectors, normalized=space.normalized, tolerance=s.norm_tolerance)
        first_fault: EmbeddingError | None = None
        start = 0
        for call in live:
            end = start + len(call.request.texts)
            bad = next((i for i in range(start, end) if verdicts[i] is not None), None)
            if bad is None:
                _answer(call, vectors=vectors[start:end].copy())
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
                _answer(call, error=EmbeddingError(verdict.reason, f"input {bad - start}: {verdict.message}"))
            start = end
        if first_fault is not None:
            counters.call_failures += 1
            counters.failure(first_fault.reason)
        bad_rows = sum(verdict is not None for verdict in verdicts)
        if bad_rows < len(texts):
            # The provider answered: the rows it got wrong are their inputs' fault.
            self._breaker_outcome(permit, None)
        elif len(texts) == 1 and permit.probe:
            # A half-open probe that drew one bad input says nothing about the provider: the slot
            # goes to the next caller. (Counted, a poisoned record first in the catch-up's queue
            # would reopen the circuit for everyone at every probe.)
            self._breaker.abandoned(permit)
        else:
            # Every text unusable: counted, so that a provider answering NaN to everything opens.
            self._breaker_outcome(permit, first_fault)
        self._meter.call(parts, order, result, texts)

    def _live(self, batch: list[Call]) -> list[Call]:
        now = self._clock()
        live = []
        for call in batch:
            if call.caller_gone or call.replied:
                continue
            if call.request.deadline <= now:
                _answer(
                    call, error=self._meter.refuse(EmbeddingError(Reason.DEADLINE_EXCEEDED, "expired before the call"))
                )
                continue
            live.append(call)
        return live

    def _call_failed(self, live: list[Call], permit: Permit, error: EmbeddingError, *, deadline_bound: bool) -> None:
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
        self._meter.counters.call_failures += 1
        self._meter.counters.failure(error.reason)
        log.warning(
            "embedding call failed",
            extra={
                "reason": error.reason.value,
                "provider": self._info.provider,
                "texts": sum(len(c.request.texts) for c in live),
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

    @staticmethod
    def _fail(calls: list[Call], error: EmbeddingError) -> None:
        for call in calls:
            _answer(call, error=error)
