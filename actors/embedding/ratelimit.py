"""Token bucket for provider calls, on anyio's clock (so trio's MockClock can drive it in tests)."""

from __future__ import annotations

import math
from collections.abc import Callable

import anyio

from recalld.actors.embedding.errors import EmbeddingError, Reason


class TokenBucket:
    """`rate_per_s` calls per second on average, with bursts of up to `burst` calls.

    Reservations are first come, first served: a caller that reserves is told how long to wait
    and the token is its own from then on, so waiting callers are never overtaken. A rate of 0
    means unlimited. Callers whose deadline would pass before their turn are refused at once with
    `rate_limited` instead of waiting for nothing.
    """

    def __init__(
        self,
        rate_per_s: float,
        *,
        burst: float | None = None,
        clock: Callable[[], float] = anyio.current_time,
    ) -> None:
        if rate_per_s < 0:
            raise ValueError("rate_per_s must not be negative")
        self.rate_per_s = rate_per_s
        # One second's worth by default: smooth for a remote API, never below one whole call.
        self.burst = max(1.0, rate_per_s if burst is None else burst)
        self._clock = clock
        self._tokens = self.burst
        self._updated: float | None = None

    @property
    def unlimited(self) -> bool:
        return self.rate_per_s == 0

    def reserve(self, *, max_wait: float = math.inf) -> float | None:
        """Take one token now; return the seconds to wait before using it, or None (nothing taken)
        when that wait would exceed `max_wait`."""
        if self.unlimited:
            return 0.0
        now = self._clock()
        if self._updated is not None:
            self._tokens = min(self.burst, self._tokens + (now - self._updated) * self.rate_per_s)
        self._updated = now
        wait = max(0.0, (1.0 - self._tokens) / self.rate_per_s)
        if wait > max_wait:
            return None
        self._tokens -= 1.0
        return wait

    async def acquire(self, *, deadline: float = math.inf) -> None:
        """Wait for this call's turn; raise `rate_limited` if it would come after `deadline`."""
        wait = self.reserve(max_wait=deadline - self._clock())
        if wait is None:
            raise EmbeddingError(
                Reason.RATE_LIMITED,
                f"rate limit of {self.rate_per_s:g} calls/s leaves no slot before the deadline",
            )
        if wait > 0:
            await anyio.sleep(wait)
