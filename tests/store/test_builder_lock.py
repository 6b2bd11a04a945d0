"""The builder lock moves when its holder dies or is cut off (docs/OPERATIONS.md, "Running a
fleet"): PostgreSQL ends the holder's session, and the next member that tries takes the lock; the
lock's own connection tells an operator who holds it."""

from __future__ import annotations

import sys
import textwrap
import time
import urllib.parse

import anyio
import anyio.abc
import asyncpg
import pytest
from anyio import open_process  # loaded now: anyio loads it lazily, and mid-test it failed to compile (CPython 3.11)

from recalld.store.builder_lock import CHECK_TIMEOUT_S, HOLDER_SQL, PgBuilderLock
from tests.support.waits import eventually_async

pytestmark = pytest.mark.anyio

TAKEOVER_S = 10.0
"""Far above what a takeover costs here (milliseconds): a bound on a loaded machine, not a timing."""


async def column(dsn: str, sql: str, *args: object) -> list[object]:
    """The first column of `sql`'s rows, on a connection of its own."""
    conn = await asyncpg.connect(dsn)
    try:
        return [row[0] for row in await conn.fetch(sql, *args)]
    finally:
        await conn.close()


async def holder(dsn: str) -> list[object]:
    return await column(dsn, HOLDER_SQL)


async def test_the_holder_is_named_and_a_holder_cut_off_loses_the_lock_to_another(fresh_dsn: str) -> None:
    first, second = PgBuilderLock(fresh_dsn, member="host-a"), PgBuilderLock(fresh_dsn, member="host-b")
    try:
        assert await first.try_acquire()
        assert not await second.try_acquire()
        assert await holder(fresh_dsn) == ["recalld builder host-a"]
        # PostgreSQL ends the holder's session, as it does once its keepalives go unanswered
        conn = await asyncpg.connect(fresh_dsn)
        try:
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'recalld builder host-a' AND datname = current_database()"
            )
        finally:
            await conn.close()
        await eventually_async(second.try_acquire, TAKEOVER_S, "the other member taking the lock", poll=0.05)
        assert not await first.try_acquire() and not first.held, "the holder cut off knows it lost the lock"
        assert await holder(fresh_dsn) == ["recalld builder host-b"]
    finally:
        await first.release()
        await second.release()


class FreezingProxy:
    """A TCP port in front of the test server's Unix socket that can stop passing bytes without
    closing anything: a holder cut off from the database by the network, as it sees it."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.frozen = anyio.Event()

    async def serve(self, listener: anyio.abc.SocketListener) -> None:
        await listener.serve(self._relay)

    async def _relay(self, client: anyio.abc.SocketStream) -> None:
        async with client, await anyio.connect_unix(self.socket_path) as server, anyio.create_task_group() as tasks:
            tasks.start_soon(self._pump, client, server)
            tasks.start_soon(self._pump, server, client)

    async def _pump(self, source: anyio.abc.ByteStream, sink: anyio.abc.ByteStream) -> None:
        async for data in source:
            if self.frozen.is_set():
                await anyio.sleep_forever()  # hold the bytes, close nothing
            await sink.send(data)


async def test_a_holder_cut_off_without_a_word_stops_holding_within_the_check(fresh_dsn: str) -> None:
    url = urllib.parse.urlsplit(fresh_dsn)
    query = urllib.parse.parse_qs(url.query)
    proxy = FreezingProxy(f"{query['host'][0]}/.s.PGSQL.{query['port'][0]}")
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener, anyio.create_task_group() as tasks:
        tasks.start_soon(proxy.serve, listener)
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        lock = PgBuilderLock(f"postgresql://{url.username}@127.0.0.1:{port}{url.path}", member="far-away")
        assert await lock.try_acquire() and await lock.try_acquire()
        proxy.frozen.set()
        began = time.monotonic()
        with pytest.raises((OSError, TimeoutError)):  # the new connection goes nowhere either
            await lock.try_acquire()
        assert not lock.held, "a holder that cannot reach the database does not act as the builder"
        assert time.monotonic() - began < CHECK_TIMEOUT_S + 5 + TAKEOVER_S  # the check, then the connect's own
        tasks.cancel_scope.cancel()


async def test_a_sigkilled_holder_releases_the_lock_at_once(fresh_dsn: str) -> None:
    script = textwrap.dedent(
        f"""
        import anyio, sys
        from recalld.store.builder_lock import PgBuilderLock
        async def main():
            lock = PgBuilderLock({fresh_dsn!r}, member="doomed")
            assert await lock.try_acquire()
            print("held", flush=True)
            await anyio.sleep(3600)
        anyio.run(main)
        """
    )
    async with await open_process([sys.executable, "-c", script]) as process:
        assert process.stdout is not None
        said = b""
        while not said.endswith(b"held\n"):
            said += await process.stdout.receive()
        survivor = PgBuilderLock(fresh_dsn, member="survivor")
        try:
            assert not await survivor.try_acquire()
            process.kill()
            await process.wait()
            killed = time.monotonic()
            await eventually_async(survivor.try_acquire, TAKEOVER_S, "a survivor taking the lock", poll=0.05)
            print(f"lock taken {time.monotonic() - killed:.3f} s after the holder's SIGKILL")
            assert await holder(fresh_dsn) == ["recalld builder survivor"]
        finally:
            await survivor.release()


async def sessions(dsn: str, name: str) -> list[object]:
    """The backend pids of the sessions named `name` in the test's database."""
    sql = "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()"
    return await column(dsn, sql, name)


async def test_a_member_without_the_lock_tries_again_on_one_kept_connection(fresh_dsn: str) -> None:
    first, second = PgBuilderLock(fresh_dsn, member="host-a"), PgBuilderLock(fresh_dsn, member="host-b")
    try:
        assert await first.try_acquire()
        assert not await second.try_acquire()
        kept = await sessions(fresh_dsn, "recalld builder host-b")
        for _ in range(3):
            assert not await second.try_acquire() and not second.held
        assert await sessions(fresh_dsn, "recalld builder host-b") == kept and len(kept) == 1, "one session, kept"

        # the kept session ended under it (a server restart, an idle timeout): the next try opens another
        conn = await asyncpg.connect(fresh_dsn)
        try:
            await conn.execute("SELECT pg_terminate_backend($1)", kept[0])
        finally:
            await conn.close()
        assert not await second.try_acquire()
        now = await sessions(fresh_dsn, "recalld builder host-b")
        assert len(now) == 1 and now != kept

        await first.release()
        await eventually_async(second.try_acquire, TAKEOVER_S, "the waiting member taking the lock", poll=0.05)
        assert await holder(fresh_dsn) == ["recalld builder host-b"]
        assert await sessions(fresh_dsn, "recalld builder host-b") == now, "taken on the kept session"
    finally:
        await first.release()
        await second.release()


async def test_a_released_lock_is_free_at_once_for_a_member_waiting_on_its_kept_connection(fresh_dsn: str) -> None:
    """`release` returns once the server has ended the session: cutting the connection alone left
    the lock held a moment longer, and a waiting member's next try (on a connection it already
    has, so at once) missed it about one time in four here."""
    for _ in range(20):
        first, second = PgBuilderLock(fresh_dsn, member="host-a"), PgBuilderLock(fresh_dsn, member="host-b")
        try:
            assert await first.try_acquire()
            assert not await second.try_acquire()
            await first.release()
            assert await second.try_acquire(), "the released lock taken by the next try"
        finally:
            await first.release()
            await second.release()
