from __future__ import annotations

import pytest

from tests.support.clock import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    """A clock the test moves by hand (the breaker's and the rate limiter's pure parts)."""
    return FakeClock()
