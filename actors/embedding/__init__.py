"""Pure parts of the embedding path: reason codes, validation, breaker, rate limit, templates,
pricing. No I/O here; the embedder actor (`actors.embedder`) puts them together."""

from __future__ import annotations

from actors.embedding.errors import EmbeddingError, Reason

__all__ = ["EmbeddingError", "Reason"]
