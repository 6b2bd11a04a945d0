"""Circuit breaker for a remote dependency (the embedding provider, the LLM).

closed --(N consecutive faults)--> open --(reset_s elapsed)--> half-open
half-open lets exactly one call (the probe) through: its success closes the circuit, its failure
opens it again for another reset_s. Every other call while open or while the probe is in flight
is refused at once with `CircuitOpen`, so a dead dependency costs callers nothing but a check.
The breaker knows nothing of what it guards: callers report outcomes with a reason string of
their own and translate `CircuitOpen` into their own error.

Not thread-safe by design: it lives on the event loop and `acquire()` never awaits, so "only one
probe" holds under any number of concurrent tasks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

import anyio


class CircuitOpen(Exception):
    """A call was refused without being made: the circuit is open, or half-open with its probe out."""

    def __init__(self, message: str, retry_in_s: float | None) -> None:
        super().__init__(message)
        self.retry_in_s = retry_in_s
        """Seconds until a probe may go through; None while the probe is in flight."""


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True, slots=True)
class Permit:
    """Leave to make one call; hand it back with exactly one outcome."""

    epoch: int
    probe: bool


@dataclass(frozen=True, slots=True)
class BreakerSnapshot:
    state: BreakerState
    consecutive_failures: int
    failure_threshold: int
    reset_s: float
    retry_in_s: float | None
    """Seconds until a probe may go through (None unless open)."""
    probe_in_flight: bool
    opened_total: int
    last_failure: str | None
    """Reason code of the last fault seen, kept after recovery for diagnosis."""


class CircuitBreaker:
    """Counts consecutive faults of the dependency and decides whether a call may go out.

    Outcomes of calls that began before the circuit last opened (an older epoch) are ignored:
    they say nothing about the dependency now, and only the half-open probe may close it.
    """

    def __init__(
        self, failure_threshold: int, reset_s: float, *, clock: Callable[[], float] = anyio.current_time
    ) -> None:
        if failure_threshold < 1:
            raise ValueError("failure_threshold must be at least 1")
        if reset_s <= 0:
            raise ValueError("reset_s must be positive")
        self._threshold = failure_threshold
        self._reset_s = reset_s
        self._clock = clock
        self._opened_at: float | None = None
        self._consecutive = 0
        self._epoch = 0
        self._probe_in_flight = False
        self._opened_total = 0
        self._last_failure: str | None = None

    @property
    def state(self) -> BreakerState:
        if self._opened_at is None:
            return BreakerState.CLOSED
        if self._clock() - self._opened_at >= self._reset_s:
            return BreakerState.HALF_OPEN
        return BreakerState.OPEN

    def check(self) -> None:
        """Raise `CircuitOpen` if a call made now would certainly be refused (no side effects)."""
        state = self.state
        if state is BreakerState.OPEN or (state is BreakerState.HALF_OPEN and self._probe_in_flight):
            raise self._refusal(state)

    def acquire(self) -> Permit:
        """Take leave for one call, or raise `CircuitOpen`.

        In half-open the first caller gets the probe permit; everyone else is refused until the
        probe's outcome is reported.
        """
        state = self.state
        if state is BreakerState.CLOSED:
            return Permit(self._epoch, probe=False)
        if state is BreakerState.HALF_OPEN and not self._probe_in_flight:
            self._probe_in_flight = True
            return Permit(self._epoch, probe=True)
        raise self._refusal(state)

    def succeeded(self, permit: Permit) -> None:
        if permit.epoch != self._epoch:
            return
        if permit.probe:
            self._probe_in_flight = False
            self._opened_at = None
        if self._opened_at is None:
            self._consecutive = 0

    def failed(self, permit: Permit, reason: str) -> None:
        """Report a fault of the dependency; `reason` is the caller's code for it."""
        if permit.epoch != self._epoch:
            return
        self._last_failure = reason
        if permit.probe:
            self._probe_in_flight = False
            self._open()
            return
        if self._opened_at is not None:
            return
        self._consecutive += 1
        if self._consecutive >= self._threshold:
            self._open()

    def abandoned(self, permit: Permit) -> None:
        """The call ended without a verdict on the dependency (cancelled, caller's deadline)."""
        if permit.epoch == self._epoch and permit.probe:
            # Free the probe slot so that the next caller can probe; stay half-open.
            self._probe_in_flight = False

    def snapshot(self) -> BreakerSnapshot:
        state = self.state
        retry_in = None
        if state is BreakerState.OPEN and self._opened_at is not None:
            retry_in = max(0.0, self._opened_at + self._reset_s - self._clock())
        return BreakerSnapshot(
            state=state,
            consecutive_failures=self._consecutive,
            failure_threshold=self._threshold,
            reset_s=self._reset_s,
            retry_in_s=retry_in,
            probe_in_flight=self._probe_in_flight,
            opened_total=self._opened_total,
            last_failure=self._last_failure,
        )

    def _open(self) -> None:
        self._opened_at = self._clock()
        self._epoch += 1
        self._opened_total += 1

    def _refusal(self, state: BreakerState) -> CircuitOpen:
        if state is BreakerState.HALF_OPEN:
            return CircuitOpen("circuit half-open: a probe call is in flight", None)
        retry_in = self.snapshot().retry_in_s
        return CircuitOpen(
            f"circuit open after {self._threshold} consecutive failures "
            f"(last: {self._last_failure}); next probe in {retry_in or 0.0:.1f}s",
            retry_in,
        )
