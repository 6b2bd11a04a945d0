"""`run_ticker`, the body of the assignment ticker and the dispute resolver: a wake every interval,
a request at once (the interval starting again after it), and a supervisor's stop ends it
without waiting for the wake in progress. Trio's mock clock: the times asserted are exact."""

from __future__ import annotations

from functools import partial

import anyio
import pytest
from anyio.abc import TaskStatus

from recalld.actors.kernel.mailbox import Envelope, Mailbox
from recalld.actors.kernel.supervisor import ChildSpec, Supervisor
from recalld.actors.kernel.ticker import WakeSchedule, run_ticker

pytestmark = [pytest.mark.anyio, pytest.mark.anyio_backends("trio")]

INTERVAL_S = 10.0


class Wakes:
    def __init__(self, busy_s: float = 0.0) -> None:
        self.at: list[tuple[float, str | None]] = []
        self.busy_s = busy_s
        self.finished = 0

    async def __call__(self, envelope: Envelope[str, str] | None) -> None:
        self.at.append((anyio.current_time(), None if envelope is None else envelope.request))
        await anyio.sleep(self.busy_s)
        self.finished += 1
        if envelope is not None:
            envelope.reply(f"woke for {envelope.request}")


async def test_wakes_every_interval_and_at_once_when_asked() -> None:
    mailbox = Mailbox[str, str](capacity=4, name="ticker")
    wakes = Wakes()
    started = anyio.current_time()
    async with anyio.create_task_group() as tasks:
        await tasks.start(run_ticker, mailbox, INTERVAL_S, wakes)
        await anyio.sleep(25.0)
        with anyio.fail_after(1.0):  # answered at once, not at the next tick
            assert await mailbox.call("now") == "woke for now"
        await anyio.sleep(12.0)
        tasks.cancel_scope.cancel()
    assert [(at - started, request) for at, request in wakes.at] == [
        (10.0, None),
        (20.0, None),
        (25.0, "now"),  # not at 30: asked for, it ran at once
        (35.0, None),  # the interval starts again after every wake
    ]


async def test_a_stop_cancels_the_wake_in_progress() -> None:
    mailbox = Mailbox[str, str](capacity=4, name="ticker")
    wakes = Wakes(busy_s=1_000.0)

    async def ticker(*, task_status: TaskStatus[None]) -> None:
        await run_ticker(mailbox, INTERVAL_S, wakes, task_status=task_status)

    supervisor = Supervisor([ChildSpec("ticker", ticker, shutdown_timeout=100.0)])
    async with anyio.create_task_group() as tasks:
        await tasks.start(supervisor.run)
        await anyio.sleep(INTERVAL_S + 1.0)  # a wake is in progress
        stopping = anyio.current_time()
        tasks.cancel_scope.cancel()
    assert len(wakes.at) == 1 and wakes.finished == 0
    assert anyio.current_time() - stopping < 100.0, "it returned when asked, not at the grace's end"


async def test_the_schedule_says_when_the_next_wake_on_the_interval_is() -> None:
    mailbox = Mailbox[str, str](capacity=4, name="ticker")
    schedule = WakeSchedule()
    wakes = Wakes(busy_s=2.0)
    assert schedule.due_in_s() is None, "not running: no wake to come"
    async with anyio.create_task_group() as tasks:
        await tasks.start(partial(run_ticker, mailbox, INTERVAL_S, wakes, schedule=schedule))
        await anyio.sleep(3.0)
        assert schedule.due_in_s() == 7.0
        await anyio.sleep(8.0)  # the wake at 10 is busy until 12
        assert schedule.due_in_s() == 0.0, "a wake is under way"
        await anyio.sleep(2.0)  # 13: the wake ended at 12, the next one is due at 22
        assert schedule.due_in_s() == 9.0
        tasks.start_soon(mailbox.call, "now")  # woken at 13, busy until 15
        await anyio.sleep(1.0)
        assert wakes.at[-1][1] == "now" and schedule.due_in_s() == 0.0, "a wake asked for is under way"
        await anyio.sleep(1.5)  # 15.5: the interval started again when the wake ended, at 15
        assert wakes.finished == 2 and schedule.due_in_s() == 9.5
        tasks.cancel_scope.cancel()
    assert schedule.due_in_s() is None, "stopped: no wake to come"
