from __future__ import annotations


class FakeClock:
    """A clock the test moves by hand (for the pure, synchronous parts)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
