"""The resolver ticker actor: every `[resolver] interval_s`, pending disputes go to an
OpenAI-compatible LLM, and its answers are applied or sent to moderation (docs/DESIGN.md,
"Canonical assignments").

Guarantees:

- A tick runs only under the advisory lock `canonical_assignment_resolver` (daemons sharing a
  database never run one at once); under it, disputes left `in_progress` by a resolver that died
  are given back first.
- Disputes that are not actionable (fewer than two distinct suppliers or values) are superseded
  and ones whose value set was resolved before are skipped (`skipped_unchanged`, the earlier
  answer stands), both before any call.
- One call per dispute per tick, under the deadline of the model client and the circuit breaker
  (the kernel's `CircuitBreaker`). High and medium confidence are applied as `auto:llm_resolved`;
  low confidence, an unparseable or out-of-candidate answer go to `manual_review`. A failed call
  gives the dispute back for the next tick until `max_attempts` calls were made, then it goes to
  `manual_review` (`attempts_exhausted`). While the circuit is open nothing is called and the
  tick's disputes are given back, their attempts not counted.
- Every outcome goes through the single writer, `DisputeQueue.apply`; the resolver writes no
  canonical row itself. The writer applies an answer only while the dispute's value set is still
  the observations' own: an answer that arrives after the suppliers changed their values is
  recorded on the dispute (`stale_answer`), which is superseded, and never applied. Every
  completed call leaves a usage row (purpose `resolve`).
- The question names the entity, the characteristic, the unit and the candidates as normalised
  and as the suppliers wrote them; the model client speaks the endpoint's dialect
  (`recalld.actors.assignments.dialect`), so a reasoning model that refuses `temperature` or `logprobs`
  is asked without them, and the confidence is then the model's own number.
- `force(id)` resolves one dispute now through the actor's mailbox.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum

import anyio
from anyio.abc import TaskStatus

from recalld.actors.assignments.disputes import ANSWERS, DisputeState, Event, actionable, applied
from recalld.actors.assignments.strategy import Source
from recalld.actors.assignments.verdict import Option, Question, ResolverReason, Unusable, read_answer, unit_of
from recalld.actors.embedding.metering import estimate_tokens
from recalld.actors.embedding.pricing import price
from recalld.actors.kernel.breaker import BreakerState, CircuitBreaker, CircuitOpen
from recalld.actors.kernel.mailbox import ActorUnavailable, Envelope, Mailbox
from recalld.actors.kernel.ticker import run_ticker
from recalld.actors.ports.assignments import (
    ChatAnswer,
    ChatModel,
    Dispute,
    DisputeQueue,
    LlmFailure,
    Observer,
    Outcome,
    Unobserved,
)
from recalld.actors.ports.roles import TickLocks
from recalld.actors.ports.usage import UsageRow, UsageSink

log = logging.getLogger("recalld.resolver")

LOCK = "canonical_assignment_resolver"


@dataclass(frozen=True)
class ResolverSettings:
    interval_s: float
    max_attempts: int
    batch: int
    breaker_failures: int
    breaker_reset_s: float
    prices: Mapping[str, float] = field(default_factory=dict)


class ResolverBusy(Exception):
    """Another daemon's resolver holds the lock; try again shortly."""


class ResolverStopped(Exception):
    """The resolver stopped (a restart after a crash, a shutdown) after taking a forced dispute
    and before answering; a dispute it had claimed by then is released at its next tick."""


class _Tick(Enum):
    TICK = "tick"


Request = _Tick | uuid.UUID


class Resolver:
    def __init__(
        self,
        queue: DisputeQueue,
        model: ChatModel,
        locks: TickLocks,
        usage: UsageSink,
        settings: ResolverSettings,
        observer: Observer | None = None,
        provider: str = "openai",
    ) -> None:
        self._queue = queue
        self._model = model
        self._locks = locks
        self._usage = usage
        self.settings = settings
        self._observer = observer or Unobserved()
        self._provider = provider
        self.breaker = CircuitBreaker(settings.breaker_failures, settings.breaker_reset_s)
        self._requests = Mailbox[Request, DisputeState | None](capacity=16, name="resolver")
        self.last_error: str | None = None

    # -- what callers use

    async def tick(self) -> None:
        """Run a tick now (after one in progress) and wait for it."""
        await self._requests.call(_Tick.TICK)

    async def force(self, dispute_id: uuid.UUID) -> DisputeState | None:
        """Resolve one pending or manual_review dispute now; its state after. Raises `KeyError`,
        `DisputeConflict`, `ResolverBusy`, `CircuitOpen` or `ResolverStopped`."""
        try:
            return await self._requests.call(dispute_id)
        except ActorUnavailable as exc:
            raise ResolverStopped(
                "the resolver stopped before answering; force the dispute again "
                "(if it had been claimed, the resolver's next tick releases it first)"
            ) from exc

    def state(self) -> str:
        """`ok` or `circuit_open` (for /readyz)."""
        return "ok" if self.breaker.state is BreakerState.CLOSED else "circuit_open"

    # -- the actor

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        await run_ticker(self._requests, self.settings.interval_s, self._wake, task_status=task_status)

    async def _wake(self, envelope: Envelope[Request, DisputeState | None] | None) -> None:
        if envelope is None or envelope.request is _Tick.TICK:
            await self._safe_tick()
            if envelope is not None:
                envelope.reply(None)
            return
        assert isinstance(envelope.request, uuid.UUID)
        try:
            envelope.reply(await self._forced(envelope.request))
        except Exception as exc:
            envelope.fail(exc)

    async def _safe_tick(self) -> None:
        try:
            await self.tick_once()
            self.last_error = None
        except Exception as exc:  # a store outage: the disputes wait for the next tick
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("resolver tick failed: %s", self.last_error)

    async def tick_once(self) -> bool:
        """One tick; False when another daemon holds the lock."""
        started = anyio.current_time()
        async with self._locks.hold(LOCK) as held:
            if not held:
                return False
            await self._queue.release_orphans()
            if self.breaker.state is BreakerState.OPEN:
                return True  # nothing would be called: leave the disputes pending
            claimed = await self._queue.claim(limit=self.settings.batch)
            for position, dispute in enumerate(claimed):
                try:
                    await self._resolve(dispute)
                except CircuitOpen:
                    for left in claimed[position:]:
                        await self._finish(left, Outcome(Event.RELEASED), "released")
                    break
        self._observer.tick("resolver", anyio.current_time() - started)
        self._observer.disputes(await self._queue.counts())
        return True

    async def _forced(self, dispute_id: uuid.UUID) -> DisputeState | None:
        async with self._locks.hold(LOCK) as held:
            if not held:
                raise ResolverBusy("another daemon's resolver is running a tick")
            dispute = await self._queue.force(dispute_id)
            try:
                return await self._resolve(dispute)
            except CircuitOpen:
                await self._finish(dispute, Outcome(Event.RELEASED), "released")
                raise

    async def _finish(self, dispute: Dispute, outcome: Outcome, label: str) -> DisputeState:
        state = await self._queue.apply(dispute.id, outcome)
        if state is DisputeState.SUPERSEDED and outcome.event in ANSWERS:
            # the observations changed while it was asked: the writer recorded the answer only
            label = "stale_answer"
            log.info(
                "a resolver answer came after the values changed: recorded, not applied",
                extra={"entity": dispute.entity, "characteristic": dispute.characteristic},
            )
        self._observer.finished(label)
        return state

    async def _resolve(self, dispute: Dispute) -> DisputeState:
        values = [str(c["value"]) for c in dispute.candidates]
        suppliers = [str(s) for c in dispute.candidates for s in c["suppliers"]]
        if not actionable(suppliers, values):
            return await self._finish(dispute, Outcome(Event.NOT_ACTIONABLE), "superseded")
        if dispute.resolved_hash == dispute.value_set_hash and dispute.resolved_value is not None:
            unchanged = Outcome(Event.UNCHANGED, value=dispute.resolved_value, source=Source.LLM_RESOLVED)
            return await self._finish(dispute, unchanged, "skipped_unchanged")
        question = Question(
            dispute.entity,
            dispute.characteristic,
            unit_of(values),
            tuple(
                Option(
                    str(c["value"]),
                    tuple(str(r) for r in c.get("raws", ())),
                    tuple(str(s) for s in c["suppliers"]),
                    float(c["trust"]),
                )
                for c in dispute.candidates
            ),
        )
        permit = self.breaker.acquire()  # or CircuitOpen
        started = anyio.current_time()
        try:
            answer = await self._model.complete(question)
        except LlmFailure as failure:
            self.breaker.failed(permit, failure.reason)
            self._observer.llm_call(
                "timeout" if failure.reason is ResolverReason.LLM_TIMEOUT else "error", anyio.current_time() - started
            )
            log.warning("resolver call failed: %s", failure, extra={"reason": str(failure.reason)})
            if dispute.attempts + 1 < self.settings.max_attempts:
                return await self._finish(dispute, Outcome(Event.RELEASED, attempts=1), "released")
            exhausted = Outcome(Event.TO_MODERATION, reason=ResolverReason.ATTEMPTS_EXHAUSTED, attempts=1)
            return await self._finish(dispute, exhausted, "manual_review")
        except BaseException:
            self.breaker.abandoned(permit)
            raise
        self.breaker.succeeded(permit)
        self._observer.llm_call("ok", anyio.current_time() - started)
        await self._meter(answer, question)
        try:
            verdict = read_answer(answer.body, question)
        except Unusable as unusable:
            refused = Outcome(Event.TO_MODERATION, reason=unusable.reason, attempts=1)
            return await self._finish(dispute, refused, "manual_review")
        judged = Outcome(
            Event.RESOLVED,
            tier=verdict.tier,
            confidence=verdict.confidence,
            confidence_source=verdict.confidence_source,
            model_confidence=verdict.model_confidence,
            selected_value=verdict.selected_value,
            attempts=1,
        )
        if applied(verdict.tier):
            resolved = replace(judged, value=verdict.selected_value, source=Source.LLM_RESOLVED)
            return await self._finish(dispute, resolved, "resolved")
        low = replace(judged, event=Event.TO_MODERATION, reason=ResolverReason.LOW_CONFIDENCE)
        return await self._finish(dispute, low, "manual_review")

    async def _meter(self, answer: ChatAnswer, question: Question) -> None:
        """One usage row for a completed call; a failing sink is logged, never fatal."""
        estimated = answer.prompt_tokens is None
        prompt = answer.prompt_tokens
        if prompt is None:
            prompt = sum(estimate_tokens([question.characteristic, *(o.value for o in question.options)]))
        completion = answer.completion_tokens or 0
        priced = price(answer.model, prompt + completion, self.settings.prices)
        row = UsageRow(
            purpose="resolve",
            namespace=None,
            provider=self._provider,
            model=priced.model,
            input_tokens=prompt,
            output_tokens=completion,
            estimated=estimated,
            cost_micros=priced.cost_micros,
            at=dt.datetime.now(dt.UTC),
        )
        try:
            await self._usage.record([row])
        except Exception as exc:
            log.warning("resolver usage row not written: %s: %s", type(exc).__name__, exc)
