"""The asyncpg pool: opened once, shared by every repository, checked by readiness."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio
import asyncpg
import msgspec

from recalld.config import StoreConfig

log = logging.getLogger("recalld.store")

# What asyncpg raises when the server is unreachable or went away mid-call: a store outage
# (503 to the client, `fail` in readiness), not a bug.
STORE_DOWN_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.ConnectionFailureError,
    asyncpg.exceptions.TooManyConnectionsError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.InterfaceError,
    # A statement sent on a pooled connection whose server session just ended (a FATAL it has
    # read, the close not yet): "cannot switch to state …" (MagicStack/asyncpg#1069).
    asyncpg.exceptions.InternalClientError,
    TimeoutError,
)

# What PostgreSQL raises when a value is beyond one of its fixed limits, e.g. a body with so many
# distinct words that its tsvector passes 1 MB: the client's input does not fit (413), and the
# transaction that tried has written nothing.
STORE_LIMIT_ERRORS: tuple[type[BaseException], ...] = (asyncpg.exceptions.ProgramLimitExceededError,)

SERVER_GRACE_S = 1.0
"""How much later than the client PostgreSQL ends a pooled statement itself: later, so that the
client's timeout (a 503) always comes first, and a server-side cancel never reaches a request as
an error of its own."""

FLUSH_WAIT_S = 2.0
"""How long a read of telemetry (search rows, usage rows) waits for its writer to write what it
holds; with PostgreSQL down the read then fails on its own."""


def _json_text(value: object) -> str:
    return msgspec.json.encode(value).decode()


async def _init_connection(conn: asyncpg.Connection) -> None:
    # msgspec rather than the json module: every recall writes a telemetry row of JSON columns,
    # and json.dumps was 2% of the event loop's time at 16 clients (a profile of the bench).
    for name in ("json", "jsonb"):
        await conn.set_type_codec(name, encoder=_json_text, decoder=msgspec.json.decode, schema="pg_catalog")


def _drop(conn: asyncpg.Connection) -> None:
    """Close the connection at once, without waiting for the server. Idempotent: an inner block
    (a savepoint) may have dropped it already, and asyncpg then refuses a second terminate."""
    try:
        conn.terminate()
    except asyncpg.InterfaceError:
        pass


# A statement that times out means the server has stopped answering (frozen, unreachable) or is
# far too slow. Both helpers below then drop the connection rather than talk to the server
# again: a ROLLBACK, or the pool's wait for the cancelled statement on release, would take as
# long again, so a request answered 503 after twice `statement_timeout_s`. PostgreSQL aborts a
# dropped connection's transaction (nothing is half written), unless what timed out was the
# COMMIT itself: a server that resumes may still read it and commit, whole, as with any commit
# whose answer never came.


@contextmanager
def _dropped_on_timeout(conn: asyncpg.Connection) -> Iterator[None]:
    try:
        yield
    except TimeoutError:
        _drop(conn)
        raise


@asynccontextmanager
async def connection(pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Connection]:
    """`pool.acquire()`, dropping the connection when a statement times out."""
    async with pool.acquire() as conn:
        with _dropped_on_timeout(conn):
            yield conn


@asynccontextmanager
async def transaction(conn: asyncpg.Connection, **options: Any) -> AsyncIterator[None]:
    """`conn.transaction(**options)` (a savepoint when nested), dropping the connection instead
    of rolling back when a statement, the rollback or the commit times out."""
    tx = conn.transaction(**options)
    with _dropped_on_timeout(conn):
        await tx.start()
        try:
            yield
        except TimeoutError:
            raise  # no ROLLBACK over a connection that stopped answering: it is dropped
        except BaseException:
            await tx.rollback()
            raise
        await tx.commit()


async def _keep_session(conn: asyncpg.Connection) -> None:
    """What a connection goes through when released to the pool: nothing beyond asyncpg's own
    rollback of an open transaction. asyncpg's default also sends `RESET ALL; UNLISTEN *; …`,
    a round trip on every release (two or three per recall); no code here leaves session state
    on a pool connection: LISTEN and the builder's advisory lock have connections of their own,
    and migrations release their lock in `finally`."""


async def open_pool(dsn: str, config: StoreConfig) -> asyncpg.Pool:
    """Open the pool, retrying briefly: a server that was just started may still be coming up."""
    deadline = anyio.current_time() + max(config.connect_timeout_s, 1.0) * 3
    while True:
        try:
            pool = await asyncpg.create_pool(
                dsn,
                min_size=config.pool_min,
                max_size=config.pool_max,
                timeout=config.connect_timeout_s,
                command_timeout=config.statement_timeout_s,
                # The server's own limit, a moment after the client's: a connection dropped on a
                # timeout (`connection`, `transaction`) sends no cancel, and a statement still
                # running on a live but slow server then ends here instead of running on.
                server_settings={"statement_timeout": str(round(1000 * (config.statement_timeout_s + SERVER_GRACE_S)))},
                init=_init_connection,
                reset=_keep_session,
            )
            assert pool is not None
            return pool
        except STORE_DOWN_ERRORS as exc:
            if anyio.current_time() > deadline:
                raise
            log.warning("PostgreSQL not reachable yet (%s); retrying", type(exc).__name__)
            await anyio.sleep(0.5)


async def ping(pool: asyncpg.Pool, limit_s: float) -> str | None:
    """None when the store answers within `limit_s` seconds, else a short reason."""
    try:
        with anyio.fail_after(limit_s):
            async with pool.acquire(timeout=limit_s) as conn:
                await conn.fetchval("SELECT 1")
        return None
    except STORE_DOWN_ERRORS as exc:
        return f"{type(exc).__name__}: {exc}".strip(": ")[:200]
