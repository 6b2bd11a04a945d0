"""A server that accepts no writes (a standby not yet promoted, or a primary with
`default_transaction_read_only`): a write it refuses is a store outage (503), never the client's
error or a bug, and the pooled connection that met it is dropped, so that the next one is made
afresh and the DSN's `target_session_attrs` chooses a server that takes writes; a pooled session
left on a standby would refuse every write for as long as it lived. Readiness says so too.

The session's own `default_transaction_read_only` makes the pool's one connection read-only here,
as the server's setting (or its recovery) makes every connection to it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from recalld.config import StoreConfig
from recalld.store import db

pytestmark = pytest.mark.anyio


@pytest.fixture
async def pool(fresh_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await db.open_pool(fresh_dsn, StoreConfig(pool_min=1, pool_max=1))
    await pool.execute("CREATE TABLE notes (body text)")
    yield pool
    await pool.close()


async def read_only_session(pool: asyncpg.Pool) -> int:
    """Make the pool's one connection refuse writes; the pid of its server process."""
    async with pool.acquire() as conn:
        await conn.execute("SET SESSION default_transaction_read_only = on")
        return conn.get_server_pid()


async def test_a_write_refused_as_read_only_is_an_outage_and_drops_its_connection(pool: asyncpg.Pool) -> None:
    read_only = await read_only_session(pool)
    with pytest.raises(db.READ_ONLY_ERRORS) as refused:
        async with db.connection(pool) as conn, db.transaction(conn):
            assert conn.get_server_pid() == read_only
            await conn.execute("INSERT INTO notes VALUES ('refused')")
    assert isinstance(refused.value, db.STORE_DOWN_ERRORS), "503 store_unavailable, not a 500"
    assert "read-only" in db.outage_message(refused.value)
    async with db.connection(pool) as conn, db.transaction(conn):
        assert conn.get_server_pid() != read_only, "a new connection, not the read-only one"
        await conn.execute("INSERT INTO notes VALUES ('kept')")
    assert [r["body"] for r in await pool.fetch("SELECT body FROM notes")] == ["kept"]


async def test_readiness_fails_on_a_read_only_server_and_drops_its_connection(pool: asyncpg.Pool) -> None:
    read_only = await read_only_session(pool)
    assert await db.ping(pool, 5.0) == db.READ_ONLY_REASON
    assert await db.ping(pool, 5.0) is None, "the next ping is on a new connection, which takes writes"
    async with db.connection(pool) as conn:
        assert conn.get_server_pid() != read_only
