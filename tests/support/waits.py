"""Waiting on a running daemon: poll until a condition holds, never sleep as a barrier.

The indexer works in the background, so a test that needs its records in the vector index
asks `GET /v1/generations` until they are there, and fails with the last answer if they
never come.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tests.support import Daemon

POLL_S = 0.05
"""How often to ask again: a cheap request (about 1 ms of the daemon's time), so asking often
costs little, while each wait ends on average half an interval after its condition holds."""


def wait_for_generation(
    daemon: Daemon,
    accept: Callable[[dict[str, Any]], bool] = lambda current: True,
    *,
    timeout: float = 120.0,
    check: Callable[[], None] = lambda: None,
) -> dict[str, Any]:
    """The `GET /v1/generations` body once a current generation exists, nothing is pending
    (every stored vector is searchable) and `accept(current)` holds.

    `check` runs between polls, for a test that asserts something else all along the wait.
    """
    deadline = time.monotonic() + timeout
    while True:
        status, body = daemon.call("GET", "/v1/generations")
        assert status == 200, body
        current = body["current"]
        if current and body["pending"] == 0 and accept(current):
            return dict(body)
        assert time.monotonic() < deadline, f"no matching generation in {timeout:.0f} s: {body}"
        check()
        time.sleep(POLL_S)  # polling for the condition above, not a barrier
