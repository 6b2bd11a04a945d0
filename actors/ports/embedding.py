"""The embedding provider as actors see it: the protocol every provider adapter implements
(`recalld.providers`), and the vector space its vectors live in."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, Protocol, Self, runtime_checkable

import msgspec
import numpy as np
import numpy.typing as npt


@dataclass(frozen=True, slots=True)
class ProviderInfo:
    """What a provider says about itself; fixed for the provider's lifetime."""

    provider: str
    """`local`, `ollama`, `openai`."""
    model: str
    max_input_tokens: int | None = None
    """Longer inputs are truncated by the provider; None when the provider does not say."""
    max_concurrency: int = 1
    """Provider calls the embedder may have in flight at once (1 for an in-process model,
    whose calls compete for the same cores)."""


@dataclass(frozen=True, slots=True)
class ProviderBatch:
    """A provider's answer to one call, before validation."""

    vectors: npt.NDArray[np.float32] | Sequence[Sequence[float]]
    """(n, d) in input order. Raw from the wire: the embedder validates it."""
    input_tokens: int | None
    """Tokens the provider reports for the whole call; None when it reports none."""
    token_counts: Sequence[int] | None = None
    """Exact tokens per input, when the provider knows them (the local model does)."""


@runtime_checkable
class EmbeddingProvider(Protocol):
    """One embedding model behind one small interface, like an httpx transport.

    Enter it (`async with`) before the first `embed`; leaving it or `aclose()` releases what it
    holds (the local model's session; nothing for HTTP providers, whose client the daemon owns).
    A provider may be entered again after it was left (the supervisor restarts the embedder).
    Failures raise `recalld.actors.embedding.EmbeddingError` with a provider reason code.
    """

    def describe(self) -> ProviderInfo: ...

    # The timeout is the remaining budget handed down to the socket, not a scope the caller
    # could wrap around the call: an HTTP provider passes it to httpx as the request timeout.
    async def embed(self, texts: Sequence[str], *, timeout: float) -> ProviderBatch:  # noqa: ASYNC109
        """Embed `texts` (already rendered by a template) within `timeout` seconds.

        `provider_timeout` when the time runs out; the call never outlives `timeout` by more
        than the time it takes to notice.
        """
        ...

    async def aclose(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class TokenCounter(Protocol):
    """Counts model tokens for inputs (used when a provider reports no usage)."""

    def count_tokens(self, texts: Sequence[str]) -> list[int]: ...


class VectorSpace(msgspec.Struct, frozen=True, kw_only=True):
    """The identity of a vector space: two spaces never share an index or a delta.

    `key` is a stable string (same fields → same key, across processes and versions of this
    code) for keying generations, directories and rows.
    """

    provider: str
    model: str
    dimension: int
    metric: Literal["ip"] = "ip"
    normalized: bool
    template_version: int
    builder_version: int = 1

    @property
    def key(self) -> str:
        # Canonical: sorted field names, compact JSON; the hash keeps it path-safe and short.
        canonical = msgspec.json.encode(msgspec.to_builtins(self), order="sorted")
        return f"vs1-{hashlib.sha256(canonical).hexdigest()[:24]}"

    def describe(self) -> str:
        """For people: `local/all-MiniLM-L6-v2-onnx-int8 384d ip norm t1 b1`."""
        norm = "norm" if self.normalized else "raw"
        return (
            f"{self.provider}/{self.model} {self.dimension}d {self.metric} {norm} "
            f"t{self.template_version} b{self.builder_version}"
        )
