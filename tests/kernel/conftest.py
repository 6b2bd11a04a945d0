from __future__ import annotations

import pytest
from trio.testing import MockClock


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> object:
    if request.param == "trio":
        # Autojump: once every task is blocked the clock leaps to the next deadline, so restart
        # windows and shutdown timeouts of seconds cost no real time and are exact.
        return ("trio", {"clock": MockClock(autojump_threshold=0)})
    return "asyncio"


@pytest.fixture
def unit(anyio_backend: object) -> float:
    """One test "second": a real second on trio's mock clock, a short real interval on asyncio."""
    return 0.1 if anyio_backend == "asyncio" else 1.0


@pytest.fixture
def tolerance(anyio_backend: object) -> float:
    """How far a measured duration may drift: none on the mock clock, scheduling noise on asyncio."""
    return 0.05 if anyio_backend == "asyncio" else 1e-9
