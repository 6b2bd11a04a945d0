"""Canonical assignments and the resolver, wired: the stores, the two tickers, their metrics and
readiness. `recalld.assembly` adds what this builds to the supervision tree and hands it to the
routes (`recalld.control.routes.assignments`). The rules: docs/DESIGN.md, "Canonical assignments"."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import asyncpg
import httpx

from recalld.actors.assignments.resolver import Resolver, ResolverSettings
from recalld.actors.assignments.ticker import AssignmentTicker, TickerSettings
from recalld.actors.kernel.supervisor import ChildSpec
from recalld.actors.ports.usage import UsageSink
from recalld.config import Config
from recalld.metrics import Metrics
from recalld.providers.llm import OpenAIChat
from recalld.services.assignments_metrics import AssignmentMetrics
from recalld.store.assignments import AssignmentStore
from recalld.store.assignments_disputes import DisputeStore
from recalld.store.roles import PgTickLocks


@dataclass
class AssignmentService:
    assignments: AssignmentStore
    disputes: DisputeStore
    ticker: AssignmentTicker
    resolver: Resolver | None
    """None when `[resolver] enabled = false`: no ticker, disputes wait."""

    def children(self, config: Config) -> list[ChildSpec]:
        found = [ChildSpec("assignments", self.ticker.run, shutdown_timeout=10.0)]
        if self.resolver is not None:
            found.append(ChildSpec("resolver", self.resolver.run, shutdown_timeout=config.resolver.timeout_s + 2))
        return found

    def resolver_state(self) -> str:
        """`off`, `ok` or `circuit_open` (/readyz, capabilities)."""
        return "off" if self.resolver is None else self.resolver.state()


def build(
    config: Config,
    *,
    pool: asyncpg.Pool,
    http: httpx.AsyncClient,
    usage: UsageSink,
    metrics: Metrics,
    prices: Mapping[str, float],
    locks: PgTickLocks,
) -> AssignmentService:
    observer = AssignmentMetrics(metrics)
    assignments = AssignmentStore(pool)
    disputes = DisputeStore(pool)
    ticker = AssignmentTicker(assignments, locks, TickerSettings(interval_s=config.assignments.interval_s), observer)
    resolver = None
    settings = config.resolver
    if settings.enabled:
        model = OpenAIChat(
            http, url=settings.url, model=settings.model, api_key=settings.api_key, timeout_s=settings.timeout_s
        )
        resolver = Resolver(
            disputes,
            model,
            locks,
            usage,
            ResolverSettings(
                interval_s=settings.interval_s,
                max_attempts=settings.max_attempts,
                batch=settings.batch,
                breaker_failures=settings.breaker_failures,
                breaker_reset_s=settings.breaker_reset_s,
                prices=prices,
            ),
            observer,
        )
    return AssignmentService(assignments, disputes, ticker, resolver)
