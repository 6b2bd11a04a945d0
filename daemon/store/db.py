"""The asyncpg pool: opened once, shared by every repository, checked by readiness."""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio
import asyncpg
import msgspec

from recalld.config import StoreConfig

log = logging.getLogger("recalld.store")

READ_ONLY_ERRORS: tuple[type[BaseException], ...] = (asyncpg.exceptions.ReadOnlySQLTransactionError,)
"""What a server that accepts no writes answers a write (and a LISTEN) with: a standby not yet
promoted, or a primary made read-only (`default_transaction_read_only`). During a failover this
is the store being unavailable, not the client's error: a 503 until there is a primary again."""

# What asyncpg raises when the server is unreachable, went away mid-call or accepts no writes: a
# store outage (503 to the client, `fail` in readiness), not a bug. With several hosts in the DSN
# and none of them a primary, a connect raises the last host's error (OSError) or
# TargetServerAttributeNotMatched (an InternalClientError).
STORE_DOWN_ERRORS: tuple[type[BaseException], ...] = (
    *READ_ONLY_ERRORS,
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
    """`pool.acquire()`, dropping the connection when a statement times out, or when its server
    refused a write as read-only: the pool then connects afresh, and the DSN's
    `target_session_attrs` chooses a server that accepts writes (a promoted standby, the primary
    back), where a pooled session on a standby would refuse every write for as long as it lived.
    A connection whose user was cancelled (a deadline, a time cap, a stop) is dropped too."""
    async with pool.acquire() as conn:
        try:
            with _dropped_on_timeout(conn):
                yield conn
        except READ_ONLY_ERRORS:
            _drop(conn)
            raise
        except anyio.get_cancelled_exc_class():
            # A cancel can cut an exchange where asyncpg no longer sees what the server holds:
            # one that lands in the same turn of the loop as the answer to a prepare (Parse,
            # Describe, Flush: no Sync) takes the answer and sends no Sync, so the server keeps
            # the implicit transaction, with its snapshot, that the Parse opened, while asyncpg
            # believes the connection idle and its release rolls nothing back. The next user
            # would run in that transaction: `BEGIN ISOLATION LEVEL ...` fails ("must be called
            # before any query"). Closing the session is the reset that is always right.
            _drop(conn)
            raise


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
    and migrations release their lock in `finally`. asyncpg rolls back only the transactions it
    knows of: a connection whose user was cancelled never comes here (`connection` drops it)."""


APPLICATION_NAME = f"recalld {socket.gethostname()}"[:63]
"""The pool connections' `application_name` (PostgreSQL keeps 63 bytes of it)."""

KEEPALIVE = {"tcp_keepalives_idle": "10", "tcp_keepalives_interval": "5", "tcp_keepalives_count": "3"}
"""The server's keepalives on every connection of a daemon's (TCP only): a daemon whose host died
or was cut off without a word loses its session, and with it any role's advisory lock it held
(the builder's, or a tick's), after about 10 + 3 x 5 = 25 s, when PostgreSQL gives up on the
connection, instead of the system's default of hours. A process that dies on a live host loses
them at once (its kernel closes the connection)."""


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
                server_settings={
                    "statement_timeout": str(round(1000 * (config.statement_timeout_s + SERVER_GRACE_S))),
                    # names this member in pg_stat_activity, and so the holder of a role (`GET /admin/roles`)
                    "application_name": APPLICATION_NAME,
                    **KEEPALIVE,
                },
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


READ_ONLY_REASON = "the server is read-only (a standby not yet promoted, or default_transaction_read_only)"


def outage_message(exc: BaseException) -> str:
    """What a client is told of a store outage (`exc`, one of STORE_DOWN_ERRORS)."""
    if isinstance(exc, READ_ONLY_ERRORS):
        return f"PostgreSQL refuses writes: {READ_ONLY_REASON}"
    return "PostgreSQL is not reachable"


async def ping(pool: asyncpg.Pool, limit_s: float) -> str | None:
    """None when the store answers within `limit_s` seconds and accepts writes, else a short
    reason. A pooled connection whose server is read-only is dropped, as `connection` drops it."""
    try:
        with anyio.fail_after(limit_s):
            async with connection(pool) as conn:  # the limit cancels: dropped as any cut-off user's
                if await conn.fetchval("SELECT current_setting('transaction_read_only') = 'on'"):
                    _drop(conn)
                    return READ_ONLY_REASON
        return None
    except STORE_DOWN_ERRORS as exc:
        return f"{type(exc).__name__}: {exc}".strip(": ")[:200]
