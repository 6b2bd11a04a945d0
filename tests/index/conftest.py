from __future__ import annotations

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    # Real clocks on both: the index tests wait on worker threads, never on timers.
    return str(request.param)
