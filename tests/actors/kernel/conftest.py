from __future__ import annotations

from collections.abc import Callable

import pytest


@pytest.fixture
def unit(anyio_backend: object) -> float:
    """One test "second": a real second on trio's mock clock, a short real interval on asyncio."""
    return 0.1 if anyio_backend == "asyncio" else 1.0


EARLY_S = 0.01
"""How much earlier than asked asyncio may wake a sleeper (its clock resolution, rounded up)."""
LATE_S = 1.0
"""How much later a real clock may show: a loaded 2-core machine stalls a process for hundreds
of milliseconds now and then. The exact figure is asserted on the mock clock (the trio run)."""


@pytest.fixture
def lasted(anyio_backend: object) -> Callable[[float, float], bool]:
    """`lasted(measured, expected)`: exactly on trio's mock clock; on asyncio's real clock, not
    shorter than expected and at most `LATE_S` longer."""
    if anyio_backend == "asyncio":
        return lambda measured, expected: expected - EARLY_S <= measured <= expected + LATE_S
    return lambda measured, expected: measured == pytest.approx(expected, abs=1e-9)
