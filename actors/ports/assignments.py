"""The ports the assignment ticker and the resolver reach PostgreSQL and the LLM through
(implemented in `daemon/store/assignments.py`, `daemon/store/assignments_disputes.py` and
`daemon/providers/llm.py`)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from recalld.actors.assignments.disputes import DisputeState, Event, Tier
from recalld.actors.assignments.strategy import Choice, Source, Vote
from recalld.actors.assignments.verdict import ConfidenceSource, Question, ResolverReason


@dataclass
class AssignReport:
    keys: int = 0
    """(entity, characteristic) pairs assigned."""
    enqueued: int = 0
    """Disputes opened or refreshed (`pending`)."""
    settled: int = 0
    """Pending disputes withdrawn because the chain no longer ties."""


class Assignments(Protocol):
    async def assign_changed(self, decide: Callable[[Sequence[Vote]], Choice], *, limit: int) -> AssignReport:
        """In one transaction: take up to `limit` changed (entity, characteristic) keys, write
        each one's canonical row from `decide(votes)` (never over a manual one, nor over an
        auto:llm_resolved one of the same value set), and upsert or settle its dispute under the
        prior-state guard. An empty report when nothing changed."""
        ...

    async def dispute_counts(self) -> dict[tuple[str, str], int]:
        """Disputes by (state, tier or "")."""
        ...


@dataclass(frozen=True)
class Dispute:
    id: uuid.UUID
    entity: str
    characteristic: str
    state: DisputeState
    value_set_hash: str
    candidates: list[dict[str, Any]]
    """[{value, trust, suppliers, raws}]"""
    winning_value: str
    attempts: int
    resolved_hash: str | None
    resolved_value: str | None


@dataclass(frozen=True)
class Outcome:
    """What to write for one dispute: its event, and the canonical value to apply, if any."""

    event: Event
    value: str | None = None
    source: Source | None = None
    tier: Tier | None = None
    confidence: float | None = None
    confidence_source: ConfidenceSource | None = None
    model_confidence: float | None = None
    selected_value: str | None = None
    reason: ResolverReason | None = None
    attempts: int = 0
    """Attempts this outcome adds to the dispute's count."""
    decision: str | None = None


class DisputeConflict(Exception):
    """The dispute is not in a state this outcome applies to (someone else got there first);
    `state` is the state it is in."""

    def __init__(self, message: str, state: DisputeState) -> None:
        super().__init__(message)
        self.state = state


class DisputeQueue(Protocol):
    async def release_orphans(self) -> int:
        """`in_progress` rows back to `pending`: called under the resolver's lock, so any found
        were left by a resolver that died mid-tick."""
        ...

    async def claim(self, *, limit: int) -> list[Dispute]:
        """Up to `limit` pending disputes, oldest first, moved to `in_progress`."""
        ...

    async def force(self, dispute_id: uuid.UUID) -> Dispute:
        """A pending or manual_review dispute moved to `in_progress` (`DisputeConflict`
        otherwise, `KeyError` when there is none)."""
        ...

    async def apply(self, dispute_id: uuid.UUID, outcome: Outcome) -> DisputeState:
        """The single writer: the dispute's transition and, with `outcome.value`, its canonical
        row, in one transaction, under the dispute's row lock; the state after. `DisputeConflict`
        when the transition does not apply.

        An answer (`recalld.actors.assignments.disputes.ANSWERS`) applies only while the dispute's value
        set is the observations' own: otherwise it is recorded (its tier, confidence, selected
        value, reason `stale_answer`) and not applied, the dispute is `superseded` (the state
        returned) and its key marked changed, so the next assignment tick queues the new values
        as a dispute if they still tie."""
        ...

    async def counts(self) -> dict[tuple[str, str], int]:
        """Disputes by (state, tier or "")."""
        ...


@dataclass(frozen=True)
class ChatAnswer:
    body: Any
    """The decoded JSON of the `chat/completions` answer."""
    model: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class LlmFailure(Exception):
    """The endpoint did not answer usably (timeout, HTTP error, unreachable)."""

    def __init__(self, reason: ResolverReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class ChatModel(Protocol):
    @property
    def model(self) -> str: ...

    async def complete(self, question: Question) -> ChatAnswer:
        """One `POST {url}/chat/completions` for `question`; `LlmFailure` on any failure."""
        ...


class Observer(Protocol):
    """What the tickers report for metrics (implemented in `daemon/services/assignments_metrics.py`)."""

    def tick(self, ticker: str, seconds: float) -> None: ...
    def assigned(self, report: AssignReport) -> None: ...
    def llm_call(self, outcome: str, seconds: float) -> None: ...
    def finished(self, outcome: str) -> None: ...
    def disputes(self, counts: dict[tuple[str, str], int]) -> None: ...


class Unobserved:
    """An `Observer` that keeps nothing."""

    def tick(self, ticker: str, seconds: float) -> None:
        pass

    def assigned(self, report: AssignReport) -> None:
        pass

    def llm_call(self, outcome: str, seconds: float) -> None:
        pass

    def finished(self, outcome: str) -> None:
        pass

    def disputes(self, counts: dict[tuple[str, str], int]) -> None:
        pass
