"""Prometheus metrics, one registry per daemon, fed from the real code paths."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

if TYPE_CHECKING:
    from recalld.actors.embedding.embedder import Embedder, EmbedderStats
    from recalld.actors.embedding.query_cache import QueryVectorCache
    from recalld.actors.index.manager import IndexManager
    from recalld.store.search import SearchRecorder

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
        self.recall_stages = Histogram(
            "recalld_recall_stage_seconds",
            "Time one answered recall spent in a stage, as its timings_ms reports it (a route's time summed "
            "over its rounds); a stage the recall never entered is not observed, nor is a 503 "
            "(stage: embed, vector, fts, structured, rehydrate, fusion, total)",
            ["stage"],
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
        self.embedded_postgres_restarts = Counter(
            "recalld_embedded_postgres_restarts",
            "Times the embedded PostgreSQL was found stopped and started again",
            registry=r,
        )
        self.duplicate_checks = Counter(
            "recalld_duplicate_checks",
            "Semantic duplicate checks, by status (clear, warned, skipped) and skip reason",
            ["status", "reason"],
            registry=r,
        )
        self.duplicate_check_seconds = Histogram(
            "recalld_duplicate_check_seconds",
            "Time one semantic duplicate check took, skipped ones included",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.duplicate_check_stages = Histogram(
            "recalld_duplicate_check_stage_seconds",
            "Time a semantic duplicate check (of one title, or of a batch's titles in one namespace) spent "
            "in a stage (stage: titles, vectors, embed, store, compare, similar)",
            ["stage"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.store_up = Gauge("recalld_store_up", "1 when PostgreSQL answered the last check", registry=r)
        self.ready = Gauge("recalld_ready", "1 when /readyz passes or warns", registry=r)

    def watch(
        self,
        embedder: Embedder | None,
        index: IndexManager | None,
        query_vectors: QueryVectorCache | None = None,
        searches: SearchRecorder | None = None,
        title_embedder: Embedder | None = None,
    ) -> None:
        self.registry.register(ActorCollector(embedder, index, query_vectors, searches, title_embedder))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class ActorCollector:
    """Reads the actors' own counters at scrape time, so /metrics shows what they counted on the
    real code paths without the actors knowing about Prometheus."""

    def __init__(
        self,
        embedder: Embedder | None,
        index: IndexManager | None,
        query_vectors: QueryVectorCache | None = None,
        searches: SearchRecorder | None = None,
        title_embedder: Embedder | None = None,
    ) -> None:
        """`title_embedder`: the duplicate check's own title model's embedder, when it has one;
        its calls and texts are series of their own (labelled by model) beside the recall
        embedder's, its failures, circuit and queue families of their own
        (`recalld_title_embedder_*`)."""
        self._embedder = embedder
        self._title_embedder = title_embedder
        self._index = index
        self._query_vectors = query_vectors
        self._searches = searches

    def collect(self) -> Iterator[Metric]:
        if self._searches is not None:
            searches = self._searches
            yield _row_outcomes(
                "recalld_search_rows", "Search telemetry rows", searches.written, searches.failed, searches.dropped
            )
        if self._query_vectors is not None:
            yield _by_label(
                "recalld_query_vector_cache_lookups",
                "Query vectors looked up in the cache",
                "result",
                {"hit": self._query_vectors.hits, "miss": self._query_vectors.misses},
            )
        recall = self._embedder.stats() if self._embedder is not None else None
        title = self._title_embedder.stats() if self._title_embedder is not None else None
        every = [each for each in (recall, title) if each is not None]
        for name, help_text, counted in (
            ("recalld_embedder_calls", "Provider calls", "calls_total"),
            ("recalld_embedder_call_failures", "Failed provider calls", "call_failures_total"),
            ("recalld_embedder_input_tokens", "Input tokens metered", "input_tokens_total"),
            ("recalld_embedder_texts", "Texts embedded", "texts_total"),
        ):
            if every:
                family = CounterMetricFamily(name, help_text, labels=["provider", "model"])
                for each in every:
                    family.add_metric([each.provider, each.model], getattr(each, counted))
                yield family
        if recall is not None:
            yield from _embedder_health("recalld_embedder", "Embedding", recall)
            yield _row_outcomes(
                "recalld_usage_rows",
                "Usage rows",
                recall.usage_rows_written,
                recall.usage_rows_failed,
                recall.usage_rows_dropped,
            )
        if title is not None:
            yield from _embedder_health("recalld_title_embedder", "Title embedding (the duplicate check's)", title)
        if self._index is not None:
            builds = CounterMetricFamily(
                "recalld_generation_builds", "Generation builds by outcome (recent ones)", labels=["state"]
            )
            by_state: dict[str, int] = {}
            for build in self._index.builds():
                by_state[build.state] = by_state.get(build.state, 0) + 1
            for state_name, count in by_state.items():
                builds.add_metric([state_name], count)
            yield builds
            pending = GaugeMetricFamily("recalld_index_pending_records", "Live records not yet searchable by vector")
            pending.add_metric([], self._index.pending)
            yield pending
            held = GaugeMetricFamily(
                "recalld_index_held_records",
                "Records set aside because the provider will not embed their input (in pending too)",
                labels=["reason"],
            )
            for reason, count in self._index.held.items():
                held.add_metric([reason], count)
            yield held
            yield _counter(
                "recalld_index_full_passes",
                "Index steps that read every live record; once all are indexed, steps read only changed ones",
                [],
                [],
                self._index.full_passes,
            )
            leases = GaugeMetricFamily("recalld_index_open_leases", "Searches holding a handle now")
            leases.add_metric([], self._index.cell.open_leases)
            yield leases


def _row_outcomes(name: str, rows: str, written: int, failed: int, dropped: int) -> CounterMetricFamily:
    """What became of the rows a write-behind batcher (`recalld.actors.kernel.batching`) was handed."""
    return _by_label(
        name,
        f"{rows}: written, failed (refused by the store) or dropped (store down too long)",
        "outcome",
        {"written": written, "failed": failed, "dropped": dropped},
    )


def _by_label(name: str, help_text: str, label: str, counts: dict[str, int]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, help_text, labels=[label])
    for value, count in counts.items():
        family.add_metric([value], count)
    return family


def _counter(name: str, help_text: str, labels: list[str], values: list[str], value: float) -> CounterMetricFamily:
    family = CounterMetricFamily(name, help_text, labels=labels)
    family.add_metric(values, value)
    return family


def _embedder_health(prefix: str, what: str, stats: EmbedderStats) -> Iterator[Metric]:
    """One embedder's failures by reason, circuit breaker and queue, as families named `prefix_*`
    (the recall embedder's carry no model label, so each embedder has families of its own)."""
    yield _by_label(f"{prefix}_failures", f"{what} failures and refusals by reason", "reason", stats.failures_by_reason)
    state = GaugeMetricFamily(f"{prefix}_circuit_state", "1 for the circuit breaker's current state", labels=["state"])
    for name in ("closed", "open", "half_open"):
        state.add_metric([name], 1.0 if stats.breaker_state == name else 0.0)
    yield state
    yield _counter(f"{prefix}_circuit_opened", "Times the circuit opened", [], [], stats.breaker_opened_total)
    queued = GaugeMetricFamily(f"{prefix}_queued_requests", "Requests waiting for a batch")
    queued.add_metric([], stats.queued_requests)
    yield queued


class Laps:
    """The time between one mark and the next, observed as the stage the second one names: one
    line at the end of each stage of a path, instead of a block around it."""

    def __init__(self, stages: Histogram) -> None:
        self._stages = stages
        self._last = time.perf_counter()

    def __call__(self, stage: str) -> None:
        now = time.perf_counter()
        self._stages.labels(stage=stage).observe(now - self._last)
        self._last = now
