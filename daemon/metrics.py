"""Prometheus metrics, one registry per daemon, fed from the real code paths."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

CONTENT_TYPE = CONTENT_TYPE_LATEST
# Recall answers are expected in milliseconds; the upper buckets catch slow fallbacks.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.http_requests = Counter(
            "recalld_http_requests", "Control-socket requests answered", ["route", "status"], registry=r
        )
        self.records_written = Counter(
            "recalld_records_written", "Record writes that changed the store", ["operation"], registry=r
        )
        self.write_rejections = Counter(
            "recalld_record_rejections", "Record writes refused, by error code", ["code"], registry=r
        )
        self.recalls = Counter("recalld_recalls", "Recall requests answered", registry=r)
        self.recall_latency = Histogram(
            "recalld_recall_seconds", "End-to-end recall latency", buckets=LATENCY_BUCKETS, registry=r
        )
        self.route_latency = Histogram(
            "recalld_recall_route_seconds",
            "Latency of one recall route",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.degraded = Counter(
            "recalld_recall_degraded",
            "Recall routes that could not answer, by reason",
            ["route", "reason"],
            registry=r,
        )
        self.actor_restarts = Counter("recalld_actor_restarts", "Supervised actor restarts", ["actor"], registry=r)
        self.actor_up = Gauge("recalld_actor_up", "1 while the actor is running", ["actor"], registry=r)
        self.handle_swaps = Counter(
            "recalld_index_handle_swaps", "Copy-on-write handle swaps, by cause", ["why"], registry=r
        )
        self.sweeper_deletions = Counter(
            "recalld_sweeper_deletions", "What the GC sweeper removed", ["what"], registry=r
        )
        self.store_up = Gauge("recalld_store_up", "1 when PostgreSQL answered the last check", registry=r)
        self.ready = Gauge("recalld_ready", "1 when /readyz passes or warns", registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
