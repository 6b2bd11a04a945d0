"""A statement that times out against a server that stopped answering: the connection is
dropped, not rolled back or waited for, so the caller fails after one statement timeout, and the
transaction it was in is gone. The server is made to stop answering by stopping (SIGSTOP) the
one backend process behind the connection; the rest of the server keeps serving."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import asyncpg
import pytest

from recalld.config import StoreConfig
from recalld.store import db

pytestmark = pytest.mark.anyio

TIMEOUT_S = 2.0
"""Long enough that a loaded machine's delays (a second, at worst) cannot pass for the second
timeout that the code under test must avoid."""


@pytest.fixture
async def pool(fresh_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await db.open_pool(fresh_dsn, StoreConfig(statement_timeout_s=TIMEOUT_S, pool_min=1, pool_max=2))
    await pool.execute("CREATE TABLE notes (body text)")
    yield pool
    await pool.close()


@asynccontextmanager
async def stopped_backends() -> AsyncIterator[Callable[[asyncpg.Connection], None]]:
    """`stop(conn)` stops the backend process serving `conn`; all are resumed on the way out."""
    stopped: list[int] = []

    def stop(conn: asyncpg.Connection) -> None:
        pid = conn.get_server_pid()
        os.kill(pid, signal.SIGSTOP)
        stopped.append(pid)

    try:
        yield stop
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)


async def notes(pool: asyncpg.Pool) -> list[str]:
    return [row["body"] for row in await pool.fetch("SELECT body FROM notes ORDER BY body")]


async def test_a_read_that_times_out_fails_after_one_timeout(pool: asyncpg.Pool) -> None:
    async with stopped_backends() as stop:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            async with db.connection(pool) as conn:
                stop(conn)
                await conn.fetch("SELECT 1")
        waited = time.monotonic() - started
    # without the drop, releasing the connection waits for the cancelled statement: 2x
    assert TIMEOUT_S * 0.9 < waited < TIMEOUT_S * 1.5, waited
    assert await pool.fetchval("SELECT 2") == 2, "the pool serves on another connection"


@pytest.mark.parametrize("where", ["body", "savepoint", "commit"])
async def test_a_transaction_whose_statement_times_out_is_dropped_with_its_connection(
    pool: asyncpg.Pool, where: str
) -> None:
    async with stopped_backends() as stop:
        started = time.monotonic()
        with pytest.raises(TimeoutError):  # not an InterfaceError from dropping twice
            async with db.connection(pool) as conn, db.transaction(conn):
                await conn.execute("INSERT INTO notes VALUES ('half written')")
                if where == "body":
                    stop(conn)
                    await conn.execute("INSERT INTO notes VALUES ('never')")
                elif where == "savepoint":
                    async with db.transaction(conn):
                        stop(conn)
                        await conn.execute("INSERT INTO notes VALUES ('never')")
                else:
                    stop(conn)  # the block ends normally: its COMMIT is what times out
        waited = time.monotonic() - started
    # without the drop, the ROLLBACK (or the release after a timed-out COMMIT) waits as long again
    assert TIMEOUT_S * 0.9 < waited < TIMEOUT_S * 1.5, waited
    if where == "commit":
        # the COMMIT had reached the server's socket: resumed, the server reads it first and
        # commits (an unknown outcome, as for any commit whose answer never came), whole
        assert await notes(pool) in ([], ["half written"])
    else:
        assert await notes(pool) == [], "the dropped connection's transaction was aborted"
    async with db.connection(pool) as conn, db.transaction(conn):
        await conn.execute("INSERT INTO notes VALUES ('after')")
    assert "after" in await notes(pool)


async def test_a_statement_left_running_by_a_dropped_connection_is_ended_by_the_server(pool: asyncpg.Pool) -> None:
    """A dropped connection sends no cancel: on a live but slow server the statement would run on
    (here for 30 s); the server's own statement_timeout, a moment after the client's, ends it."""
    with pytest.raises(TimeoutError):  # the client's limit, not the server's cancel, comes first
        async with db.connection(pool) as conn:
            await conn.fetch("SELECT pg_sleep(30) AS left_running")
    dropped = time.monotonic()
    # `state`, not the text alone: an idle session shows its last statement too, and the pool's
    # other connection last ran this very count, which holds the words it looks for.
    running = (
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE state = 'active' AND query = 'SELECT pg_sleep(30) AS left_running' AND pid <> pg_backend_pid()"
    )
    # The server's timeout fires about a second after the drop; the bound is half the sleep, so a
    # loaded machine's slow wake-up cannot pass for a statement left running.
    while await pool.fetchval(running):
        assert time.monotonic() - dropped < 15, "the statement runs on after its connection was dropped"
        await anyio.sleep(0.1)
