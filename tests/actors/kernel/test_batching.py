"""Write-behind batches: rows gather and go out in one write, `flush` waits for exactly what was
added before it, a store outage keeps the rows, a broken write drops them (counted) without
stopping the writer, and the buffer is bounded."""

from __future__ import annotations

import anyio
import pytest

from recalld.actors.kernel import ChildSpec, Supervisor
from recalld.actors.kernel.batching import WriteBehind

pytestmark = [pytest.mark.anyio, pytest.mark.anyio_backends("asyncio", "trio")]


class StoreDown(Exception):
    pass


class Store:
    """The write side as a database would see it: each call is one statement of many rows."""

    def __init__(self) -> None:
        self.writes: list[list[int]] = []
        self.down = 0  # the next this many writes raise StoreDown
        self.broken = 0  # the next this many writes raise ValueError

    async def write(self, rows: list[int]) -> None:
        if self.down:
            self.down -= 1
            raise StoreDown("connection refused")
        if self.broken:
            self.broken -= 1
            raise ValueError("a row the table refuses")
        self.writes.append(list(rows))

    @property
    def rows(self) -> list[int]:
        return [row for write in self.writes for row in write]


def writer(store: Store, unit: float, **options: object) -> WriteBehind[int]:
    settings: dict[str, object] = {
        "name": "test rows",
        "linger_s": 30 * unit,
        "max_pending": 100,
        "retry_on": (StoreDown,),
        "retry_s": unit,
    }
    settings.update(options)
    return WriteBehind(store.write, **settings)  # type: ignore[arg-type]


async def test_rows_gather_for_the_linger_and_go_out_in_one_write(unit: float) -> None:
    store = Store()
    rows = writer(store, unit, linger_s=2 * unit)
    async with anyio.create_task_group() as tg:
        await tg.start(rows.run)
        for n in range(5):
            rows.add(n)
            await anyio.sleep(0.1 * unit)
        assert store.writes == []  # still lingering
        await anyio.sleep(3 * unit)
        assert store.writes == [[0, 1, 2, 3, 4]]
        tg.cancel_scope.cancel()
    assert (rows.written, rows.failed, rows.dropped, rows.pending) == (5, 0, 0, 0)


async def test_flush_cuts_the_linger_short_and_waits_for_what_came_before(unit: float) -> None:
    store = Store()
    rows = writer(store, unit)  # a 30-unit linger: only a flush writes within this test
    async with anyio.create_task_group() as tg:
        await tg.start(rows.run)
        rows.add(1)
        rows.add(2)
        with anyio.fail_after(5 * unit):
            await rows.flush()
        assert store.rows == [1, 2]
        rows.add(3)
        with anyio.fail_after(5 * unit):
            await rows.flush()
        assert store.writes == [[1, 2], [3]]
        tg.cancel_scope.cancel()


async def test_a_store_outage_keeps_the_rows_and_writes_them_once_in_order(unit: float) -> None:
    store = Store()
    rows = writer(store, unit)
    store.down = 3
    async with anyio.create_task_group() as tg:
        await tg.start(rows.run)
        rows.add(1)
        rows.add(2)
        flushed = anyio.Event()

        async def flush() -> None:
            await rows.flush()
            flushed.set()

        tg.start_soon(flush)
        await anyio.sleep(1.5 * unit)  # the first write failed, the retry waits
        assert not flushed.is_set() and rows.pending == 2
        rows.add(3)  # arrives during the outage: after the others
        with anyio.fail_after(10 * unit):
            await flushed.wait()
            await rows.flush()
        tg.cancel_scope.cancel()
    assert store.rows == [1, 2, 3]
    assert (rows.written, rows.failed, rows.dropped) == (3, 0, 0)


async def test_a_broken_write_drops_its_rows_counted_and_the_writer_goes_on(unit: float) -> None:
    store = Store()
    rows = writer(store, unit)
    store.broken = 1
    async with anyio.create_task_group() as tg:
        await tg.start(rows.run)
        rows.add(1)
        with anyio.fail_after(5 * unit):
            await rows.flush()  # settles: the row failed, nothing will retry it
        rows.add(2)
        with anyio.fail_after(5 * unit):
            await rows.flush()
        tg.cancel_scope.cancel()
    assert store.rows == [2]
    assert (rows.written, rows.failed, rows.dropped) == (1, 1, 0)


async def test_beyond_max_pending_the_oldest_rows_are_dropped_and_counted(unit: float) -> None:
    store = Store()
    rows = writer(store, unit, max_pending=3)
    for n in range(5):  # nobody writes yet
        rows.add(n)
    assert (rows.pending, rows.dropped) == (3, 2)
    store.down = 1
    async with anyio.create_task_group() as tg:
        await tg.start(rows.run)
        with anyio.fail_after(5 * unit):
            await rows.flush()  # first write fails; its rows wait again, still bounded
        tg.cancel_scope.cancel()
    assert store.rows == [2, 3, 4]
    assert (rows.written, rows.dropped) == (3, 2)


async def test_flush_returns_at_once_when_no_writer_runs(unit: float) -> None:
    store = Store()
    rows = writer(store, unit)
    rows.add(1)
    with anyio.fail_after(unit):
        await rows.flush()
    assert store.writes == [] and rows.pending == 1  # kept for the next run


async def test_a_graceful_stop_writes_what_waits_without_lingering(unit: float) -> None:
    store = Store()
    rows = writer(store, unit)  # a 30-unit linger, a 10-unit shutdown allowance
    supervisor = Supervisor([ChildSpec("rows", rows.run, shutdown_timeout=10 * unit)])
    stop = anyio.CancelScope()

    async def supervise(*, task_status: anyio.abc.TaskStatus[None]) -> None:
        with stop:
            await supervisor.run(task_status=task_status)

    async with anyio.create_task_group() as tg:
        await tg.start(supervise)
        rows.add(1)
        await anyio.sleep(0.5 * unit)
        assert store.writes == []
        started = anyio.current_time()
        stop.cancel()  # the supervisor asks its children to stop
    assert store.writes == [[1]]
    assert anyio.current_time() - started < 5 * unit  # returned, not cancelled at the allowance
