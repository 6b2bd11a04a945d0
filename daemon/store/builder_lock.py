"""The builder lock: which daemon of those sharing a database embeds, stores vectors and builds
generations. The others follow the generation pointer."""

from __future__ import annotations

import datetime as dt
import uuid

import asyncpg

BUILDER_LOCK_KEY = 0x7265_6361_6C6C_02
"""Arbitrary but fixed: the advisory lock whose holder embeds, stores vectors and builds."""


class PgBuilderLock:
    """The builder advisory lock, held on a connection of its own for as long as it is held.

    A session-level advisory lock lives and dies with its connection, so it cannot come from
    the pool: if the connection drops, the lock is gone, `held` says so, and the next
    `try_acquire` competes for it again.
    """

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._conn: asyncpg.Connection | None = None

    @property
    def held(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    async def try_acquire(self) -> bool:
        if self.held:
            return True
        await self.release()
        conn = await asyncpg.connect(self._dsn, timeout=5)
        try:
            if await conn.fetchval("SELECT pg_try_advisory_lock($1)", BUILDER_LOCK_KEY):
                self._conn = conn
                return True
        except BaseException:
            conn.terminate()
            raise
        await conn.close()
        return False

    async def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.terminate()  # closing the session releases its advisory locks


def new_generation_id() -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    return f"g{stamp}-{uuid.uuid4().hex[:8]}"
