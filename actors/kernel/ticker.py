"""The body of a ticker actor: work every interval, or at once when asked through its mailbox.

The assignment ticker and the dispute resolver run alike: wait up to their interval for a
request, then wake (a tick, or the request), until the supervisor asks them to stop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
from anyio.abc import TaskStatus

from actors.kernel.mailbox import Envelope, Mailbox
from actors.kernel.supervisor import stop_requested

RequestT = TypeVar("RequestT")
ReplyT = TypeVar("ReplyT")


async def run_ticker(
    requests: Mailbox[RequestT, ReplyT],
    interval_s: float,
    wake: Callable[[Envelope[RequestT, ReplyT] | None], Awaitable[None]],
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Call `wake(None)` once `interval_s` passes without a request and `wake(envelope)` for each
    request received (answering it is `wake`'s part), one at a time; the interval starts again
    after every wake. Ready once receiving is under way; on the supervisor's stop request
    (`stop_requested`) the wake in progress is cancelled and this returns."""
    stop = stop_requested()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(_wake_up, requests, interval_s, wake)
        task_status.started()
        await stop.wait()
        tasks.cancel_scope.cancel()


async def _wake_up(
    requests: Mailbox[RequestT, ReplyT],
    interval_s: float,
    wake: Callable[[Envelope[RequestT, ReplyT] | None], Awaitable[None]],
) -> None:
    async with requests.receiving() as inbox:
        while True:
            envelope = None
            with anyio.move_on_after(interval_s):
                envelope = await inbox.receive()
            await wake(envelope)
