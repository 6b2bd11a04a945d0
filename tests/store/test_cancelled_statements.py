"""A pooled connection whose user is cancelled (a recall's deadline, a duplicate check's time cap,
a shutdown) goes back to the pool in a state the next user can work in.

The moment that matters: asyncpg prepares a statement it has not seen on this connection with
Parse, Describe and Flush, and no Sync. The server then holds an implicit transaction, with a
snapshot taken, until the next Sync. When the cancel reaches the prepare's waiter in the same turn
of the event loop as the server's answer, asyncpg takes the answer, sends no Sync and believes the
connection idle, so the pool's release does not roll it back. The next user's
`BEGIN ISOLATION LEVEL REPEATABLE READ` then fails with "SET TRANSACTION ISOLATION LEVEL must be
called before any query" (a 500 on `GET /v1/assignments/{entity}` under load).

The test makes that turn happen on purpose: right after the prepare is sent, a callback holds the
event loop until the server's answer is in the socket, and only then asks for the cancel; the
answer is read in the same turn as the cancel, as on a machine too busy to read it sooner.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import select
import signal
import socket
import struct
import termios
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import anyio
import asyncpg
import pytest

from recalld.config import StoreConfig
from recalld.store import db
from tests.support.waits import eventually_async

pytestmark = pytest.mark.anyio

ANSWER_WAIT_S = 10.0
"""How long the held event loop waits for the server's answer to the prepare (it takes about a
millisecond): a deadline for a wait on a condition, not a pause."""


@pytest.fixture
async def pool(fresh_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    """One connection: the user after the cancelled one gets the same connection."""
    pool = await db.open_pool(fresh_dsn, StoreConfig(pool_min=1, pool_max=1))
    await pool.execute("CREATE TABLE notes (body text)")
    yield pool
    await pool.close()


@dataclass(frozen=True)
class Backend:
    """A pooled connection's server process and the client's socket to it."""

    pid: int
    sock: socket.socket

    @classmethod
    def of(cls, conn: asyncpg.Connection) -> Backend:
        sock = conn._con._transport.get_extra_info("socket")  # asyncpg keeps it private; only waited on
        return cls(conn.get_server_pid(), sock)

    def unread(self) -> int:
        """Bytes the client sent that the server has not read yet (SIOCOUTQ of a Unix socket)."""
        return int(struct.unpack("i", fcntl.ioctl(self.sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0])


def cancel_when_answered(backend: Backend, scope: anyio.CancelScope) -> list[bool]:
    """Cancel `scope` in the event loop's turn that reads the server's answer to the next
    statement sent to `backend`, ahead of that read. The list it returns says, once the cancel
    is queued, whether the answer came.

    The server process is stopped (SIGSTOP) so that its answer cannot come before the loop is
    held. A callback asks, turn after turn, whether the statement was sent (bytes wait in the
    socket); then it resumes the server, holds the loop until the answer is in the socket (only
    waited on: nothing in asyncpg is changed) and queues the cancel, which then runs before that
    turn's read of the socket, as on a machine too busy to read the answer sooner."""
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + ANSWER_WAIT_S
    answered: list[bool] = []
    os.kill(backend.pid, signal.SIGSTOP)

    def hold_until_answered() -> None:
        if not backend.unread() and time.monotonic() < deadline:
            loop.call_soon(hold_until_answered)  # not sent yet: ask again next turn
            return
        os.kill(backend.pid, signal.SIGCONT)
        readable, _, _ = select.select([backend.sock], [], [], max(deadline - time.monotonic(), 0.0))
        answered.append(bool(readable))
        loop.call_soon(scope.cancel)

    loop.call_soon(hold_until_answered)
    return answered


async def _transaction_state(dsn: str, pid: int) -> str | None:
    """The state of server process `pid` while it has a transaction open, else None (seen from
    a connection of its own)."""
    conn = await asyncpg.connect(dsn)
    try:
        state = await conn.fetchval("SELECT state FROM pg_stat_activity WHERE pid = $1 AND xact_start IS NOT NULL", pid)
        return None if state is None else str(state)
    finally:
        await conn.close()


async def _next_user_reads(pool: asyncpg.Pool) -> int:
    """What `GET /v1/assignments/{entity}` does first: a repeatable-read, read-only transaction."""
    async with db.connection(pool) as conn, db.transaction(conn, isolation="repeatable_read", readonly=True):
        return int(await conn.fetchval("SELECT count(*) FROM notes"))


async def _no_transaction_left(dsn: str, pid: int) -> None:
    await eventually_async(
        lambda: _transaction_state(dsn, pid),
        ANSWER_WAIT_S,
        f"no transaction open in server process {pid}",
        accept=lambda state: state is None,
    )


async def test_a_user_cancelled_during_a_prepare_leaves_no_transaction_for_the_next(
    pool: asyncpg.Pool, fresh_dsn: str
) -> None:
    with anyio.CancelScope() as scope:
        async with db.connection(pool) as conn:
            cancelled = conn.get_server_pid()
            answered = cancel_when_answered(Backend.of(conn), scope)
            await conn.fetchval("SELECT count(*) FROM notes WHERE body <> 'x'")  # new here: prepared first
    assert answered == [True], "the server answered the prepare"
    assert scope.cancelled_caught, "the statement was cut off by the cancel, not finished"
    assert await _next_user_reads(pool) == 0
    await _no_transaction_left(fresh_dsn, cancelled)


async def test_a_user_cancelled_during_a_prepare_in_a_transaction_leaves_none_open(
    pool: asyncpg.Pool, fresh_dsn: str
) -> None:
    """The same cut inside `db.transaction`: the transaction is rolled back, whole."""
    with anyio.CancelScope() as scope:
        async with db.connection(pool) as conn, db.transaction(conn):
            cancelled = conn.get_server_pid()
            await conn.execute("INSERT INTO notes VALUES ('half written')")
            answered = cancel_when_answered(Backend.of(conn), scope)
            await conn.fetchval("SELECT count(*) FROM notes WHERE body <> 'y'")
    assert answered == [True], "the server answered the prepare"
    assert scope.cancelled_caught, "the statement was cut off by the cancel, not finished"
    assert await _next_user_reads(pool) == 0, "the cut transaction wrote nothing"
    await _no_transaction_left(fresh_dsn, cancelled)


async def test_a_readiness_ping_cut_off_during_its_prepare_leaves_no_transaction(
    pool: asyncpg.Pool, fresh_dsn: str
) -> None:
    """The ping prepares its statement on a connection's first ping; its time limit (a cancel
    scope) can cut it there as a deadline cuts a request."""
    async with db.connection(pool) as conn:
        backend = Backend.of(conn)
    with anyio.CancelScope() as scope:
        answered = cancel_when_answered(backend, scope)
        await db.ping(pool, ANSWER_WAIT_S)
    assert answered == [True], "the server answered the prepare"
    assert scope.cancelled_caught, "the ping was cut off by the cancel, not finished"
    assert await _next_user_reads(pool) == 0
    await _no_transaction_left(fresh_dsn, backend.pid)
