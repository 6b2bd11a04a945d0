"""The assignment ticker actor: every `[assignments] interval_s`, the strategy chain
over the (entity, characteristic) pairs observed since the last tick (docs/DESIGN.md,
"Canonical assignments").

Guarantees: a tick runs only under the advisory lock `canonical_assignment`, so daemons sharing
a database never run one at the same time (a daemon that finds it taken skips its tick); each
batch is one transaction of the store (`Assignments.assign_changed`), so after a tick every
changed pair has a canonical row and, where the chain tied, its dispute. A failed tick is logged
and the next one starts afresh: what it did not take is still marked changed. `tick()` asks for
a tick now through the actor's mailbox and waits for it; `next_tick_in_s()` says when the next
tick on the interval is due.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import anyio
from anyio.abc import TaskStatus

from recalld.actors.assignments.strategy import choose
from recalld.actors.kernel.mailbox import Envelope, Mailbox
from recalld.actors.kernel.ticker import WakeSchedule, run_ticker
from recalld.actors.ports.assignments import Assignments, AssignReport, Observer, Unobserved
from recalld.actors.ports.roles import TickLocks

log = logging.getLogger("recalld.assignments")

LOCK = "canonical_assignment"
BATCH = 500
"""Pairs assigned per transaction."""


@dataclass(frozen=True)
class TickerSettings:
    interval_s: float


class AssignmentTicker:
    def __init__(
        self, store: Assignments, locks: TickLocks, settings: TickerSettings, observer: Observer | None = None
    ) -> None:
        self._store = store
        self._locks = locks
        self.settings = settings
        self._observer = observer or Unobserved()
        self._requests = Mailbox[None, AssignReport | None](capacity=16, name="assignments")
        self._schedule = WakeSchedule()
        self.last: AssignReport | None = None

    def next_tick_in_s(self) -> float | None:
        """Seconds until this daemon's next tick on the interval (0.0 while one is under way;
        None while the ticker is not running). Call it from the ticker's event loop. A daemon
        that finds the lock taken then skips its tick: another daemon's tick assigns instead."""
        return self._schedule.due_in_s()

    async def tick(self) -> AssignReport | None:
        """Run a tick now (after one in progress); None when another daemon holds the lock."""
        return await self._requests.call(None)

    async def tick_once(self) -> AssignReport | None:
        started = anyio.current_time()
        async with self._locks.hold(LOCK) as held:
            if not held:
                return None
            total = AssignReport()
            while True:
                report = await self._store.assign_changed(choose, limit=BATCH)
                total.keys += report.keys
                total.enqueued += report.enqueued
                total.settled += report.settled
                if report.keys < BATCH:
                    break
        self._observer.tick("assignments", anyio.current_time() - started)
        self._observer.assigned(total)
        self._observer.disputes(await self._store.dispute_counts())
        if total.keys:
            log.info(
                "assignment tick",
                extra={"keys": total.keys, "enqueued": total.enqueued, "settled": total.settled},
            )
        self.last = total
        return total

    async def _safe_tick(self) -> AssignReport | None:
        try:
            return await self.tick_once()
        except Exception as exc:  # a store outage: the changed marks wait for the next tick
            log.warning("assignment tick failed: %s: %s", type(exc).__name__, exc)
            return None

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        await run_ticker(
            self._requests, self.settings.interval_s, self._wake, schedule=self._schedule, task_status=task_status
        )

    async def _wake(self, envelope: Envelope[None, AssignReport | None] | None) -> None:
        report = await self._safe_tick()  # asked for or not, a wake is a tick
        if envelope is not None:
            envelope.reply(report)
