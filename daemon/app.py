"""`recalld serve`: bring the store up, build the supervision tree, serve until SIGTERM.

Start order: data-directory lock -> listening sockets -> PostgreSQL (embedded unless a DSN is
configured) -> pool -> migrations (`recalld.bringup`) -> supervised actors, control server last
(`recalld.assembly`) -> READY=1. Shutdown runs the same way backwards; SIGTERM exits 0, a
supervisor that gave up exits 1 so that systemd restarts the daemon. This module owns only that
order, the signals and the exit code.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx

from recalld.actors.index.vectors import single_threaded_blas
from recalld.actors.kernel.supervisor import Supervisor, SupervisorGaveUp
from recalld.assembly import assemble
from recalld.bringup import PRIVATE_UMASK as PRIVATE_UMASK  # re-exported: the CLI sets the umask before serving
from recalld.bringup import data_dir_lock, listening, postgres
from recalld.bringup import startup_error as startup_error  # re-exported: the CLI reports it in one line
from recalld.config import Config
from recalld.heap import settle_heap
from recalld.metrics import Metrics
from recalld.paths import default_cache_dir
from recalld.providers.early import load_early
from recalld.systemd import Notifier, listen_fds

log = logging.getLogger("recalld")

EXIT_OK = 0
EXIT_GAVE_UP = 1
# How long a stopping daemon waits, in all, for models still loading (a load takes seconds; past
# this the exit goes ahead and may abort). Below the unit's TimeoutStopSec (90 s).
MODEL_LOAD_WAIT_S = 60.0


async def serve(config: Config, *, data_dir: Path, socket_path: Path) -> int:
    """Run until SIGTERM or SIGINT (exit 0) or until the supervisor gives up (exit 1).

    The signal handler is installed before anything starts: a stop that comes during start-up
    (systemd's start timeout, Ctrl-C during initdb) unwinds the start in order too, and leaves no
    PostgreSQL behind. A second signal while stopping is logged and ignored; the stop is bounded
    on its own (and systemd's TimeoutStopSec bounds it again)."""
    single_threaded_blas()
    notifier = Notifier.from_environ()
    code = EXIT_OK
    with notifier, anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with anyio.create_task_group() as tg:
            work = anyio.CancelScope()
            tg.start_soon(_stop_on_signal, signals, work, notifier)
            with work:
                try:
                    code = await _serve(config, data_dir, socket_path, notifier)
                except Exception as exc:
                    # Ctrl-C reaches the whole terminal's process group, initdb and PostgreSQL
                    # included: the start they fail then is the stop that was asked for.
                    if not work.cancel_called or startup_error(exc) is None:
                        raise
                    log.info("start-up stopped: %s", startup_error(exc))
            tg.cancel_scope.cancel()
    return code


async def _stop_on_signal(signals: AsyncIterator[int], work: anyio.CancelScope, notifier: Notifier) -> None:
    async for signum in signals:
        name = signal.Signals(signum).name
        if work.cancel_called:
            log.warning("received %s again; still shutting down", name)
            continue
        log.info("received %s; shutting down", name)
        notifier.stopping("shutting down")
        work.cancel()


async def _serve(config: Config, data_dir: Path, socket_path: Path, notifier: Notifier) -> int:
    inherited = listen_fds()
    metrics = Metrics()
    with data_dir_lock(data_dir), listening(config, socket_path, inherited) as listeners:
        # the models load while PostgreSQL starts and migrates
        early = load_early(config, cache=default_cache_dir())
        try:
            async with postgres(config, data_dir, notifier) as (pool, dsn, embedded), httpx.AsyncClient() as http:
                daemon = assemble(
                    config,
                    pool=pool,
                    dsn=dsn,
                    embedded=embedded,
                    http=http,
                    data_dir=data_dir,
                    metrics=metrics,
                    notifier=notifier,
                    listeners=listeners,
                    early=early,
                )
                return await _supervise(daemon.supervisor, notifier)
        finally:
            # A start that failed (or was stopped) before the models finished loading must not
            # exit under them: see InProcessModel.finish_loading.
            with anyio.CancelScope(shield=True):
                if not await anyio.to_thread.run_sync(early.finish_loading, MODEL_LOAD_WAIT_S):
                    log.warning("a model was still loading after %.0f s; exiting anyway", MODEL_LOAD_WAIT_S)


async def _supervise(supervisor: Supervisor, notifier: Notifier) -> int:
    """Run the supervision tree until cancelled (a signal) or until it gives up."""
    code = EXIT_OK
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(supervisor.run)
            settle_heap()  # start-up's objects out of the collector's sight (daemon/heap.py)
            notifier.ready("serving")
            log.info("recalld ready")
    except* SupervisorGaveUp as group:
        for exc in group.exceptions:
            log.error("supervisor gave up: %s; exiting so that the service manager restarts us", exc)
        notifier.stopping("supervisor gave up")
        code = EXIT_GAVE_UP
    return code
