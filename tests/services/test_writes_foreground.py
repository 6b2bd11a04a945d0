"""A record's write and its duplicate check hold the daemon's foreground while they run, so that
indexing makes room for them (`recalld.actors.embedding.pace.Foreground`): over a real
PostgreSQL, the service the record routes call."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

import anyio
import anyio.lowlevel
import asyncpg
import pytest

from recalld.actors.embedding.pace import Foreground
from recalld.config import Config
from recalld.metrics import Metrics
from recalld.services.records import RecordWrites
from recalld.store.records import RecordRepository
from recalld.wire.records import RecordIn, RecordUpdate

pytestmark = [pytest.mark.anyio]

T = TypeVar("T")


class Watch:
    """What indexing would see: the holds after each change of the foreground."""

    def __init__(self, foreground: Foreground) -> None:
        self.foreground = foreground
        self.seen: list[int] = []

    async def run(self) -> None:
        while True:
            await self.foreground.changed()
            self.seen.append(self.foreground.waiting(apart_from=self))

    async def held_through(self, write: Awaitable[T]) -> T:
        """`write`'s result, once it is seen to have held the foreground and released it."""
        before = len(self.seen)
        done = await write
        assert 1 in self.seen[before:], "the write did not hold the foreground while it ran"
        assert self.foreground.waiting(apart_from=self) == 0, "the write held it past its answer"
        return done


async def test_a_create_an_update_and_a_batch_item_hold_the_foreground_while_they_run(pool: asyncpg.Pool) -> None:
    foreground = Foreground()
    writes = RecordWrites(RecordRepository(pool), Config(), Metrics(), None, None, foreground)
    watch = Watch(foreground)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(watch.run)
        await anyio.lowlevel.checkpoint()  # the watch waits for a change
        created = await watch.held_through(
            writes.create(RecordIn(namespace="ns", kind="story", title="Export to CSV", body="b"))
        )
        update = RecordUpdate(namespace="ns", kind="story", title="Export to PDF", body="b")
        await watch.held_through(writes.revise(created.id, update))
        item = RecordIn(namespace="ns", kind="story", title="Import from CSV", body="b")
        await watch.held_through(writes.write_item(item, upsert=False))
        tasks.cancel_scope.cancel()
