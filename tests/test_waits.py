"""`eventually` (tests/support/waits.py), which every wait on a running daemon goes through: it
returns the first answer taken, asks again until then, and fails naming what it waited for and
the last answer it saw."""

from __future__ import annotations

import itertools

import anyio
import pytest

from tests.support.waits import eventually, eventually_async


def test_the_first_answer_taken_is_returned_after_the_ones_before() -> None:
    answers = iter([0, 0, 3, 4])
    assert eventually(lambda: next(answers), 5, "a truthy answer", poll=0) == 3
    counted = itertools.count()
    assert eventually(lambda: next(counted), 5, "five", accept=lambda n: n >= 5, poll=0) == 5


def test_past_the_deadline_it_fails_naming_the_wait_and_the_last_answer() -> None:
    answers = itertools.count()
    with pytest.raises(AssertionError) as failed:
        eventually(lambda: {"seen": next(answers)}, 0.05, "the answer to come", accept=lambda a: False, poll=0.01)
    message = str(failed.value)
    assert "the answer to come" in message and "last seen: {'seen': " in message, message


def test_errors_named_are_answers_not_taken_and_others_end_the_wait() -> None:
    calls = itertools.count()

    def flaky() -> str:
        if next(calls) < 2:
            raise ConnectionError("not yet")
        return "up"

    assert eventually(flaky, 5, "up", ignoring=(ConnectionError,), poll=0) == "up"
    with pytest.raises(ConnectionError):
        eventually(lambda: (_ for _ in ()).throw(ConnectionError("down")), 5, "up", poll=0)
    with pytest.raises(AssertionError, match="last seen: ConnectionError"):
        eventually(lambda: (_ for _ in ()).throw(ConnectionError("down")), 0.05, "up", ignoring=(ConnectionError,))


@pytest.mark.anyio
@pytest.mark.anyio_backends("asyncio", "trio")
async def test_the_async_variant_awaits_coroutine_conditions() -> None:
    answers = iter([None, None, "ready"])

    async def answer() -> str | None:
        await anyio.lowlevel.checkpoint()
        return next(answers)

    assert await eventually_async(answer, 5, "ready", poll=0.01) == "ready"
    with pytest.raises(AssertionError, match="never; last seen: 0"):
        await eventually_async(lambda: 0, 0.05, "never", poll=0.01)
