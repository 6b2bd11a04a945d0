"""LISTEN/NOTIFY: wakes the index manager when a record changes or the generation pointer moves,
in this daemon or in any other sharing the database. The index manager's poll timer is the
fallback, so a lost notification only delays a change, never loses it."""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
import asyncpg
from anyio.abc import TaskStatus

from recalld.store.db import STORE_DOWN_ERRORS
from recalld.store.records import RECORDS_CHANNEL
from recalld.store.vectors import GENERATION_CHANNEL

log = logging.getLogger("recalld.notifications")


async def listen(
    dsn: str, wake: Callable[[], None], *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Hold one connection LISTENing on both channels, reconnecting with backoff while the
    store is away (an outage is not a crash: it must not exhaust the supervisor's restarts)."""
    task_status.started()
    backoff = 0.5
    while True:
        try:
            conn = await asyncpg.connect(dsn, timeout=5)
        except STORE_DOWN_ERRORS as exc:
            log.debug("LISTEN connection failed (%s); retrying in %.1fs", type(exc).__name__, backoff)
            await anyio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)
            continue
        backoff = 0.5
        lost = anyio.Event()
        try:
            conn.add_termination_listener(lambda _conn, lost=lost: lost.set())
            for channel in (RECORDS_CHANNEL, GENERATION_CHANNEL):
                await conn.add_listener(channel, lambda *_args: wake())
            wake()  # catch up on whatever changed while we were not listening
            await lost.wait()
            log.warning("the LISTEN connection to PostgreSQL was lost; reconnecting")
        except STORE_DOWN_ERRORS:
            pass
        finally:
            conn.terminate()
