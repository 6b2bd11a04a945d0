"""Canonical assignments and the resolver, wired: the stores, the two tickers, their metrics and
readiness (SPEC §7). `daemon.assembly` adds what this builds to the supervision tree and hands
it to the routes (`daemon.control.assignments`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import asyncpg
import httpx

from actors.assignment_ticker import AssignmentTicker, TickerSettings
from actors.canonical.verdict import ResolverReason
from actors.kernel.ports import UsageSink
from actors.kernel.supervisor import ChildSpec
from actors.resolver import Resolver, ResolverSettings
from daemon.canonical_metrics import CanonicalMetrics
from daemon.config import Config
from daemon.control.health import Check, CheckFn
from daemon.metrics import Metrics
from daemon.providers.llm import OpenAIChat
from daemon.store.assignments import AssignmentStore, PgTickLocks
from daemon.store.disputes import DisputeStore


@dataclass
class Canonical:
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

    def readiness(self) -> CheckFn:
        """Optional: an open circuit warns (disputes wait), the resolver switched off passes."""

        async def check() -> Check:
            state = self.resolver_state()
            detail: dict[str, object] = {"state": state}
            if self.resolver is not None and self.resolver.last_error:
                detail["last_error"] = self.resolver.last_error
            if state == "circuit_open":
                return Check(status="warn", reason=ResolverReason.LLM_CIRCUIT_OPEN, detail=detail)
            return Check(status="pass", detail=detail)

        return check


def build(
    config: Config,
    *,
    pool: asyncpg.Pool,
    http: httpx.AsyncClient,
    usage: UsageSink,
    metrics: Metrics,
    prices: Mapping[str, float],
) -> Canonical:
    observer = CanonicalMetrics(metrics)
    locks = PgTickLocks(pool)
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
    return Canonical(assignments, disputes, ticker, resolver)
