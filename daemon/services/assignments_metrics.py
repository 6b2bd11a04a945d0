"""Prometheus metrics of canonical assignments and the resolver (disputes by state and
tier: docs/OPERATIONS.md), fed by the tickers through `recalld.actors.ports.assignments.Observer`."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

from recalld.actors.ports.assignments import AssignReport
from recalld.metrics import Metrics

# LLM calls take seconds (a local model on CPU: tens of seconds); ticks from milliseconds up.
LLM_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
TICK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class AssignmentMetrics:
    """Implements `Observer`; registers its families in the daemon's registry."""

    def __init__(self, metrics: Metrics) -> None:
        r = metrics.registry
        self._counts: dict[tuple[str, str], int] = {}
        self.ticks = Histogram(
            "recalld_canonical_tick_seconds",
            "Duration of a ticker's tick",
            ["ticker"],
            buckets=TICK_BUCKETS,
            registry=r,
        )
        self.assignments = Counter(
            "recalld_canonical_assigned", "Characteristics the assignment ticker assigned", registry=r
        )
        self.dispute_events = Counter(
            "recalld_disputes_events",
            "What happened to disputes: enqueued, settled (tie gone), and the resolver's outcomes "
            "(resolved, manual_review, superseded, skipped_unchanged, released, stale_answer: an answer that came "
            "after the values changed, recorded and not applied)",
            ["event"],
            registry=r,
        )
        self.llm_calls = Counter("recalld_resolver_llm_calls", "LLM calls by outcome", ["outcome"], registry=r)
        self.llm_seconds = Histogram(
            "recalld_resolver_llm_seconds", "Duration of an LLM call", buckets=LLM_BUCKETS, registry=r
        )
        r.register(_DisputeGauge(self))

    def tick(self, ticker: str, seconds: float) -> None:
        self.ticks.labels(ticker=ticker).observe(seconds)

    def assigned(self, report: AssignReport) -> None:
        self.assignments.inc(report.keys)
        if report.enqueued:
            self.dispute_events.labels(event="enqueued").inc(report.enqueued)
        if report.settled:
            self.dispute_events.labels(event="settled").inc(report.settled)

    def llm_call(self, outcome: str, seconds: float) -> None:
        self.llm_calls.labels(outcome=outcome).inc()
        self.llm_seconds.observe(seconds)

    def finished(self, outcome: str) -> None:
        self.dispute_events.labels(event=outcome).inc()

    def disputes(self, counts: dict[tuple[str, str], int]) -> None:
        self._counts = dict(counts)


class _DisputeGauge:
    def __init__(self, owner: AssignmentMetrics) -> None:
        self._owner = owner

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "recalld_disputes", "Disputes by state and tier (as of the last tick)", labels=["state", "tier"]
        )
        for (state, tier), count in sorted(self._owner._counts.items()):
            family.add_metric([state, tier], count)
        yield family
