from __future__ import annotations

import pytest


@pytest.fixture
def unit(anyio_backend: object) -> float:
    """One test "second": a real second on trio's mock clock, a short real interval on asyncio."""
    return 0.1 if anyio_backend == "asyncio" else 1.0


@pytest.fixture
def tolerance(anyio_backend: object) -> float:
    """How far a measured duration may drift: none on the mock clock, scheduling noise on asyncio."""
    return 0.05 if anyio_backend == "asyncio" else 1e-9
