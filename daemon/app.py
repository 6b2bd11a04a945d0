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
from dataclasses import dataclass
from pathlib import Path

import anyio
import asyncpg
import httpx
import msgspec

from actors.embedder import Embedder, EmbedderSettings
from actors.embedding.query_cache import QueryVectorCache
from actors.index.vectors import single_threaded_blas
from actors.index_manager import IndexManager, IndexSettings
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
from actors.sweeper import Sweeper, SweepSettings
from daemon.config import Config
from daemon.control.access import AccessPolicy
from daemon.control.health import Check, CheckFn, Health
from daemon.control.server import Listener, Services, SocketInUse, run_control_server
from daemon.metrics import Metrics
from daemon.notifications import listen
from daemon.providers import make_provider
from daemon.recall import RecallService, vector_search
from daemon.store import db
from daemon.store.embedded import EmbeddedPostgres, EmbeddedPostgresError, keep_running, max_connections_for
from daemon.store.migrations import SchemaTooNew, migrate_database
from daemon.store.records import RecordRepository
from daemon.store.search import FeedbackStore, SearchLog, SearchRecorder
from daemon.store.usage import UsageStore
from daemon.store.vectors import PgBuilderLock, PgVectorStore, new_generation_id
from daemon.systemd import Notifier, listen_fds, watchdog_interval

log = logging.getLogger("recalld")

EXIT_OK = 0
EXIT_GAVE_UP = 1
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
    for parent in [p for p in reversed(data_dir.parents) if not p.exists()]:
        with contextlib.suppress(FileExistsError):
            parent.mkdir()
            parent.chmod(0o755)  # exactly: mkdir's mode went through our private umask
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
    (returned too, for `keep_running`; None with a DSN)."""
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


def _store_check(pool: asyncpg.Pool, config: Config, metrics: Metrics) -> CheckFn:
    async def check() -> Check:
        problem = await db.ping(pool, config.store.health_timeout_s)
        metrics.store_up.set(0 if problem else 1)
        return (
            Check(status="fail", reason="store_unavailable", detail={"error": problem})
            if problem
            else Check(status="pass")
        )

    return check


def _embedding_check(embedder: Embedder | None) -> CheckFn:
    async def check() -> Check:
        if embedder is None:
            return Check(status="fail", reason="no_provider", detail={"message": "[embedding] provider = none"})
        health = embedder.health()
        detail: dict[str, object] = {"message": health.message, "breaker": health.breaker}
        if health.space is not None:
            detail["space"] = msgspec.to_builtins(health.space)
            detail["space_id"] = health.space.key
        if health.probe is not None:
            detail["probe"] = msgspec.to_builtins(health.probe)
        return Check(status=health.status, reason=health.reason, detail=detail)

    return check


def _actors_check(supervisor: Supervisor) -> CheckFn:
    async def check() -> Check:
        states = supervisor.status()
        down: dict[str, object] = {name: str(state) for name, state in states.items() if state != ChildState.RUNNING}
        if not supervisor.alive:
            return Check(status="fail", reason="supervisor_gave_up", detail=dict(states))
        if down:
            return Check(status="fail", reason="actor_down", detail=down)
        return Check(status="pass")

    return check


def _vector_check(index: IndexManager | None) -> CheckFn:
    async def check() -> Check:
        if index is None:
            return Check(status="fail", reason="no_provider", detail={"message": "provider = none"})
        problem = index.problem()
        detail = index.snapshot()
        if problem is None:
            return Check(status="pass", detail=detail)
        reason, message = problem
        return Check(status="fail", reason=reason, detail={"message": message, **detail})

    return check


@dataclass
class Daemon:
    """Everything `serve` runs: the services behind the socket and the supervision tree."""

    services: Services
    supervisor: Supervisor


def assemble(
    config: Config,
    *,
    pool: asyncpg.Pool,
    dsn: str,
    embedded: EmbeddedPostgres | None,
    http: httpx.AsyncClient,
    data_dir: Path,
    metrics: Metrics,
    notifier: Notifier,
    listeners: list[Listener],
) -> Daemon:
    """Wire adapters into actors and actors into the supervision tree (start order = list order)."""
    supervisor: Supervisor  # bound last; the closures below read it only when called, after that
    usage = UsageStore(pool)
    provider = make_provider(config.embedding, http)
    embedder = None
    index = None
    if provider is not None:
        embedder = Embedder(
            provider,
            usage=usage,
            settings=EmbedderSettings.from_config(config.embedding),
            token_counter=provider if hasattr(provider, "count_tokens") else None,  # type: ignore[arg-type]
        )
        index = IndexManager(
            PgVectorStore(pool),
            PgBuilderLock(dsn),
            embedder,
            IndexSettings(
                root=Path(config.index.directory) if config.index.directory else data_dir / "generations",
                chunk_chars=config.index.chunk_chars,
                chunk_overlap=config.index.chunk_overlap,
                factory=config.index.factory,
                compact_share=config.index.compact_share,
                index_batch=config.index.index_batch,
                poll_s=config.index.poll_s,
                recheck_s=config.index.recheck_s,
                hold_s=config.index.hold_s,
            ),
            new_generation_id=new_generation_id,
            on_swap=lambda why: metrics.handle_swaps.labels(why=why.split()[0]).inc(),
            extend_start=notifier.extend_timeout,
        )
    query_vectors = QueryVectorCache(config.recall.query_cache)
    searches = SearchRecorder(pool)
    metrics.watch(embedder, index, query_vectors, searches)
    health = Health()
    services = Services(
        config=config,
        metrics=metrics,
        health=health,
        access=AccessPolicy(config.access),
        records=RecordRepository(pool),
        usage=usage,
        feedback=FeedbackStore(pool, searches),
        embedder=embedder,
        index=index,
        recall=RecallService(
            pool,
            config,
            metrics,
            searches,
            vector_search(embedder, index, query_vectors) if embedder and index else None,
        ),
        alive=lambda: supervisor.alive,
        capabilities=lambda: _capabilities(health, embedder, index),
    )
    children: list[ChildSpec] = []
    if embedded is not None:
        children.append(
            ChildSpec("postgres", functools.partial(keep_running, embedded, metrics.embedded_postgres_restarts.inc))
        )
    children += [
        ChildSpec("watchdog", functools.partial(heartbeat, lambda: supervisor.alive, notifier)),
        ChildSpec("searches", searches.run),
    ]
    if embedder is not None and index is not None:
        children += [
            ChildSpec("embedder", embedder.run, shutdown_timeout=config.embedding.timeout_s),
            ChildSpec("index", index.run, shutdown_timeout=10.0),
            ChildSpec("notifications", functools.partial(listen, dsn, index.wake)),
            ChildSpec(
                "sweeper",
                Sweeper(
                    PgVectorStore(pool),
                    SearchLog(pool),
                    index.settings.root,
                    leased=index.generations_in_use,
                    settings=SweepSettings(
                        interval_s=config.gc.interval_s,
                        rollback_window_s=config.gc.rollback_window_s,
                        temp_grace_s=config.gc.temp_grace_s,
                        search_retention_s=config.gc.search_retention_days * 86400,
                    ),
                    on_delete=lambda what: metrics.sweeper_deletions.labels(what=what).inc(),
                ).run,
            ),
        ]
    children.append(
        ChildSpec(
            "control",
            functools.partial(run_control_server, services, listeners),
            restart=Restart.PERMANENT,
            shutdown_timeout=config.server.shutdown_grace_s + 2,
        )
    )
    supervisor = Supervisor(
        children,
        SupervisorOptions(max_restarts=5, max_seconds=30.0),
        on_event=functools.partial(_on_event, metrics),
    )
    health.add("store", _store_check(pool, config, metrics), required=True)
    health.add("actors", _actors_check(supervisor), required=True)
    health.add("embedding", _embedding_check(embedder), required=config.recall.vector_required)
    health.add("vector", _vector_check(index), required=config.recall.vector_required)
    return Daemon(services, supervisor)


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
                code = await _serve(config, data_dir, socket_path, notifier)
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
            )
            return await _supervise(daemon.supervisor, notifier)


async def _capabilities(health: Health, embedder: Embedder | None, index: IndexManager | None) -> dict[str, bool]:
    verdict = await health.readiness()
    store_up = verdict.checks.get("store") is not None and verdict.checks["store"].status == "pass"
    return {
        "recall.fts.v1": store_up,
        "recall.structured.v1": store_up,
        "recall.vector.v1": index is not None and index.problem() is None,
        "embedding.v1": embedder is not None and embedder.health().status == "pass",
        "duplicates.v1": False,
        "assignments.v1": False,
        "resolver.v1": False,
    }


async def _supervise(supervisor: Supervisor, notifier: Notifier) -> int:
    """Run the supervision tree until cancelled (a signal) or until it gives up."""
    code = EXIT_OK
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(supervisor.run)
            notifier.ready("serving")
            log.info("recalld ready")
    except* SupervisorGaveUp as group:
        for exc in group.exceptions:
            log.error("supervisor gave up: %s; exiting so that the service manager restarts us", exc)
        notifier.stopping("supervisor gave up")
        code = EXIT_GAVE_UP
    return code
