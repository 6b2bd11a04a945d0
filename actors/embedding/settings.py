"""The embedder's settings and the reports it gives about itself (readiness, metrics).

Plain data, so that the daemon can build settings from its config and encode the reports into
/readyz and /metrics without knowing the actor's insides.

`EmbedderSettings` is the one place its defaults are written: `[embedding]` of
`daemon/config.py` takes its defaults from an `EmbedderSettings()` and the daemon builds the
settings with `from_config` (`actors` cannot import `daemon`, hence this direction;
tests/test_settings_from_config.py holds the two to agreeing).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol

import msgspec

from recalld.actors.embedding.validation import NORM_TOLERANCE
from recalld.actors.ports.embedding import VectorSpace


class EmbeddingSettingsSource(Protocol):
    """The fields of `recalld.config.EmbeddingConfig` the embedder reads (no import of daemon)."""

    @property
    def timeout_s(self) -> float: ...
    @property
    def max_batch(self) -> int: ...
    @property
    def max_wait_ms(self) -> float: ...
    @property
    def bulk_call_ms(self) -> float: ...
    @property
    def rate_per_s(self) -> float: ...
    @property
    def breaker_failures(self) -> int: ...
    @property
    def breaker_reset_s(self) -> float: ...
    @property
    def template_version(self) -> int: ...
    @property
    def prices(self) -> Mapping[str, float]: ...


@dataclass(frozen=True, slots=True)
class EmbedderSettings:
    timeout_s: float = 30.0
    """Longest a provider call may take; callers' deadlines can only shorten it."""
    max_batch: int = 32
    """Most texts in one provider call; a caller's longer list is split."""
    max_wait_s: float = 0.005
    """How long the first request of a batch waits for others to join it."""
    bulk_call_s: float = 0.5
    """What one provider call for bulk work (indexing) may cost: its texts are as many as the
    provider took this long for lately (at most max_batch). A query waits behind at most one
    call in flight, so this bounds what indexing adds to a query's time, well under its deadline."""
    bulk_yield_s: float = 1.0
    """Longest an indexing call waits while foreground work is in progress elsewhere in the
    daemon (`Foreground`): it then goes all the same, so that a stream of requests slows
    indexing (to about bulk_call_s / (bulk_call_s + bulk_yield_s) of its speed) but never stops it."""
    yield_quiet_s: float = 0.005
    """How long foreground work must have stopped before an indexing call goes: a client's next
    request comes a moment after its last answer, and a call that slipped in between would hold
    the cores for bulk_call_s (a client's turn took well under a millisecond on the bench). 0: at
    once."""
    rate_per_s: float = 0.0
    breaker_failures: int = 5
    breaker_reset_s: float = 30.0
    template_version: int = 1
    """The input template a deployment starts on. Never `LATEST_VERSION`: a new template is a new
    vector space and re-embeds every record, so an operator chooses it; an upgrade must not."""
    prices: Mapping[str, float] = field(default_factory=dict)
    builder_version: int = 1
    """Goes into the VectorSpace; the index manager's builder owns its meaning."""
    probe_timeout_s: float | None = None
    """None: `timeout_s`."""
    probe_retry_s: float = 1.0
    """First wait before re-probing after a failed probe; doubles up to `breaker_reset_s`."""
    norm_tolerance: float = NORM_TOLERANCE
    usage_buffer: int = 10_000
    """Usage rows waiting for the sink; beyond this they are dropped (and counted)."""
    usage_retry_s: float = 1.0
    """Wait before writing usage rows again after the sink was unavailable (PostgreSQL down)."""
    usage_linger_s: float = 1.0
    """How long usage rows gather before they are written together (`flush_usage` cuts it short):
    an INSERT per query embedding ran beside each recall's vector route and slowed it (2.7 ->
    2.2 ms at one client on the bench data without it)."""

    @classmethod
    def from_config(cls, config: EmbeddingSettingsSource, **overrides: object) -> EmbedderSettings:
        values: dict[str, object] = {
            "timeout_s": config.timeout_s,
            "max_batch": config.max_batch,
            "max_wait_s": config.max_wait_ms / 1000.0,
            "bulk_call_s": config.bulk_call_ms / 1000.0,
            "rate_per_s": config.rate_per_s,
            "breaker_failures": config.breaker_failures,
            "breaker_reset_s": config.breaker_reset_s,
            "template_version": config.template_version,
            "prices": dict(config.prices),
        }
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]


class ProbeResult(msgspec.Struct, frozen=True, kw_only=True):
    """What the last start-up probe found; shown in /readyz."""

    status: Literal["pass", "fail"]
    reason: str | None
    message: str
    provider: str
    model: str
    dimension: int | None
    normalized: bool | None
    max_input_tokens: int | None
    latency_ms: float
    attempts: int
    at: datetime
    space: VectorSpace | None


class EmbedderHealth(msgspec.Struct, frozen=True, kw_only=True):
    """One readiness check: `fail` names why the vector features are unavailable now."""

    status: Literal["pass", "fail"]
    reason: str | None
    message: str
    space: VectorSpace | None
    breaker: str
    probe: ProbeResult | None


class EmbedderStats(msgspec.Struct, frozen=True, kw_only=True):
    """Counters since the actor object was made (they survive restarts of `run`)."""

    provider: str
    model: str
    running: bool
    space: str | None
    calls_total: int
    call_failures_total: int
    failures_by_reason: dict[str, int]
    """Provider faults and refusals (circuit_open, rate_limited, deadline_exceeded, ...)."""
    requests_total: int
    texts_total: int
    input_tokens_total: int
    estimated_tokens_total: int
    provider_seconds_total: float
    batch_size_buckets: dict[str, int]
    """Provider calls by texts per call, non-cumulative, keyed by upper bound ("+Inf" last)."""
    batch_texts_max: int
    queued_requests: int
    in_flight_calls: int
    breaker_state: str
    breaker_opened_total: int
    usage_rows_written: int
    usage_rows_failed: int
    usage_rows_dropped: int
