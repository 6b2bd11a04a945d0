"""The embedder's tests run on asyncio and on trio: `backend` names the one running, `unit` is one
test "second" on it."""

from __future__ import annotations

import pytest


@pytest.fixture
def backend(anyio_backend: object) -> str:
    return "asyncio" if anyio_backend == "asyncio" else "trio"


@pytest.fixture
def unit(backend: str) -> float:
    """One test "second": real and short on asyncio, exact on trio's mock clock."""
    return 0.1 if backend == "asyncio" else 1.0


@pytest.fixture
def noise(backend: str) -> float:
    """Seconds a real clock may add to a wait on a loaded machine, for the upper bound of a
    measured time: none on trio's mock clock, a second on asyncio. Every bound it widens still
    lies well below the time the failure it guards against would take."""
    return 1.0 if backend == "asyncio" else 0.0
