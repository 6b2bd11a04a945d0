"""Assembly: wire adapters into actors, actors into the supervision tree, checks into Health.

`assemble` is the one place that knows which parts a daemon has and in which order they start
(list order: the embedded PostgreSQL's keeper first, the control server last, so nothing is
served before the parts behind it are up). It starts nothing itself: `recalld.app` runs what it
returns.
"""

from __future__ import annotations

import functools
import logging
import socket
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx

from recalld.actors.embedding.embedder import Embedder, EmbedderSettings
from recalld.actors.embedding.pace import Foreground
from recalld.actors.embedding.query_cache import QueryVectorCache
from recalld.actors.gc.sweeper import Sweeper, SweepSettings
from recalld.actors.index.manager import IndexManager
from recalld.actors.index.settings import IndexSettings
from recalld.actors.kernel.supervisor import (
    ChildSpec,
    EventKind,
    Restart,
    Supervisor,
    SupervisorEvent,
    SupervisorOptions,
)
from recalld.bringup import heartbeat
from recalld.config import Config
from recalld.control.access import AccessPolicy
from recalld.control.context import Services
from recalld.control.health import Health, actors_check, embedding_check, resolver_check, store_check, vector_check
from recalld.control.server import Listener, run_control_server
from recalld.metrics import Metrics
from recalld.providers import make_provider
from recalld.providers.early import EarlyModels
from recalld.providers.in_process import InProcessModel
from recalld.services.assignments import AssignmentService
from recalld.services.assignments import build as build_assignments
from recalld.services.duplicates import DuplicateChecker
from recalld.services.duplicates_writer import TitleVectorWriter
from recalld.services.recall import RecallService
from recalld.services.recall_indexing import IndexingStatus
from recalld.services.recall_vector import VectorRoute
from recalld.services.records import RecordWrites
from recalld.store.builder_lock import PgBuilderLock, new_generation_id
from recalld.store.duplicates import PgTitleStore
from recalld.store.embedded import EmbeddedPostgres, keep_running
from recalld.store.evals import EvalStore
from recalld.store.notifications import listen
from recalld.store.records import RecordRepository
from recalld.store.roles import PgTickLocks, RoleHolders
from recalld.store.search import FeedbackStore, SearchLog, SearchRecorder
from recalld.store.usage import UsageStore
from recalld.store.vectors import PgVectorStore
from recalld.systemd import Notifier

log = logging.getLogger("recalld")


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
    early: EarlyModels,
) -> Daemon:
    """Wire adapters into actors and actors into the supervision tree (start order = list order).

    `early`: the in-process models `serve` set loading before it opened the store."""
    supervisor: Supervisor  # bound last; the closures below read it only when called, after that
    usage = UsageStore(pool)
    generations = Path(config.index.directory) if config.index.directory else data_dir / "generations"
    # Who this daemon is among those sharing the database (the copies it builds say it).
    member = f"{socket.gethostname()}:{generations.absolute()}"
    provider = early.recall or make_provider(config.embedding, http)
    embedder = None
    index = None
    # The duplicate check's own title model (`[duplicates] model`), behind an embedder of its own;
    # `load_early` made it exactly when the configuration runs it.
    title_embedder = None
    # Queries and duplicate checks in either embedder hold it; indexing in both makes room for them.
    foreground = Foreground()
    title_store = PgTitleStore(pool, unchecked_kinds=config.duplicates.unchecked_kinds)
    if early.title is not None:
        title_embedder = Embedder(
            early.title, usage=usage, settings=EmbedderSettings.from_config(config.embedding), foreground=foreground
        )
    if provider is not None:
        embedder = Embedder(
            provider,
            usage=usage,
            settings=EmbedderSettings.from_config(config.embedding),
            token_counter=provider if hasattr(provider, "count_tokens") else None,  # type: ignore[arg-type]
            foreground=foreground,
        )
        index = IndexManager(
            PgVectorStore(pool),
            PgBuilderLock(dsn),
            embedder,
            IndexSettings.from_config(config.index, root=generations),
            new_generation_id=new_generation_id,
            on_swap=lambda why: metrics.handle_swaps.labels(why=why.split()[0]).inc(),
            extend_start=notifier.extend_timeout,
            titles=title_store if config.duplicates.enabled else None,
            title_embedder=title_embedder,
            member=member,
        )
    query_vectors = QueryVectorCache(config.recall.query_cache)
    indexing = IndexingStatus(index) if index is not None else None
    searches = SearchRecorder(pool)
    metrics.watch(embedder, index, query_vectors, searches, title_embedder)
    health = Health()
    title_vectors = TitleVectorWriter(title_store) if config.duplicates.enabled else None
    duplicates = (
        DuplicateChecker(
            title_store,
            title_embedder or embedder,
            config.duplicates,
            metrics,
            writer=title_vectors,
            wake=index.wake if index is not None else None,
        )
        if title_vectors is not None
        else None
    )
    # the roles held for one step at a time, taken by this daemon's actors through one set of locks
    locks = PgTickLocks(pool)
    assignments = build_assignments(
        config, pool=pool, http=http, usage=usage, metrics=metrics, prices=config.embedding.prices, locks=locks
    )
    records = RecordRepository(pool)
    services = Services(
        config=config,
        metrics=metrics,
        health=health,
        access=AccessPolicy(config.access),
        records=records,
        writes=RecordWrites(records, config, metrics, duplicates, indexing, foreground),
        usage=usage,
        feedback=FeedbackStore(pool, searches),
        embedder=embedder,
        index=index,
        recall=RecallService(
            pool,
            config,
            metrics,
            searches,
            VectorRoute(embedder, index, query_vectors, indexing) if embedder and index else None,
            embedded_in_process=isinstance(provider, InProcessModel),
        ),
        alive=lambda: supervisor.alive,
        capabilities=lambda: _capabilities(health, embedder, index, duplicates, assignments),
        duplicates=duplicates,
        evals=EvalStore(pool),
        dsn=dsn,
        assignments=assignments,
        indexing=indexing,
        roles=RoleHolders(pool, locks, lambda: index is not None and index.is_builder),
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
    if title_vectors is not None and (title_embedder or embedder) is not None:  # else no check embeds
        children.append(ChildSpec("title-vectors", title_vectors.run))
    if title_embedder is not None:  # before the index manager, whose catch-up embeds titles with it
        children.append(ChildSpec("title-embedder", title_embedder.run, shutdown_timeout=config.embedding.timeout_s))
    if embedder is not None and index is not None:
        children += [
            ChildSpec("embedder", embedder.run, shutdown_timeout=config.embedding.timeout_s),
            ChildSpec("index", index.run, shutdown_timeout=10.0),
            ChildSpec("notifications", functools.partial(listen, dsn, index.wake)),
        ]
    # Whatever the provider: retention and crash leftovers do not depend on embedding. Without an
    # index manager this daemon holds no lease on any generation.
    sweeper = Sweeper(
        PgVectorStore(pool),
        SearchLog(pool),
        generations,
        leased=index.generations_in_use if index is not None else set,
        settings=SweepSettings(
            interval_s=config.gc.interval_s,
            rollback_window_s=config.gc.rollback_window_s,
            temp_grace_s=config.gc.temp_grace_s,
            search_retention_s=config.gc.search_retention_days * 86400,
            dispute_retention_s=config.gc.dispute_retention_days * 86400,
        ),
        on_delete=lambda what: metrics.sweeper_deletions.labels(what=what).inc(),
        disputes=assignments.disputes,
        locks=locks,
    )
    children.append(ChildSpec("sweeper", sweeper.run))
    children += assignments.children(config)
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
    health.add("store", store_check(pool, config, metrics), required=True)
    health.add("actors", actors_check(supervisor), required=True)
    health.add("embedding", embedding_check(embedder), required=config.recall.vector_required)
    health.add("vector", vector_check(index), required=config.recall.vector_required)
    health.add("resolver", resolver_check(assignments), required=False)
    return Daemon(services, supervisor)


async def _capabilities(
    health: Health,
    embedder: Embedder | None,
    index: IndexManager | None,
    duplicates: DuplicateChecker | None,
    assignments: AssignmentService,
) -> dict[str, bool]:
    """What /v1/capabilities answers: which features this daemon can serve right now."""
    verdict = await health.readiness()
    store_up = verdict.checks.get("store") is not None and verdict.checks["store"].status == "pass"
    return {
        "recall.fts.v1": store_up,
        "recall.structured.v1": store_up,
        "recall.vector.v1": index is not None and index.problem() is None,
        "embedding.v1": embedder is not None and embedder.health().status == "pass",
        "duplicates.v1": store_up and duplicates is not None and duplicates.available,
        "assignments.v1": store_up,
        "resolver.v1": store_up and assignments.resolver_state() == "ok",
    }


def _on_event(metrics: Metrics, event: SupervisorEvent) -> None:
    """Log a supervisor event and count it in the actor metrics."""
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
