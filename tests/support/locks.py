"""A table locked from a connection of the test's own, for tests that need a statement of the
daemon's (or of its pg_dump) to wait, whatever the machine's speed."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

import asyncpg


@contextlib.contextmanager
def table_locked(dsn: str, table: str) -> Iterator[None]:
    """Hold an ACCESS EXCLUSIVE lock on `table` (a trusted name, schema-qualified or not) until
    the block ends: every other reader of the table waits until then. A server stopped meanwhile
    ends the lock with the session; the block then ends as usual."""
    locked, release = threading.Event(), threading.Event()

    async def hold() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            async with conn.transaction():
                await conn.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
                locked.set()
                await asyncio.to_thread(release.wait, 60)
        except (asyncpg.InterfaceError, asyncpg.PostgresError, OSError):
            if not locked.is_set():
                raise
            # the server went away while the lock was held: the lock went with it
        finally:
            await conn.close()

    holder = threading.Thread(target=asyncio.run, args=(hold(),))
    holder.start()
    try:
        assert locked.wait(10), f"could not lock {table}"
        yield
    finally:
        release.set()
        holder.join(10)
