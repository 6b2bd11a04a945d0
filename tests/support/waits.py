"""Waiting on something that runs beside the test: ask again until a condition holds, never sleep
as a barrier.

`eventually` asks a condition until its answer is accepted and returns that answer; past its
deadline it fails, naming what was awaited and the last answer seen. `eventually_async` is the same
inside an anyio test (the condition may be a coroutine function). `wait_for_generation` waits for
the daemon's background indexer: a test that needs its records in the vector index asks
`GET /v1/generations` until they are there.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

if TYPE_CHECKING:
    from tests.support import Daemon

T = TypeVar("T")

POLL_S = 0.05
"""How often to ask again: a cheap request (about 1 ms of the daemon's time), so asking often
costs little, while each wait ends on average half an interval after its condition holds."""

NOTHING_YET = "(no answer yet)"


class _Seen:
    """The last answer of a condition, or the last error it raised that the caller tolerates."""

    def __init__(self) -> None:
        self.value: object = NOTHING_YET

    def failure(self, what: str, timeout: float) -> AssertionError:
        return AssertionError(f"not within {timeout:g} s: {what}; last seen: {self.value!r}"[:4000])


def eventually(
    condition: Callable[[], T],
    timeout: float,
    what: str,
    *,
    accept: Callable[[T], object] = bool,
    poll: float = POLL_S,
    ignoring: tuple[type[Exception], ...] = (),
) -> T:
    """`condition()`'s first answer that `accept` takes (by default: a truthy one), asked every
    `poll` seconds. Raises AssertionError once `timeout` seconds have passed without one, saying
    `what` was awaited and the last answer seen. An error of a type in `ignoring` counts as an
    answer not taken (a daemon still starting refuses connections); any other error ends the wait."""
    deadline = time.monotonic() + timeout
    seen = _Seen()
    while True:
        try:
            answer = condition()
        except ignoring as error:
            seen.value = error
        else:
            if accept(answer):
                return answer
            seen.value = answer
        if time.monotonic() >= deadline:
            raise seen.failure(what, timeout)
        time.sleep(poll)  # polling for the condition above, not a barrier


async def eventually_async(
    condition: Callable[[], Any],
    timeout: float,  # noqa: ASYNC109 (a deadline for polling, not a cancel scope)
    what: str,
    *,
    accept: Callable[[Any], object] = bool,
    poll: float = POLL_S,
) -> Any:
    """`eventually` inside an anyio test: `condition` is a function or a coroutine function, asked
    every `poll` seconds of the event loop's clock. The deadline is real time (`time.monotonic`),
    so on trio's MockClock each `poll` costs no real time while a worker thread that lets the mock
    clock run cannot make the wait end early."""
    deadline = time.monotonic() + timeout
    seen = _Seen()
    while True:
        answer = condition()
        if inspect.isawaitable(answer):
            answer = await answer
        if accept(answer):
            return answer
        seen.value = answer
        if time.monotonic() >= deadline:
            raise seen.failure(what, timeout)
        await anyio.sleep(poll)  # polling for the condition above, not a barrier


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

    def generations() -> dict[str, Any]:
        check()
        status, body = daemon.call("GET", "/v1/generations")
        assert status == 200, body
        return dict(body)

    return eventually(
        generations,
        timeout,
        "a current generation with nothing pending that the test accepts",
        accept=lambda body: bool(body["current"]) and body["pending"] == 0 and accept(body["current"]),
    )
