"""Embedding usage: what `GET /v1/usage` answers."""

from __future__ import annotations

import msgspec


class UsageLine(msgspec.Struct, kw_only=True):
    """The calls of one (namespace, purpose, provider)."""

    namespace: str | None
    """None: work of the daemon's own, for no namespace (the start-up probe)."""
    purpose: str
    """`index`, `query`, `dedupe`, `probe`, ..."""
    provider: str
    calls: int
    input_tokens: int
    output_tokens: int
    cost_micros: int
    """Millionths of the configured currency unit (`[embedding] price_per_1k_tokens`)."""
    estimated_calls: int
    """Calls whose tokens were estimated: the provider reported none."""


class UsageTotals(msgspec.Struct, kw_only=True):
    """The sums of `usage`: the clients' work, never the daemon's own."""

    calls: int
    input_tokens: int
    cost_micros: int


class UsageSummary(msgspec.Struct, kw_only=True):
    """`GET /v1/usage`: embedding usage by namespace and purpose, since `?since=` when given."""

    usage: list[UsageLine]
    """What clients' records and queries cost."""
    totals: UsageTotals
    system: list[UsageLine]
    """The daemon's own work (duplicate checks, probes), reported apart and never in `totals`."""
