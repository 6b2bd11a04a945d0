"""The embedding path in parts. Pure (no I/O): reason codes, validation, breaker, rate limit,
templates, pricing, token arithmetic (`metering`). The embedder actor's pieces, which call the
provider or the usage sink: `dispatch` (micro-batches and provider calls), `probe` (the start-up
probe), `meter` (counters and usage rows). The actor (`recalld.actors.embedding.embedder`) puts them together."""

from __future__ import annotations

from recalld.actors.embedding.errors import EmbeddingError, Reason

__all__ = ["EmbeddingError", "Reason"]
