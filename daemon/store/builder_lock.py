"""The builder lock: which daemon of those sharing a database embeds, stores vectors and builds
generations. The others follow the generation pointer."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import socket
import uuid

import anyio
import asyncpg

from recalld.store.db import KEEPALIVE, STORE_DOWN_ERRORS

log = logging.getLogger("recalld.index")

BUILDER_LOCK_KEY = 0x7265_6361_6C6C_02
"""Arbitrary but fixed: the advisory lock whose holder embeds, stores vectors and builds."""

APPLICATION_NAME = "recalld builder"
"""The lock connection's `application_name`: with `pg_stat_activity.client_addr` it tells an
operator which member holds the lock (docs/OPERATIONS.md, "Running a fleet")."""

HOLDER_SQL = """SELECT a.application_name, a.client_addr, a.pid, a.backend_start
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.classid = 7497059 AND l.objid = 1634495490
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"""
"""Who holds the builder lock of the database it runs in: PostgreSQL shows a bigint advisory key
as its high and low 32 bits (`BUILDER_LOCK_KEY`), and lists every database's locks. Quoted in
docs/OPERATIONS.md, "Running a fleet"."""

CHECK_TIMEOUT_S = 5.0
"""How long the holder waits for its lock connection to answer before it counts the lock lost."""

RELEASE_WAIT_S = 1.0
"""How long `release` waits for the server to end the lock's session before it cuts the connection."""


class PgBuilderLock:
    """The builder advisory lock, held on a connection of its own for as long as it is held.

    A session-level advisory lock lives and dies with its connection, so it cannot come from
    the pool: if the connection drops, the lock is gone, `held` says so, and the next
    `try_acquire` competes for it again. A holder's `try_acquire` asks its connection to
    answer (`CHECK_TIMEOUT_S`), so a connection that silently stopped answering is given up
    before the holder takes another step as the builder.

    A member that does not hold the lock keeps its connection too, and tries again on it: a new
    connection at every try (each `poll_s`) cost the server a backend's start each time, most of
    what an idle member cost it. A kept connection that ended is replaced at the next try; one
    that fails during a try is closed, and the try raises (the index step is tried again).
    """

    def __init__(self, dsn: str, *, member: str | None = None) -> None:
        self._dsn = dsn
        self._conn: asyncpg.Connection | None = None
        """The lock's connection: holding the lock when `_holding`, else kept for the next try."""
        self._holding = False
        self._name = f"{APPLICATION_NAME} {member or socket.gethostname()}"[:63]

    @property
    def held(self) -> bool:
        return self._holding and self._conn is not None and not self._conn.is_closed()

    async def try_acquire(self) -> bool:
        if self.held and await self._answers():
            return True
        if self._holding:
            self._cut()  # lost: PostgreSQL may have given the lock to another already
        got = await self._try_lock()
        if got:
            self._holding = True
            log.info("this daemon holds the builder lock now")
        return got

    async def _try_lock(self) -> bool:
        if self._conn is None or self._conn.is_closed():
            self._conn = await asyncpg.connect(
                self._dsn, timeout=5, server_settings={"application_name": self._name, **KEEPALIVE}
            )
        try:
            with anyio.fail_after(CHECK_TIMEOUT_S):
                return bool(await self._conn.fetchval("SELECT pg_try_advisory_lock($1)", BUILDER_LOCK_KEY))
        except BaseException:
            self._cut()  # an answer that never came may still have taken the lock: end the session
            raise

    async def _answers(self) -> bool:
        """Whether the lock's connection still answers; a holder cut off from the server does not
        know that PostgreSQL may have ended its session (and freed the lock) meanwhile."""
        assert self._conn is not None
        try:
            with anyio.fail_after(CHECK_TIMEOUT_S):
                await self._conn.fetchval("SELECT 1")
            return True
        except STORE_DOWN_ERRORS as exc:
            log.warning("the builder lock's connection stopped answering (%s): the lock is lost", type(exc).__name__)
            return False

    async def release(self) -> None:
        """Give the lock up (and the kept connection). A graceful close returns once the server
        has ended the session, which frees the lock first: another member's next try takes it. A
        connection that does not answer within `RELEASE_WAIT_S` is cut (the server frees the lock
        when it notices)."""
        conn = self._conn
        if conn is not None and not conn.is_closed():
            with contextlib.suppress(*STORE_DOWN_ERRORS), anyio.move_on_after(RELEASE_WAIT_S):
                await conn.close()
        self._cut()

    def _cut(self) -> None:
        conn, self._conn, self._holding = self._conn, None, False
        if conn is not None:
            conn.terminate()  # the session's end releases its advisory locks


def new_generation_id() -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    return f"g{stamp}-{uuid.uuid4().hex[:8]}"
