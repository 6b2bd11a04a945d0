"""Hybrid recall: run the requested routes concurrently under one deadline, fuse, rehydrate.

A route that cannot answer (not available, failed, past its deadline) is reported in
`degraded_routes` with a reason code while the others still answer; a request that asked
only for routes that are down gets a 503 naming them.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum

import anyio
import asyncpg

from actors.fusion import RRF_NAME, RRF_VERSION, reciprocal_rank
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
from daemon.store import search
from daemon.store.db import STORE_DOWN_ERRORS
from daemon.store.search import Candidate, Filters

log = logging.getLogger("recalld.recall")

DEFAULT_ROUTES: tuple[Route, ...] = ("fts", "vector")


class DegradedReason(StrEnum):
    VECTOR_UNAVAILABLE = "vector_route_unavailable"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    ROUTE_FAILED = "route_failed"
    STORE_UNAVAILABLE = "store_unavailable"


class RouteDown(Exception):
    """A route cannot answer now; `reason` is a stable code."""

    def __init__(self, reason: str, message: str = "") -> None:
        super().__init__(message or reason)
        self.reason = reason
        self.message = message


# A vector route: (namespace filters, query, candidate cap) -> candidates, or RouteDown.
VectorSearch = Callable[[Filters, str, int], Awaitable[list[Candidate]]]


@dataclass
class _Run:
    timings: dict[str, float] = field(default_factory=dict)
    degraded: list[DegradedRoute] = field(default_factory=list)
    rankings: dict[str, list[uuid.UUID]] = field(default_factory=dict)


class RecallService:
    def __init__(
        self, pool: asyncpg.Pool, config: Config, metrics: Metrics, vector: VectorSearch | None = None
    ) -> None:
        self._pool = pool
        self._config = config
        self._metrics = metrics
        self._vector = vector

    async def _route(self, run: _Run, route: Route, filters: Filters, query: str) -> None:
        cap = self._config.recall.fts_candidates
        started = time.perf_counter()
        try:
            if route == "fts":
                async with self._pool.acquire() as conn:
                    found = await search.full_text(conn, filters, query, cap)
            elif route == "structured":
                async with self._pool.acquire() as conn:
                    found = await search.structured(conn, filters, cap)
            else:
                if self._vector is None:
                    raise RouteDown(DegradedReason.VECTOR_UNAVAILABLE, "no vector index is configured yet")
                found = await self._vector(filters, query, cap)
        except RouteDown as exc:
            run.degraded.append(DegradedRoute(route=route, reason=exc.reason, message=exc.message))
            return
        except STORE_DOWN_ERRORS as exc:
            run.degraded.append(
                DegradedRoute(
                    route=route, reason=DegradedReason.STORE_UNAVAILABLE, message=type(exc).__name__
                )
            )
            return
        finally:
            elapsed = (time.perf_counter() - started) * 1000
            run.timings[route] = elapsed
            self._metrics.route_latency.labels(route=route).observe(elapsed / 1000)
        # a route's list is de-duplicated by record before fusion (chunks of one record count once)
        seen: set[uuid.UUID] = set()
        run.rankings[route] = [c.id for c in found if not (c.id in seen or seen.add(c.id))]

    async def recall(self, request: RecallRequest) -> RecallResponse:
        started = time.perf_counter()
        config = self._config.recall
        routes: list[Route] = list(dict.fromkeys(request.routes or DEFAULT_ROUTES))
        k = request.k or config.default_k
        deadline_s = (request.deadline_ms or config.default_deadline_ms) / 1000
        filters = Filters(request.namespace, request.kinds, request.attributes)
        run = _Run()

        with anyio.move_on_after(deadline_s):
            async with anyio.create_task_group() as tg:
                for route in routes:
                    tg.start_soon(self._route, run, route, filters, request.query)
        for route in routes:
            if route not in run.rankings and all(d.route != route for d in run.degraded):
                run.degraded.append(
                    DegradedRoute(
                        route=route,
                        reason=DegradedReason.DEADLINE_EXCEEDED,
                        message=f"no answer within {deadline_s * 1000:.0f} ms",
                    )
                )
        for degraded in run.degraded:
            self._metrics.degraded.labels(route=degraded.route, reason=degraded.reason).inc()
        if not run.rankings:
            reasons = ", ".join(f"{d.route}: {d.reason}" for d in run.degraded)
            raise ApiError(
                503,
                ErrorCode.ROUTE_UNAVAILABLE,
                f"no requested route could answer ({reasons})",
                degraded_routes=[{"route": d.route, "reason": d.reason} for d in run.degraded],
            )

        t_fusion = time.perf_counter()
        fused = reciprocal_rank(run.rankings, k=config.rrf_k)
        run.timings["fusion"] = (time.perf_counter() - t_fusion) * 1000

        t_rehydrate = time.perf_counter()
        # over-read a little so that records dropped by rehydration do not leave the answer short
        wanted = [f.key for f in fused[: k * 2]]
        async with self._pool.acquire() as conn:
            rows = await search.rehydrate(conn, filters, wanted, request.query, config.snippet_words)
            if len(rows) < min(k, len(fused)) and len(wanted) < len(fused):
                rows = await search.rehydrate(
                    conn, filters, [f.key for f in fused], request.query, config.snippet_words
                )
        run.timings["rehydrate"] = (time.perf_counter() - t_rehydrate) * 1000

        results: list[RecallHit] = []
        for entry in fused:
            row = rows.get(entry.key)
            if row is None:
                continue
            results.append(
                RecallHit(
                    id=row["id"],
                    title=row["title"],
                    kind=row["kind"],
                    source_path=row["source_path"],
                    score=round(entry.score, 6),
                    routes=entry.ranks,
                    revision=row["revision"],
                    snippet=row["snippet"] or None,
                )
            )
            if len(results) == k:
                break

        run.timings["total"] = (time.perf_counter() - started) * 1000
        timings = {
            stage: round(run.timings.get(stage, 0.0), 3)
            for stage in ("embed", "vector", "fts", "structured", "rehydrate", "fusion", "total")
        }
        fusion = FusionInfo(
            name=RRF_NAME, version=RRF_VERSION, weights={r: 1.0 for r in routes}, k=config.rrf_k
        )
        search_id = uuid.uuid4()
        await self._record(search_id, request, routes, fusion, results, timings, run.degraded)
        self._metrics.recalls.inc()
        self._metrics.recall_latency.observe(timings["total"] / 1000)
        return RecallResponse(
            results=results,
            degraded_routes=run.degraded,
            fusion=fusion,
            generation=None,
            timings_ms=timings,
            search_id=search_id,
        )

    async def _record(
        self,
        search_id: uuid.UUID,
        request: RecallRequest,
        routes: list[Route],
        fusion: FusionInfo,
        results: list[RecallHit],
        timings: dict[str, float],
        degraded: list[DegradedRoute],
    ) -> None:
        async with self._pool.acquire() as conn:
            await search.record_search(
                conn,
                {
                    "id": search_id,
                    "namespace": request.namespace,
                    "query_hash": query_hash(request.namespace, request.query),
                    "routes": list(routes),
                    "fusion": {
                        "name": fusion.name,
                        "version": fusion.version,
                        "weights": fusion.weights,
                        "k": fusion.k,
                    },
                    "results": [
                        {"id": str(r.id), "rank": i, "routes": r.routes} for i, r in enumerate(results, 1)
                    ],
                    "timings_ms": timings,
                    "degraded_routes": [{"route": d.route, "reason": d.reason} for d in degraded],
                },
            )
