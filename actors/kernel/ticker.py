"""The body of a ticker actor: work every interval, or at once when asked through its mailbox.

The assignment ticker and the dispute resolver run alike: wait up to their interval for a
request, then wake (a tick, or the request), until the supervisor asks them to stop. A
`WakeSchedule` given to `run_ticker` tells others when the next wake on the interval is due.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
from anyio.abc import TaskStatus

from recalld.actors.kernel.mailbox import Envelope, Mailbox
from recalld.actors.kernel.supervisor import stop_requested

RequestT = TypeVar("RequestT")
ReplyT = TypeVar("ReplyT")


class WakeSchedule:
    """When a ticker wakes next by itself, on anyio's clock (`anyio.current_time()`), kept up to
    date by the `run_ticker` it is given to; read from the same event loop."""

    def __init__(self) -> None:
        self._due_at: float | None = None

    def due_in_s(self) -> float | None:
        """Seconds until the next wake on the interval (a request may come sooner); 0.0 while a
        wake is under way; None while no ticker runs on this schedule."""
        if self._due_at is None:
            return None
        return max(0.0, self._due_at - anyio.current_time())

    def _waiting_until(self, due_at: float | None) -> None:
        self._due_at = due_at


async def run_ticker(
    requests: Mailbox[RequestT, ReplyT],
    interval_s: float,
    wake: Callable[[Envelope[RequestT, ReplyT] | None], Awaitable[None]],
    *,
    schedule: WakeSchedule | None = None,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Call `wake(None)` once `interval_s` passes without a request and `wake(envelope)` for each
    request received (answering it is `wake`'s part), one at a time; the interval starts again
    after every wake. Ready once receiving is under way; on the supervisor's stop request
    (`stop_requested`) the wake in progress is cancelled and this returns. `schedule`, when
    given, says when the next wake is due while this runs."""
    stop = stop_requested()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(_wake_up, requests, interval_s, wake, schedule or WakeSchedule())
        task_status.started()
        await stop.wait()
        tasks.cancel_scope.cancel()


async def _wake_up(
    requests: Mailbox[RequestT, ReplyT],
    interval_s: float,
    wake: Callable[[Envelope[RequestT, ReplyT] | None], Awaitable[None]],
    schedule: WakeSchedule,
) -> None:
    async with requests.receiving() as inbox:
        try:
            while True:
                envelope = None
                with anyio.move_on_after(interval_s) as waiting:
                    schedule._waiting_until(waiting.deadline)
                    envelope = await inbox.receive()
                schedule._waiting_until(anyio.current_time())  # due now: the wake is under way
                await wake(envelope)
        finally:
            schedule._waiting_until(None)
