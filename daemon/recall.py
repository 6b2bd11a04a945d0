"""Hybrid recall: run the requested routes concurrently under one deadline, fuse, rehydrate.

A route that cannot answer (not available, failed, past its deadline) is reported in
`degraded_routes` with a reason code while the others still answer; a request that asked
only for routes that are down gets a 503 naming them. Whatever the routes found, the answer
is re-read from PostgreSQL: forgotten, moved or stale-revision records never come back.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import anyio
import asyncpg
import msgspec

from actors.embedder import Embedder
from actors.embedding.errors import EmbeddingError, Reason
from actors.embedding.query_cache import QueryVectorCache
from actors.fusion import (
    RRF_NAME,
    RRF_VERSION,
    WEIGHTED_NAME,
    WEIGHTED_VERSION,
    Fused,
    reciprocal_rank,
    weighted_score,
)
from actors.index_manager import IndexManager, IndexUnavailable
from actors.query import evidence_of
from actors.records import query_hash
from daemon.config import Config
from daemon.control.errors import ApiError, ErrorCode
from daemon.control.wire import (
    DegradedRoute,
    FusionInfo,
    RecallHit,
    RecallRequest,
    RecallResponse,
    Route,
)
from daemon.metrics import Metrics
from daemon.store import db, search
from daemon.store.db import STORE_DOWN_ERRORS
from daemon.store.search import Candidate, Filters

log = logging.getLogger("recalld.recall")

DEFAULT_ROUTES: tuple[Route, ...] = ("fts", "vector")
# What every answer's `timings_ms` reports, in ms; 0 for a stage that did not run.
STAGES = ("embed", "vector", "fts", "structured", "rehydrate", "fusion", "total")


class DegradedReason(StrEnum):
    DEADLINE_EXCEEDED = "deadline_exceeded"
    STORE_UNAVAILABLE = "store_unavailable"
    OVERFETCH_EXHAUSTED = "overfetch_exhausted"
    """The vector route searched as deep as `overfetch_rounds` allows, and the filters or
    rehydration dropped so many of its records that fewer than k are left."""


class RouteDown(Exception):
    """A route cannot answer now; `reason` is a stable code."""

    def __init__(self, reason: str, message: str = "") -> None:
        super().__init__(message or reason)
        self.reason = reason
        self.message = message


@dataclass
class VectorAnswer:
    candidates: list[Candidate]
    embed_ms: float
    generation: str | None


# The vector route: (filters, query, candidate cap, deadline as anyio time, the only records to
# search or None for all) -> answer, or RouteDown.
VectorSearch = Callable[[Filters, str, int, float, list[uuid.UUID] | None], Awaitable[VectorAnswer]]


@dataclass
class _Run:
    thresholds: dict[str, float] = field(default_factory=dict)
    """Route -> the least score its candidates must reach (config, then the request)."""
    timings: dict[str, float] = field(default_factory=dict)
    degraded: list[DegradedRoute] = field(default_factory=list)
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

    def down(self, route: str, reason: str, message: str = "") -> None:
        if all(d.route != route for d in self.degraded):
            self.degraded.append(DegradedRoute(route=route, reason=reason, message=message))

    def may_have_more(self, route: str) -> bool:
        """Whether the route's latest answer filled its cap: searching deeper may find more."""
        return route in self.found and len(self.found[route]) >= self.asked[route]


def _by_name(table: Mapping[Any, float]) -> dict[str, float]:
    """A config table keyed by route or level names (typed as their literals) as the plain
    str-keyed dict fusion and the answer take: a mapping's key type does not widen by itself."""
    return dict(table)


def _dedupe(found: list[Candidate]) -> list[Candidate]:
    """One entry per record, at its best position (several chunks of a record count once)."""
    seen: set[uuid.UUID] = set()
    unique = []
    for candidate in found:
        if candidate.id not in seen:
            seen.add(candidate.id)
            unique.append(candidate)
    return unique


class RecallService:
    def __init__(
        self,
        pool: asyncpg.Pool,
        config: Config,
        metrics: Metrics,
        searches: search.SearchRecorder,
        vector: VectorSearch | None = None,
    ) -> None:
        self._pool = pool
        self._searches = searches
        self._config = config
        self._metrics = metrics
        self._vector = vector

    async def _route(
        self, run: _Run, route: Route, filters: Filters, query: str, cap: int, deadline: float, *, loose: bool = True
    ) -> None:
        started = time.perf_counter()
        embed_ms = 0.0
        try:
            if route == "fts":
                async with db.connection(self._pool) as conn:
                    found = await search.full_text(conn, filters, query, cap, loose=loose)
            elif route == "structured":
                async with db.connection(self._pool) as conn:
                    found = await search.structured(conn, filters, cap)
            else:
                if self._vector is None:
                    raise RouteDown(Reason.NO_PROVIDER, "no embedding provider is configured")
                answer = await self._vector(filters, query, cap, deadline, await self._within(run, filters, cap))
                found, embed_ms, run.generation = answer.candidates, answer.embed_ms, answer.generation
                run.timings["embed"] = run.timings.get("embed", 0.0) + embed_ms
                floor = run.thresholds.get(route)
                if floor is not None:
                    # Best first, so what is left is the head: a short list also tells the
                    # over-fetch that searching deeper cannot find more above the floor.
                    found = [c for c in found if c.score >= floor]
        except RouteDown as exc:
            run.down(route, exc.reason, exc.message)
            return
        except STORE_DOWN_ERRORS as exc:
            run.down(route, DegradedReason.STORE_UNAVAILABLE, type(exc).__name__)
            return
        finally:
            run.timings[route] = run.timings.get(route, 0.0) + (time.perf_counter() - started) * 1000 - embed_ms
        run.found[route] = _dedupe(found)
        run.asked[route] = cap

    async def _within(self, run: _Run, filters: Filters, cap: int) -> list[uuid.UUID] | None:
        """The records the filters let through, when at most `exact_filter_max_records` (or the
        route's cap, if more) do: the vector route then scores just those, exactly. The index knows
        namespaces only, and its walk reaches the query's neighbours: records a filter selects may
        all lie beyond them. Read from PostgreSQL once per request; None: search everything."""
        limit = self._config.recall.exact_filter_max_records
        if limit == 0 or not filters.beyond_namespace:
            return None
        if not run.within_read:
            async with db.connection(self._pool) as conn:
                run.within = await search.filtered_records(conn, filters, max(limit, cap))
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
        if scope.cancelled_caught and route not in run.found and limit < deadline:
            run.down(route, DegradedReason.DEADLINE_EXCEEDED, f"no answer within its {own} ms route limit")

    def _fuse(self, run: _Run, method: str) -> list[Fused[uuid.UUID]]:
        """Fuse the routes' candidates with `method`; a full-text candidate weighs by its evidence
        level (exact, every word, some words: `[recall] fts_evidence_weights`)."""
        started = time.perf_counter()
        config = self._config.recall
        weights = _by_name(config.weights)
        by_level = _by_name(config.fts_evidence_weights)
        factors = {"fts": [by_level.get(evidence_of(c.score).key, 1.0) for c in run.found.get("fts", [])]}
        scored = {route: [(c.id, c.score) for c in found] for route, found in run.found.items()}
        if method == WEIGHTED_NAME:
            fused = weighted_score(scored, weights=weights, factors=factors)
        else:
            fused = reciprocal_rank(scored, k=config.rrf_k, weights=weights, factors=factors)
        run.timings["fusion"] = run.timings.get("fusion", 0.0) + (time.perf_counter() - started) * 1000
        return fused

    async def _rehydrate(
        self, run: _Run, fused: list[Fused[uuid.UUID]], filters: Filters, query: str, k: int
    ) -> list[RecallHit]:
        """Re-read the best candidates; drop what is gone, filtered out or of a stale revision."""
        if not fused:
            return []  # nothing to re-read: no connection taken (the routes may have run out of time)
        started = time.perf_counter()
        vector_hits = run.found.get("vector", [])
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
                page = fused[offset : offset + window]
                offset += len(page)
                keys = [f.key for f in page]
                chunks = {key: best_chunks[key] for key in keys if key in best_chunks}
                rows = await search.rehydrate(conn, filters, keys, query, self._config.recall.snippet_words, chunks)
                for entry in page:
                    row = rows.get(entry.key)
                    if row is None:
                        continue
                    # a vector hit on an older revision, found by no other route, is stale
                    if set(entry.ranks) == {"vector"} and vector_revisions.get(entry.key) != row["revision"]:
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
        run = _Run(thresholds=_by_name(config.thresholds | (request.thresholds or {})))
        # Each route hands fusion at least k candidates.
        caps: dict[Route, int] = {
            "fts": max(config.fts_candidates, k),
            "structured": max(config.structured_candidates, k),
            "vector": max(config.vector_candidates, k),
        }

        await self._run_routes(run, routes, filters, request.query, caps, deadline)
        for route in routes:
            if route not in run.found:
                run.down(route, DegradedReason.DEADLINE_EXCEEDED, f"no answer within {deadline_ms} ms")
        client_time_up = request.deadline_ms is not None and anyio.current_time() >= deadline
        try:
            self._refuse_when_nothing_answered(run, client_time_up=client_time_up)
            results = await self._fused_results(run, method, filters, request.query, k, caps["vector"], deadline)
        finally:  # the over-fetch may name a route too; a 503 counts its routes as well
            for degraded in run.degraded:
                self._metrics.degraded.labels(route=degraded.route, reason=degraded.reason).inc()

        run.timings["total"] = (time.perf_counter() - started) * 1000
        timings = {stage: round(run.timings.get(stage, 0.0), 3) for stage in STAGES}
        fusion = self._fusion_info(method, routes, run)
        search_id = uuid.uuid4()
        self._record(search_id, request, routes, fusion, results, timings, run.degraded)
        self._metrics.recalls.inc()
        for stage, ms in run.timings.items():
            self._metrics.recall_stages.labels(stage=stage).observe(ms / 1000)
        return RecallResponse(
            results=results,
            degraded_routes=run.degraded,
            fusion=fusion,
            generation=run.generation,
            timings_ms=timings,
            search_id=search_id,
        )

    async def _run_routes(
        self, run: _Run, routes: list[Route], filters: Filters, query: str, caps: dict[Route, int], deadline: float
    ) -> None:
        """The requested routes, concurrently, until the request's deadline."""
        # Full text's any-word matches only break ties next to an answering vector route, and
        # they are its costly step: fetched up front only without the vector route, otherwise
        # only once the vector route has failed to answer or found nothing (nothing indexed
        # yet, or nothing as similar as `thresholds.vector`): then they are the answer.
        loose = "vector" not in routes
        with anyio.move_on_at(deadline):
            async with anyio.create_task_group() as tg:
                *others, last = [
                    functools.partial(self._bounded, run, route, filters, query, caps[route], deadline, loose=loose)
                    for route in routes
                ]
                for route_call in others:
                    tg.start_soon(route_call)
                await last()  # in this task: one task fewer to start per recall
        if not loose and "fts" in run.found and not run.found.get("vector"):
            with anyio.move_on_at(deadline):
                await self._bounded(run, "fts", filters, query, caps["fts"], deadline)

    @staticmethod
    def _refuse_when_nothing_answered(run: _Run, *, client_time_up: bool) -> None:
        """A 503 when no route answered, unless they all just ran out of the time the client
        gave (its own `deadline_ms`): that is no fault of the daemon's, and the answer is what
        finished, here nothing, with every late route named. Routes that are down, or cut off by
        the daemon's own limits, are."""
        only_late = all(d.reason == DegradedReason.DEADLINE_EXCEEDED for d in run.degraded)
        if run.found or (client_time_up and only_late):
            return
        reasons = ", ".join(f"{d.route}: {d.reason}" for d in run.degraded)
        raise ApiError(
            503,
            ErrorCode.ROUTE_UNAVAILABLE,
            f"no requested route could answer ({reasons})",
            degraded_routes=[{"route": d.route, "reason": d.reason} for d in run.degraded],
        )

    async def _fused_results(
        self, run: _Run, method: str, filters: Filters, query: str, k: int, vector_cap: int, deadline: float
    ) -> list[RecallHit]:
        """Fuse and rehydrate; while filters the index cannot apply (kinds, attributes) or
        rehydration dropped vector candidates, search deeper rather than answer short (a false
        "fewer than k")."""
        results = await self._rehydrate(run, self._fuse(run, method), filters, query, k)
        cap = vector_cap
        rounds = self._config.recall.overfetch_rounds
        out_of_time = False
        for _ in range(rounds):
            if len(results) >= k or not run.may_have_more("vector"):
                break
            # the sooner of the request's deadline and the route's own limit (set by its first call)
            if out_of_time := anyio.current_time() >= min(deadline, run.limits.get("vector", deadline)):
                break
            cap *= 4
            with anyio.move_on_at(deadline):
                await self._bounded(run, "vector", filters, query, cap, deadline)
            if run.asked["vector"] != cap:  # cut off by time (or failed, and named already)
                out_of_time = True
                break
            results = await self._rehydrate(run, self._fuse(run, method), filters, query, k)
        if len(results) < k and run.may_have_more("vector"):
            # Deeper records might have passed: a short answer must not pass for "fewer than k
            # records match" (pgvector#259: filtered searches silently answering short).
            run.down("vector", *self._shortfall(run, filters, k, rounds, out_of_time=out_of_time))
        return results

    @staticmethod
    def _shortfall(run: _Run, filters: Filters, k: int, rounds: int, *, out_of_time: bool) -> tuple[str, str]:
        """Why the vector route left the answer short of k while it had more to give: reason, message."""
        searched = f"fewer than {k} results after the vector route's search for {run.asked['vector']} records"
        if out_of_time:
            return DegradedReason.DEADLINE_EXCEEDED, f"{searched}: no time to search deeper"
        if filters.beyond_namespace and run.within is None:  # the index walk, filtered afterwards
            dropped = "the filters or rehydration dropped the rest"
            advice = "raise [recall] exact_filter_max_records or overfetch_rounds, or narrow the filters"
        else:
            dropped = "rehydration dropped the rest (changed or forgotten since they were indexed)"
            advice = "raise [recall] overfetch_rounds"
        return DegradedReason.OVERFETCH_EXHAUSTED, f"{searched} (over-fetch rounds: {rounds}): {dropped}; {advice}"

    def _fusion_info(self, method: str, routes: list[Route], run: _Run) -> FusionInfo:
        """What the order depended on, as the answer and the search row name it."""
        config = self._config.recall
        name, version = (WEIGHTED_NAME, WEIGHTED_VERSION) if method == WEIGHTED_NAME else (RRF_NAME, RRF_VERSION)
        return FusionInfo(
            name=name,
            version=version,
            weights={r: config.weights.get(r, 1.0) for r in routes},
            k=config.rrf_k if name == RRF_NAME else None,
            evidence=_by_name(config.fts_evidence_weights) if "fts" in routes else {},
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
        degraded: list[DegradedRoute],
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


def vector_search(embedder: Embedder, index: IndexManager, query_vectors: QueryVectorCache) -> VectorSearch:
    """The vector route: embed the query (purpose `query`; a repeated query's vector comes from
    `query_vectors`), then search the leased handle (only the records `within`, when given)."""

    async def route(
        filters: Filters, query: str, cap: int, deadline: float, within: list[uuid.UUID] | None
    ) -> VectorAnswer:
        problem = index.problem()
        if problem is not None:
            raise RouteDown(*problem)
        started = time.perf_counter()
        text = embedder.render_query(query).text
        space = embedder.space
        vector = query_vectors.get(space, text) if space is not None else None
        if vector is None:
            try:
                result = await embedder.embed([text], purpose="query", namespace=filters.namespace, deadline=deadline)
            except EmbeddingError as exc:
                raise RouteDown(exc.reason.value, exc.message) from None
            vector = result.vectors[0]
            query_vectors.put(result.space, text, vector)
        embed_ms = (time.perf_counter() - started) * 1000
        try:
            hits, generation = await index.search(vector, namespace=filters.namespace, k_records=cap, within=within)
        except IndexUnavailable as exc:
            raise RouteDown(exc.reason, exc.message) from None
        candidates = [Candidate(h.record_id, h.revision, h.score, h.surrogate) for h in hits]
        return VectorAnswer(candidates, embed_ms, generation)

    return route
