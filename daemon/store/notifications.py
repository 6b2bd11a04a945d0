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


RETRY_FIRST_S = 0.5
RETRY_MAX_S = 5.0
"""How long the LISTEN connection waits before trying again after a failure to connect or to
LISTEN, doubling from the first to the most: a server that is away (or a standby, which refuses
LISTEN) is not asked in a tight loop, and a primary back is listened to within seconds."""


async def listen(
    dsn: str, wake: Callable[[], None], *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Hold one connection LISTENing on both channels, reconnecting with backoff while the
    store is away (an outage is not a crash: it must not exhaust the supervisor's restarts).

    After a failover the DSN's `target_session_attrs` leads the new connection to the promoted
    standby. Whatever was notified while no connection listened is caught up by the wake-up
    each new LISTEN sends, and at the latest by the index manager's poll (`[index] poll_s`)."""
    task_status.started()
    backoff = RETRY_FIRST_S
    while True:
        try:
            conn = await asyncpg.connect(dsn, timeout=5)
        except STORE_DOWN_ERRORS as exc:
            log.debug("LISTEN connection failed (%s); retrying in %.1fs", type(exc).__name__, backoff)
        else:
            if await _listen_until_lost(conn, wake):
                log.warning("the LISTEN connection to PostgreSQL was lost; reconnecting")
                backoff = RETRY_FIRST_S
                continue
            log.debug("LISTEN refused; retrying in %.1fs", backoff)
        await anyio.sleep(backoff)
        backoff = min(backoff * 2, RETRY_MAX_S)


async def _listen_until_lost(conn: asyncpg.Connection, wake: Callable[[], None]) -> bool:
    """LISTEN on `conn` until it is lost (True), or False when the LISTEN itself failed: a
    standby refuses it during recovery, or the server went away meanwhile. Closes `conn`."""
    lost = anyio.Event()
    try:
        try:
            conn.add_termination_listener(lambda _conn: lost.set())
            for channel in (RECORDS_CHANNEL, GENERATION_CHANNEL):
                await conn.add_listener(channel, lambda *_args: wake())
        except STORE_DOWN_ERRORS:
            return False
        wake()  # catch up on whatever changed while nothing listened
        await lost.wait()
        return True
    finally:
        conn.terminate()
