"""`recalld serve`: bring the store up, build the supervision tree, serve until SIGTERM.

Start order: data-directory lock -> PostgreSQL (embedded unless a DSN is configured) -> pool
-> migrations -> supervised actors (control server last, so nothing is served before the
parts behind it are up) -> READY=1. Shutdown runs the same way backwards; SIGTERM exits 0,
a supervisor that gave up exits 1 so that systemd restarts the daemon.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import anyio
import asyncpg

from actors.kernel.supervisor import (
    ChildSpec,
    ChildState,
    EventKind,
    Restart,
    Supervisor,
    SupervisorEvent,
    SupervisorGaveUp,
    SupervisorOptions,
)
from daemon.config import Config
from daemon.control.access import AccessPolicy
from daemon.control.health import Check, Health
from daemon.control.server import Listener, Services, SocketInUse, run_control_server
from daemon.metrics import Metrics
from daemon.recall import RecallService
from daemon.store import db
from daemon.store.embedded import EmbeddedPostgres, EmbeddedPostgresError
from daemon.store.migrations import SchemaTooNew, migrate
from daemon.store.records import RecordRepository
from daemon.systemd import Notifier, listen_fds, watchdog_interval

log = logging.getLogger("recalld")

EXIT_OK = 0
EXIT_GAVE_UP = 1


class DataDirInUse(RuntimeError):
    pass


# Failures at start that are the operator's to fix, reported in one line rather than a traceback.
STARTUP_ERRORS: tuple[type[BaseException], ...] = (
    DataDirInUse,
    SchemaTooNew,
    EmbeddedPostgresError,
    SocketInUse,
    OSError,  # e.g. the socket directory cannot be created
)


@contextlib.contextmanager
def data_dir_lock(data_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on the data directory: one daemon owns one embedded server."""
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / "recalld.lock", "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "?"
            raise DataDirInUse(
                f"the data directory {data_dir} is in use by another recalld (pid {holder})"
            ) from None
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
async def postgres(config: Config, data_dir: Path, notifier: Notifier) -> AsyncIterator[asyncpg.Pool]:
    """The pool, over the configured server or an embedded one that lives exactly as long."""
    embedded: EmbeddedPostgres | None = None
    dsn = config.store.dsn
    if not dsn:
        notifier.status("starting the embedded PostgreSQL")
        embedded = EmbeddedPostgres(data_dir)
        dsn = await anyio.to_thread.run_sync(embedded.start)
    try:
        pool = await db.open_pool(dsn, config.store)
        try:
            notifier.status("applying migrations")
            async with pool.acquire() as conn:
                applied = await migrate(conn)
            log.info("schema up to date", extra={"applied": applied})
            yield pool
        finally:
            with anyio.move_on_after(5, shield=True) as scope:
                await pool.close()
            if scope.cancelled_caught:
                pool.terminate()
    finally:
        if embedded is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(embedded.stop)


async def heartbeat(
    alive: Callable[[], bool], notifier: Notifier, *, task_status: anyio.abc.TaskStatus[None]
) -> None:
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


def _on_event(metrics: Metrics, event: SupervisorEvent) -> None:
    fields = {"actor": event.child, "event": str(event.kind)}
    if event.error is not None:
        fields["error"] = f"{type(event.error).__name__}: {event.error}"
    level = logging.WARNING if event.error is not None or event.kind == EventKind.GAVE_UP else logging.INFO
    log.log(level, "actor %s %s", event.child, event.kind, extra=fields)
    if event.kind == EventKind.RESTARTED:
        metrics.actor_restarts.labels(actor=event.child).inc()
    if event.kind == EventKind.STARTED:
        metrics.actor_up.labels(actor=event.child).set(1)
    elif event.kind in (EventKind.EXITED, EventKind.GAVE_UP):
        metrics.actor_up.labels(actor=event.child).set(0)


def _store_check(pool: asyncpg.Pool, config: Config, metrics: Metrics):  # type: ignore[no-untyped-def]
    async def check() -> Check:
        problem = await db.ping(pool, config.store.health_timeout_s)
        metrics.store_up.set(0 if problem else 1)
        return (
            Check(status="fail", reason="store_unavailable", detail={"error": problem})
            if problem
            else Check(status="pass")
        )

    return check


def _actors_check(supervisor: Supervisor):  # type: ignore[no-untyped-def]
    async def check() -> Check:
        states = supervisor.status()
        down = {name: str(state) for name, state in states.items() if state != ChildState.RUNNING}
        if not supervisor.alive:
            return Check(status="fail", reason="supervisor_gave_up", detail=dict(states))
        if down:
            return Check(status="fail", reason="actor_down", detail=down)
        return Check(status="pass")

    return check


async def serve(config: Config, *, data_dir: Path, socket_path: Path) -> int:
    notifier = Notifier.from_environ()
    inherited = listen_fds()
    metrics = Metrics()
    with data_dir_lock(data_dir), notifier, listening(config, socket_path, inherited) as listeners:
        async with postgres(config, data_dir, notifier) as pool:
            health = Health()
            services = Services(
                config=config,
                metrics=metrics,
                health=health,
                access=AccessPolicy(config.access),
                records=RecordRepository(pool),
                recall=RecallService(pool, config, metrics),
                alive=lambda: supervisor.alive,
                capabilities=lambda: _capabilities(health),
            )
            supervisor = Supervisor(
                [
                    # `supervisor` is bound below; the closures read it when called, after it exists
                    ChildSpec("watchdog", functools.partial(heartbeat, lambda: supervisor.alive, notifier)),
                    ChildSpec(
                        "control",
                        functools.partial(run_control_server, services, listeners),
                        restart=Restart.PERMANENT,
                        shutdown_timeout=config.server.shutdown_grace_s + 2,
                    ),
                ],
                SupervisorOptions(max_restarts=5, max_seconds=30.0),
                on_event=functools.partial(_on_event, metrics),
            )
            health.add("store", _store_check(pool, config, metrics), required=True)
            health.add("actors", _actors_check(supervisor), required=True)
            return await _run_until_signal(supervisor, notifier)


async def _capabilities(health: Health) -> dict[str, bool]:
    verdict = await health.readiness()
    store_up = verdict.checks.get("store") is not None and verdict.checks["store"].status == "pass"
    return {
        "recall.fts.v1": store_up,
        "recall.vector.v1": False,
        "embedding.v1": False,
        "duplicates.v1": False,
        "assignments.v1": False,
        "resolver.v1": False,
    }


async def _run_until_signal(supervisor: Supervisor, notifier: Notifier) -> int:
    code = EXIT_OK
    try:
        async with anyio.create_task_group() as tg:

            async def on_signal() -> None:
                with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    async for signum in signals:
                        log.info("received %s; shutting down", signal.Signals(signum).name)
                        notifier.stopping("shutting down")
                        tg.cancel_scope.cancel()
                        return

            tg.start_soon(on_signal)
            await tg.start(supervisor.run)
            notifier.ready("serving")
            log.info("recalld ready")
    except* SupervisorGaveUp as group:
        for exc in group.exceptions:
            log.error("supervisor gave up: %s; exiting so that the service manager restarts us", exc)
        notifier.stopping("supervisor gave up")
        code = EXIT_GAVE_UP
    return code
