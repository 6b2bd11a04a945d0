"""What each provider call is for and where its usage is recorded: the port the embedder and the
resolver report usage through (`recalld.store.usage` implements it)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal, Protocol

import msgspec

Purpose = Literal["index", "query", "dedupe", "eval", "probe", "resolve"]
"""Why a provider call was made. `probe` is the embedder's own start-up/re-probe call;
`resolve` is the dispute resolver's LLM call."""


SYSTEM_PURPOSES: frozenset[str] = frozenset({"dedupe", "eval", "probe"})
"""Purposes that are the daemon's own work: never counted in per-client usage totals, even when
made for a namespace (a duplicate check's embedding is the daemon's safeguard, not a client's
request); reported apart as system usage."""


class UsageRow(msgspec.Struct, frozen=True, kw_only=True):
    """One metered provider call for one (purpose, namespace)."""

    purpose: Purpose
    namespace: str | None
    """None for system work (the probe)."""
    provider: str
    model: str | None
    """None when the model is not in the price catalogue (and then cost_micros is 0)."""
    input_tokens: int
    estimated: bool
    """True when the tokens were counted or estimated here rather than reported by the provider
    (or apportioned from a batch total shared by several namespaces/purposes)."""
    cost_micros: int
    at: datetime
    """UTC wall-clock time of the provider call's end."""
    output_tokens: int = 0

    @property
    def is_system(self) -> bool:
        return self.purpose in SYSTEM_PURPOSES or self.namespace is None


class SinkUnavailable(Exception):
    """The sink cannot store rows now (its database is down); the same rows may be retried."""


class UsageSink(Protocol):
    """Where usage rows go (PostgreSQL in the daemon, a list in tests)."""

    async def record(self, rows: Sequence[UsageRow]) -> None:
        """Store the rows, all or none. Raises `SinkUnavailable` when trying again later may
        succeed; any other exception means these rows will never be stored."""
        ...
