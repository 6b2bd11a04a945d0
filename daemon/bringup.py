"""Bring-up: what `recalld serve` holds before the supervision tree starts, and hands back after.

It owns the data directory (made private, locked so that one daemon owns one embedded server),
the listening sockets (bound or inherited before anything else starts), PostgreSQL (embedded
unless a DSN is configured) with its pool and migrations, the failures at start that are the
operator's to fix (`startup_error`), and the conversation with systemd while the process runs
(asking for more start time, pinging the watchdog).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import anyio
import asyncpg

from recalld import paths
from recalld.config import Config
from recalld.control.server import Listener, SocketInUse
from recalld.store import db
from recalld.store.dsn import writable_dsn
from recalld.store.embedded import EmbeddedPostgres, EmbeddedPostgresError, max_connections_for
from recalld.store.migrations import SchemaTooNew, migrate_database
from recalld.systemd import Notifier, watchdog_interval

log = logging.getLogger("recalld")

PRIVATE_UMASK = 0o077
"""What `recalld serve` adds to the umask it inherits: its files are its own (records live in them)."""


class DataDirInUse(RuntimeError):
    pass


# Failures at start that are the operator's to fix, reported in one line rather than a traceback.
STARTUP_ERRORS: tuple[type[BaseException], ...] = (
    DataDirInUse,
    SchemaTooNew,
    EmbeddedPostgresError,
    SocketInUse,
    OSError,  # e.g. the socket directory cannot be created, a path too long for a Unix socket
    asyncpg.exceptions.ClientConfigurationError,  # e.g. a malformed [store] dsn
)


def startup_error(exc: BaseException) -> BaseException | None:
    """The operator's error that ended a start, also when a task group wrapped it; else None."""
    if isinstance(exc, STARTUP_ERRORS):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := startup_error(inner)) is not None:
                return found
    return None


def _keep_private(data_dir: Path) -> None:
    """Take from others what they may do in a data directory made before recalld set its umask
    (an upgrade: it was 0755). Only the directory itself: a parent is never recalld's to change."""
    st = data_dir.stat()
    if not st.st_mode & 0o007:
        return
    mode = st.st_mode & 0o7777
    if st.st_uid != os.geteuid() and os.geteuid() != 0:
        log.warning("the data directory %s is open to other users (mode %o) and not ours to change", data_dir, mode)
        return
    data_dir.chmod(mode & ~0o007)
    log.info("took other users' access to the data directory %s away (it was %o)", data_dir, mode)


def _make_data_dir(data_dir: Path) -> None:
    """Make the data directory, and its missing parents as `mkdir -p` would under the usual
    umask (0755): the parents hold nothing of ours, and the embedded server's account has to
    pass through them; the data directory alone is private."""
    paths.make_parents(data_dir)
    data_dir.mkdir(exist_ok=True)


@contextlib.contextmanager
def data_dir_lock(data_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on the data directory: one daemon owns one embedded server."""
    _make_data_dir(data_dir)
    _keep_private(data_dir)
    with open(data_dir / "recalld.lock", "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "?"
            raise DataDirInUse(f"the data directory {data_dir} is in use by another recalld (pid {holder})") from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        yield


@contextlib.contextmanager
def listening(config: Config, socket_path: Path, inherited: list[int]) -> Iterator[list[Listener]]:
    """Bind (or adopt) the control sockets before anything else starts, and release them at exit."""
    listeners: list[Listener] = []
    try:
        if inherited:
            listeners += [Listener.inherited(fd) for fd in inherited]
        else:
            listeners.append(Listener.unix(socket_path, config.server.socket_mode))
        if config.server.tcp_host:
            listeners.append(Listener.tcp(config.server.tcp_host, config.server.tcp_port))
        yield listeners
    finally:
        for listener in listeners:
            listener.close()


@contextlib.asynccontextmanager
async def postgres(
    config: Config, data_dir: Path, notifier: Notifier
) -> AsyncIterator[tuple[asyncpg.Pool, str, EmbeddedPostgres | None]]:
    """The pool, over the configured server or an embedded one that lives exactly as long
    (returned too, for `keep_running`; None with a DSN), and the DSN that every other
    connection of the daemon takes (`writable_dsn`: a primary, whichever host is one now)."""
    embedded: EmbeddedPostgres | None = None
    dsn = config.store.dsn
    try:
        if not dsn:
            notifier.status("starting the embedded PostgreSQL")
            embedded = EmbeddedPostgres(
                data_dir,
                shared_buffers_mb=config.store.shared_buffers_mb,
                max_connections=max_connections_for(config.store.pool_max),
            )
            # A stop signal during this waits for the start to finish; the `finally` stops it.
            async with extending_start(notifier):  # initdb on a slow disk
                dsn = await anyio.to_thread.run_sync(embedded.start)
        dsn = writable_dsn(dsn)  # every connection of the daemon, and pg_dump, go to a primary
        pool = await db.open_pool(dsn, config.store)
        try:
            notifier.status("applying migrations")
            async with extending_start(notifier):
                applied = await migrate_database(dsn, connect_timeout_s=config.store.connect_timeout_s)
            log.info("schema up to date", extra={"applied": applied})
            yield pool, dsn, embedded
        finally:
            with anyio.move_on_after(5, shield=True) as scope:
                await pool.close()
            if scope.cancelled_caught:
                pool.terminate()
    finally:
        if embedded is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(embedded.stop)


EXTEND_EVERY_S = 20.0


@contextlib.asynccontextmanager
async def extending_start(notifier: Notifier) -> AsyncIterator[None]:
    """While a start-up step of unknown length runs (initdb, migrations of a large database, or
    waiting for another daemon's), keep asking systemd for time, so that TimeoutStartSec= does
    not kill the step half-way and then again on every restart. A no-op without systemd."""
    async with anyio.create_task_group() as tg:

        async def extend() -> None:
            while True:
                notifier.extend_timeout(3 * EXTEND_EVERY_S)
                await anyio.sleep(EXTEND_EVERY_S)

        tg.start_soon(extend)
        try:
            yield
        finally:
            tg.cancel_scope.cancel()


async def heartbeat(alive: Callable[[], bool], notifier: Notifier, *, task_status: anyio.abc.TaskStatus[None]) -> None:
    """Ping the systemd watchdog while the loop runs and the supervisor has not given up."""
    interval = watchdog_interval()
    task_status.started()
    if interval is None:
        await anyio.sleep_forever()
        return
    while True:
        if alive():
            notifier.watchdog()
        await anyio.sleep(interval)
