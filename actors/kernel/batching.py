"""Write-behind: rows handed over now, written together a moment later.

Telemetry (usage rows, search rows) must not slow the request that produced it, and writing
each row on its own costs a database round trip per request. A :class:`WriteBehind` takes rows
without waiting (`add`), lets them gather for `linger_s`, and hands them to its `write` function
in one call. `flush` cuts the wait short and returns once every row added before it is written
or dropped.

What happens when a write fails depends on why:

- an exception listed in `retry_on` (the store is down) keeps the rows, oldest first, and the
  write is tried again after `retry_s`;
- any other exception drops the batch; the rows count as `failed` and the error is logged, so
  telemetry never takes its producer down with it.

Rows waiting are bounded by `max_pending`: beyond it the oldest are dropped and counted in
`dropped`. Rows added while `run` is not running wait for the next run.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import anyio
from anyio.abc import TaskStatus

from recalld.actors.kernel.supervisor import stop_requested

log = logging.getLogger("recalld.kernel.batching")

RowT = TypeVar("RowT")


class WriteBehind(Generic[RowT]):
    """Batches rows for `write(rows)`; run `run` as a task (or supervised child) to write them."""

    def __init__(
        self,
        write: Callable[[list[RowT]], Awaitable[None]],
        *,
        name: str,
        linger_s: float,
        max_pending: int,
        retry_on: tuple[type[BaseException], ...] = (),
        retry_s: float = 1.0,
    ) -> None:
        if max_pending < 1:
            raise ValueError("max_pending must be at least 1")
        self._write = write
        self._name = name
        self._linger_s = linger_s
        self._max_pending = max_pending
        self._retry_on = retry_on
        self._retry_s = retry_s
        self._pending: list[RowT] = []
        self._added = 0  # rows handed over so far
        self._settled = 0  # of those, rows written, failed or dropped, oldest first
        self._wanted = 0  # rows a flush waits for
        self._running = False
        self._wake: anyio.Event | None = None
        self._hurry: anyio.Event | None = None
        self._progress: anyio.Event | None = None
        self.written = 0
        self.failed = 0
        self.dropped = 0

    @property
    def pending(self) -> int:
        return len(self._pending)

    def add(self, row: RowT) -> None:
        """Hand a row over; never waits. The oldest waiting row goes when `max_pending` are waiting."""
        self._drop_oldest(keep=self._max_pending - 1)
        self._pending.append(row)
        self._added += 1
        if self._wake is not None:
            self._wake.set()

    async def flush(self) -> None:
        """Return once every row added before the call is written, failed or dropped; at once
        when no writer runs (nothing would write them before the next run)."""
        target = self._added
        self._wanted = max(self._wanted, target)
        if self._hurry is not None:
            self._hurry.set()
        while self._settled < target and self._running:
            if self._progress is None:
                self._progress = anyio.Event()
            await self._progress.wait()

    async def run(
        self, *, stop: anyio.Event | None = None, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Write batches until `stop` is set and nothing waits (default: the supervisor's stop
        request, see `stop_requested`), or until cancelled. Once `stop` is set rows no longer
        linger. An owner that still produces rows while it stops passes an event of its own."""
        stop = stop_requested() if stop is None else stop
        self._running = True
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._wake_on, stop)
                task_status.started()
                await self._write_until(stop)
                tasks.cancel_scope.cancel()
        finally:
            self._running = False
            self._advance(0)  # wake flushes: nothing writes their rows now

    async def _write_until(self, stop: anyio.Event) -> None:
        while True:
            if not self._pending:
                if stop.is_set():
                    return
                self._wake = anyio.Event()
                await self._wake.wait()
                continue
            if self._wanted <= self._settled and not stop.is_set():
                self._hurry = anyio.Event()
                with anyio.move_on_after(self._linger_s):
                    await self._hurry.wait()
                self._hurry = None
            if not await self._write_batch():
                if stop.is_set():
                    return
                await anyio.sleep(self._retry_s)

    async def _wake_on(self, stop: anyio.Event) -> None:
        """A stop ends the wait for rows and the linger at once."""
        await stop.wait()
        for event in (self._wake, self._hurry):
            if event is not None:
                event.set()

    async def _write_batch(self) -> bool:
        """Write what waits; False when the store was down (the rows wait again)."""
        batch, self._pending = self._pending, []
        try:
            await self._write(batch)
        except self._retry_on as exc:
            self._pending[:0] = batch  # oldest first, as they came
            self._drop_oldest(keep=self._max_pending)
            log.warning("%s not written (%s); %d rows wait", self._name, type(exc).__name__, len(self._pending))
            return False
        except Exception:
            self.failed += len(batch)
            log.exception("%s not written; %d rows dropped", self._name, len(batch))
        else:
            self.written += len(batch)
        self._advance(len(batch))
        return True

    def _drop_oldest(self, *, keep: int) -> None:
        """Drop the oldest waiting rows beyond `keep`; they count as dropped, and as settled."""
        excess = len(self._pending) - max(keep, 0)
        if excess > 0:
            del self._pending[:excess]
            self.dropped += excess
            self._advance(excess)

    def _advance(self, settled: int) -> None:
        self._settled += settled
        if self._progress is not None:
            self._progress.set()
            self._progress = None
