"""Hybrid recall: run the requested routes concurrently under one deadline, fuse, rehydrate.

This module performs the recall's I/O (the routes' queries and searches, rehydration, the
telemetry row and metrics); every decision it applies (caps, the loose full-text step, the
vector floor, fusion, the over-fetch, which routes are degraded and why, whether there is an
answer at all, whether full text waits for the query's embedding) is made by the pure policy
in `actors/recall/policy.py`; the vector route itself is `daemon/services/recall_vector.py`. It stays one
module (over 400 lines) because the routes, rehydration and the over-fetch share one request's
`_Run`.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import asyncpg
import msgspec

from recalld.actors.embedding.errors import Reason
from recalld.actors.recall.fusion import (
    RRF_NAME,
    RRF_VERSION,
    WEIGHTED_NAME,
    WEIGHTED_VERSION,
    Fused,
    settle_ties,
    tie_end,
)
from recalld.actors.recall.policy import (
    FTS,
    OVERFETCH_FACTOR,
    VECTOR,
    Degradation,
    DegradedReason,
    Overfetch,
    RecallPolicy,
    above_floor,
    filled,
    fts_waits_for_embedding,
    loose_after,
    loose_up_front,
    nothing_answered,
    one_per_record,
    route_limit_missed,
    still_indexing,
    unanswered,
)
from recalld.actors.records import query_hash
from recalld.config import Config, RecallConfig
from recalld.metrics import Metrics
from recalld.services.recall_vector import RouteDown, VectorRoute
from recalld.store import db, search
from recalld.store.db import STORE_DOWN_ERRORS
from recalld.store.search import Candidate, Filters
from recalld.wire.recall import DegradedRoute, FusionInfo, RecallHit, RecallRequest, RecallResponse, Route

log = logging.getLogger("recalld.recall")

DEFAULT_ROUTES: tuple[Route, ...] = ("fts", "vector")
# What every answer's `timings_ms` reports, in ms; 0 for a stage that did not run.
STAGES = ("embed", "vector", "fts", "structured", "rehydrate", "fusion", "total")


@dataclass
class _Run:
    thresholds: dict[str, float] = field(default_factory=dict)
    """Route -> the least score its candidates must reach (config, then the request)."""
    timings: dict[str, float] = field(default_factory=dict)
    degraded: list[Degradation] = field(default_factory=list)
    found: dict[str, list[Candidate]] = field(default_factory=dict)
    asked: dict[str, int] = field(default_factory=dict)
    """Route -> the candidate cap its latest answer in `found` was asked for."""
    within: list[uuid.UUID] | None = None
    """The records kind and attribute filters let through, when few enough for the vector route
    to score exactly (read once per request)."""
    within_read: bool = False
    """Whether `within` was read (None is an answer too: the filters let too many through)."""
    limits: dict[str, float] = field(default_factory=dict)
    """Route -> when its own `route_deadline_ms` runs out, set by its first call."""
    generation: str | None = None
    partial: set[str] = field(default_factory=set)
    """Routes that answered from part of the namespace (the vector route while it is indexed)."""
    vector_ready: anyio.Event | None = None
    """Set once the vector route has its query vector or has failed; full text waits for it when
    `fts_waits_for_embedding` says so (None: it does not wait)."""

    def vector_known(self) -> None:
        """The vector route has its query vector, or has failed: full text waits no longer."""
        if self.vector_ready is not None:
            self.vector_ready.set()

    def down(self, degraded: Degradation) -> None:
        """Name a route degraded; its first reason stands."""
        if all(d.route != degraded.route for d in self.degraded):
            self.degraded.append(degraded)

    def may_have_more(self, route: str) -> bool:
        """Whether the route's latest answer filled its cap: searching deeper may find more."""
        return route in self.found and filled(len(self.found[route]), self.asked[route])


def _by_name(table: Mapping[Any, float]) -> dict[str, float]:
    """A config table keyed by route or level names (typed as their literals) as the plain
    str-keyed dict fusion and the answer take: a mapping's key type does not widen by itself."""
    return dict(table)


def recall_policy(config: RecallConfig) -> RecallPolicy:
    """The policy's view of `[recall]`."""
    return RecallPolicy(
        fts_candidates=config.fts_candidates,
        structured_candidates=config.structured_candidates,
        vector_candidates=config.vector_candidates,
        rrf_k=config.rrf_k,
        weights=_by_name(config.weights),
        fts_evidence_weights=_by_name(config.fts_evidence_weights),
        thresholds=_by_name(config.thresholds),
        overfetch_rounds=config.overfetch_rounds,
        exact_filter_max_records=config.exact_filter_max_records,
        partial_weight=config.partial_weight,
    )


class RecallService:
    """Answers a `RecallRequest` from the requested routes, run concurrently (full text starting
    once the query vector is ready when the model runs in this process, `fts_waits_for_embedding`).

    Guarantees:
    - Every result is re-read from PostgreSQL when the answer is made: a record forgotten, moved
      out of the namespace or filters, or (found by the vector route alone) changed since it was
      indexed never comes back, whatever a route found.
    - A route that could not answer (down, failed, late, or short of k after the over-fetch) is
      named in `degraded_routes` with a stable reason code, once, and counted in the metrics;
      the other routes' results still make the answer.
    - The request's deadline (its `deadline_ms`, else `[recall] default_deadline_ms`) bounds
      every route, each over-fetch round and each route's own `route_deadline_ms`; what has not
      answered by then is named late, not waited for.
    - When no route answered, `recall` raises `NothingAnswered` naming them, unless they all
      only ran out of the time the client itself gave (then: no results, every route named late).
    - Each answer is handed to the `searches` recorder as one row holding the query's hash,
      never its text.

    It never writes records, never raises an HTTP error (the control layer maps
    `NothingAnswered` to a 503), and never blocks the loop on a costly search (the vector route
    searches in a worker thread unless it is an unfiltered FAISS top-k search of an ordinary k
    and the handle's such searches held the loop at most 2 ms: `actors/index/placement.py`).
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        config: Config,
        metrics: Metrics,
        searches: search.SearchRecorder,
        vector: VectorRoute | None = None,
        *,
        embedded_in_process: bool = False,
    ) -> None:
        self._pool = pool
        self._searches = searches
        self._config = config
        self._policy = recall_policy(config.recall)
        self._metrics = metrics
        # Each stage's histogram child, looked up once: `labels()` per stage per recall was
        # measurable on the loop.
        self._stage_histograms = {stage: metrics.recall_stages.labels(stage=stage) for stage in STAGES}
        self._vector = vector
        self._fts_waits = fts_waits_for_embedding(
            config.recall.fts_waits_for_embedding, embedded_in_process=embedded_in_process
        )

    async def _route(
        self, run: _Run, route: Route, filters: Filters, query: str, cap: int, deadline: float, *, loose: bool = True
    ) -> None:
        started = time.perf_counter()
        embed_ms = 0.0
        try:
            if route == FTS:
                if run.vector_ready is not None:
                    with anyio.move_on_after(self._config.recall.fts_embedding_wait_ms / 1000):
                        await run.vector_ready.wait()
                    started = time.perf_counter()  # the wait is the embedding's time, not full text's
                async with db.connection(self._pool) as conn:
                    found = await search.full_text(conn, filters, query, cap, loose=loose)
            elif route == "structured":
                async with db.connection(self._pool) as conn:
                    found = await search.structured(conn, filters, cap)
            else:
                if self._vector is None:
                    raise RouteDown(Reason.NO_PROVIDER, "no embedding provider is configured")
                try:
                    within = await self._within(run, filters, cap)
                    answer = await self._vector(filters, query, cap, deadline, within, run.vector_known)
                finally:
                    run.vector_known()  # failed before its vector: full text waits no longer
                found, embed_ms, run.generation = answer.candidates, answer.embed_ms, answer.generation
                indexing = still_indexing(answer.pending)
                if indexing is not None:
                    run.down(indexing)
                    run.partial.add(route)
                run.timings["embed"] = run.timings.get("embed", 0.0) + embed_ms
                found = above_floor(found, run.thresholds.get(route))
        except RouteDown as exc:
            run.down(Degradation(route, exc.reason, exc.message))
            return
        except STORE_DOWN_ERRORS as exc:
            run.down(Degradation(route, DegradedReason.STORE_UNAVAILABLE, type(exc).__name__))
            return
        finally:
            run.timings[route] = run.timings.get(route, 0.0) + (time.perf_counter() - started) * 1000 - embed_ms
        run.found[route] = one_per_record(found)
        run.asked[route] = cap

    async def _within(self, run: _Run, filters: Filters, cap: int) -> list[uuid.UUID] | None:
        """The records the filters let through, when few enough for the vector route to score
        just those, exactly (`RecallPolicy.exact_filter_limit`). Read from PostgreSQL once per
        request; None: search everything."""
        limit = self._policy.exact_filter_limit(cap, beyond_namespace=filters.beyond_namespace)
        if limit is None:
            return None
        if not run.within_read:
            async with db.connection(self._pool) as conn:
                run.within = await search.filtered_records(conn, filters, limit)
            run.within_read = True
        return run.within

    async def _bounded(
        self, run: _Run, route: Route, filters: Filters, query: str, cap: int, deadline: float, *, loose: bool = True
    ) -> None:
        """Run a route under its own deadline when it has one (the sooner of it and the request's)."""
        own = self._config.recall.route_deadline_ms.get(route)
        if own is None:
            await self._route(run, route, filters, query, cap, deadline, loose=loose)
            return
        # One limit for all of the route's work in this request, over-fetch rounds included.
        limit = run.limits.setdefault(route, anyio.current_time() + own / 1000)
        with anyio.move_on_at(min(deadline, limit)) as scope:
            await self._route(run, route, filters, query, cap, min(deadline, limit), loose=loose)
        if scope.cancelled_caught and route not in run.found:
            missed = route_limit_missed(route, own, limit=limit, deadline=deadline)
            if missed is not None:
                run.down(missed)

    def _fuse(self, run: _Run, method: str) -> list[Fused[uuid.UUID]]:
        """Fuse the routes' candidates with `method` (`RecallPolicy.fuse`)."""
        started = time.perf_counter()
        scored = {route: [(c.id, c.score) for c in found] for route, found in run.found.items()}
        fused = self._policy.fuse(method, scored, partial=run.partial)
        run.timings["fusion"] = run.timings.get("fusion", 0.0) + (time.perf_counter() - started) * 1000
        return fused

    async def _rehydrate(
        self, run: _Run, fused: list[Fused[uuid.UUID]], filters: Filters, query: str, k: int
    ) -> list[RecallHit]:
        """Re-read the best candidates; drop what is gone, filtered out or of a stale revision."""
        if not fused:
            return []  # nothing to re-read: no connection taken (the routes may have run out of time)
        started = time.perf_counter()
        vector_hits = run.found.get(VECTOR, [])
        vector_revisions = {c.id: c.revision for c in vector_hits}
        scores = {route: {c.id: c.score for c in found} for route, found in run.found.items()}
        best_chunks = {c.id: c.chunk for c in vector_hits if c.chunk is not None}
        results: list[RecallHit] = []
        # Exactly k first: each row read costs a highlighted snippet, and candidates are rarely
        # dropped; a short page is followed by the next candidates, twice as many each time.
        window = k
        offset = 0
        async with db.connection(self._pool) as conn:
            while len(results) < k and offset < len(fused):
                page = fused[offset : tie_end(fused, offset + window)]
                offset += len(page)
                keys = [f.key for f in page]
                chunks = {key: best_chunks[key] for key in keys if key in best_chunks}
                rows = await search.rehydrate(conn, filters, keys, query, self._config.recall.snippet_words, chunks)
                # What only the random record ids told apart goes by source path instead, so the
                # same files indexed again (an eval's fresh namespace) answer in the same order.
                page = settle_ties(page, {key: row["source_path"] for key, row in rows.items()})
                for entry in page:
                    row = rows.get(entry.key)
                    if row is None:
                        continue
                    # a vector hit on an older revision, found by no other route, is stale
                    if set(entry.ranks) == {VECTOR} and vector_revisions.get(entry.key) != row["revision"]:
                        continue
                    results.append(
                        RecallHit(
                            id=row["id"],
                            title=row["title"],
                            kind=row["kind"],
                            source_path=row["source_path"],
                            score=round(entry.score, 6),
                            routes=entry.ranks,
                            # unrounded: a client may send a vector score back as its floor
                            route_scores={route: scores[route][entry.key] for route in entry.ranks},
                            revision=row["revision"],
                            snippet=row["snippet"] or None,
                        )
                    )
                    if len(results) == k:
                        break
                window *= 2
        run.timings["rehydrate"] = run.timings.get("rehydrate", 0.0) + (time.perf_counter() - started) * 1000
        return results

    async def recall(self, request: RecallRequest) -> RecallResponse:
        started = time.perf_counter()
        config = self._config.recall
        routes: list[Route] = list(dict.fromkeys(request.routes or DEFAULT_ROUTES))
        k = request.k or config.default_k
        method = request.fusion or config.fusion
        deadline_ms = request.deadline_ms or config.default_deadline_ms
        deadline = anyio.current_time() + deadline_ms / 1000
        filters = Filters(request.namespace, request.kinds, request.attributes)
        run = _Run(thresholds=self._policy.floors(_by_name(request.thresholds or {})))
        caps = self._policy.caps(k)
        vector = self._vector
        if self._fts_waits and vector and FTS in routes and VECTOR in routes and vector.will_embed(request.query):
            run.vector_ready = anyio.Event()  # full text starts once the model is done (`_route`)

        await self._run_routes(run, routes, filters, request.query, caps, deadline)
        for late in unanswered(routes, run.found, deadline_ms):
            run.down(late)
        client_time_up = request.deadline_ms is not None and anyio.current_time() >= deadline
        try:
            refusal = nothing_answered(run.found, run.degraded, client_time_up=client_time_up)
            if refusal is not None:
                raise refusal
            results = await self._fused_results(run, method, filters, request.query, k, caps[VECTOR], deadline)
        finally:  # the over-fetch may name a route too; a refusal counts its routes as well
            for degraded in run.degraded:
                self._metrics.degraded.labels(route=degraded.route, reason=degraded.reason).inc()

        run.timings["total"] = (time.perf_counter() - started) * 1000
        timings = {stage: round(run.timings.get(stage, 0.0), 3) for stage in STAGES}
        fusion = self._fusion_info(method, routes, run)
        search_id = uuid.uuid4()
        self._record(search_id, request, routes, fusion, results, timings, run.degraded)
        self._metrics.recalls.inc()
        for stage, ms in run.timings.items():
            self._stage_histograms[stage].observe(ms / 1000)
        return RecallResponse(
            results=results,
            degraded_routes=[
                DegradedRoute(route=d.route, reason=d.reason, message=d.message, pending=d.pending)
                for d in run.degraded
            ],
            fusion=fusion,
            generation=run.generation,
            timings_ms=timings,
            search_id=search_id,
        )

    async def _run_routes(
        self, run: _Run, routes: list[Route], filters: Filters, query: str, caps: dict[str, int], deadline: float
    ) -> None:
        """The requested routes, concurrently, until the request's deadline; then full text's
        loose step if the policy calls for it (`loose_up_front`, `loose_after`)."""
        loose = loose_up_front(routes)
        with anyio.move_on_at(deadline):
            async with anyio.create_task_group() as tg:
                *others, last = [
                    functools.partial(self._bounded, run, route, filters, query, caps[route], deadline, loose=loose)
                    for route in routes
                ]
                for route_call in others:
                    tg.start_soon(route_call)
                await last()  # in this task: one task fewer to start per recall
        if loose_after(routes, run.found):
            with anyio.move_on_at(deadline):
                await self._bounded(run, FTS, filters, query, caps[FTS], deadline)

    async def _fused_results(
        self, run: _Run, method: str, filters: Filters, query: str, k: int, vector_cap: int, deadline: float
    ) -> list[RecallHit]:
        """Fuse and rehydrate; while the policy says the answer is short because filters the index
        cannot apply (kinds, attributes) or rehydration dropped vector candidates, search deeper
        (`RecallPolicy.overfetch`) rather than answer short (a false "fewer than k")."""
        policy = self._policy
        results = await self._rehydrate(run, self._fuse(run, method), filters, query, k)
        cap = vector_cap
        rounds_done = 0
        out_of_time = False
        step = policy.overfetch(found=len(results), k=k, vector_full=run.may_have_more(VECTOR), rounds_done=0)
        while step is Overfetch.DEEPER:
            # the sooner of the request's deadline and the route's own limit (set by its first call)
            if out_of_time := anyio.current_time() >= min(deadline, run.limits.get(VECTOR, deadline)):
                break
            rounds_done += 1
            cap *= OVERFETCH_FACTOR
            with anyio.move_on_at(deadline):
                await self._bounded(run, VECTOR, filters, query, cap, deadline)
            if run.asked[VECTOR] != cap:  # cut off by time (or failed, and named already)
                out_of_time = True
                break
            results = await self._rehydrate(run, self._fuse(run, method), filters, query, k)
            step = policy.overfetch(
                found=len(results), k=k, vector_full=run.may_have_more(VECTOR), rounds_done=rounds_done
            )
        if step is not Overfetch.DONE:  # short of k while the vector route had more to give
            run.down(
                policy.shortfall(
                    k=k,
                    searched=run.asked[VECTOR],
                    # kinds or attributes applied after the index walk, not by scoring them exactly
                    filtered_afterwards=filters.beyond_namespace and run.within is None,
                    out_of_time=out_of_time,
                )
            )
        return results

    def _fusion_info(self, method: str, routes: list[Route], run: _Run) -> FusionInfo:
        """What the order depended on, as the answer and the search row name it."""
        policy = self._policy
        name, version = (WEIGHTED_NAME, WEIGHTED_VERSION) if method == WEIGHTED_NAME else (RRF_NAME, RRF_VERSION)
        return FusionInfo(
            name=name,
            version=version,
            weights={r: policy.weights.get(r, 1.0) for r in routes},
            k=policy.rrf_k if name == RRF_NAME else None,
            evidence=dict(policy.fts_evidence_weights) if FTS in routes else {},
            thresholds={route: floor for route, floor in run.thresholds.items() if route in routes},
        )

    def _record(
        self,
        search_id: uuid.UUID,
        request: RecallRequest,
        routes: list[Route],
        fusion: FusionInfo,
        results: list[RecallHit],
        timings: dict[str, float],
        degraded: list[Degradation],
    ) -> None:
        self._searches.add(
            {
                "id": search_id,
                "namespace": request.namespace,
                "query_hash": query_hash(request.namespace, request.query),
                "routes": list(routes),
                "fusion": msgspec.to_builtins(fusion),  # everything the order depended on, frozen
                "results": [{"id": str(r.id), "rank": i, "routes": r.routes} for i, r in enumerate(results, 1)],
                "timings_ms": timings,
                "degraded_routes": [{"route": d.route, "reason": d.reason} for d in degraded],
            }
        )
