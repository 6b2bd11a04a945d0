"""What the embedder counts, and the usage rows each provider call produces.

The arithmetic (apportioning a reported total, estimating a missing one) is pure and lives in
`recalld.actors.embedding.metering`; this module applies it to calls and hands the rows to a write-behind
writer.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from recalld.actors.embedding.errors import EmbeddingError, Reason
from recalld.actors.embedding.metering import apportion, estimate_tokens
from recalld.actors.embedding.pricing import price
from recalld.actors.embedding.settings import EmbedderSettings
from recalld.actors.kernel.batching import WriteBehind
from recalld.actors.ports.embedding import ProviderBatch, ProviderInfo, TokenCounter
from recalld.actors.ports.usage import Purpose, SinkUnavailable, UsageRow, UsageSink

log = logging.getLogger("recalld.embedder")

# Upper bounds (texts per provider call) of the batch-size histogram in `stats()`.
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)


@dataclass(slots=True)
class Counters:
    """The embedder's running totals, as `Embedder.stats()` reports them."""

    calls: int = 0
    call_failures: int = 0
    by_reason: dict[str, int] = field(default_factory=dict)
    requests: int = 0
    texts: int = 0
    tokens: int = 0
    estimated_tokens: int = 0
    provider_seconds: float = 0.0
    buckets: dict[str, int] = field(default_factory=lambda: {**{str(b): 0 for b in BATCH_BUCKETS}, "+Inf": 0})
    batch_max: int = 0

    def failure(self, reason: Reason) -> None:
        self.by_reason[reason.value] = self.by_reason.get(reason.value, 0) + 1

    def batch(self, size: int) -> None:
        label = next((str(b) for b in BATCH_BUCKETS if size <= b), "+Inf")
        self.buckets[label] += 1
        self.batch_max = max(self.batch_max, size)


class MeteredPart(Protocol):
    """One caller's share of a provider call, as metering sees it."""

    @property
    def texts(self) -> Sequence[str]: ...
    @property
    def purpose(self) -> Purpose: ...
    @property
    def namespace(self) -> str | None: ...


class Meter:
    """Counters and usage rows of one embedder.

    Guarantees: one usage row per (purpose, namespace) per provider call, and one per probe; token
    counts are the provider's when it reports them per text, apportioned (and flagged estimated)
    when it reports only a total shared by several groups, and counted or estimated (flagged) when
    it reports nothing. Rows go through a write-behind writer (`usage`, run by the embedder), so a
    slow or failing sink never slows or fails embedding.
    """

    def __init__(
        self,
        info: ProviderInfo,
        settings: EmbedderSettings,
        usage: UsageSink,
        token_counter: TokenCounter | None,
    ) -> None:
        self._info = info
        self._prices = settings.prices
        self._token_counter = token_counter
        self.counters = Counters()
        self.usage = WriteBehind[UsageRow](
            usage.record,
            name="usage rows",
            linger_s=settings.usage_linger_s,
            max_pending=settings.usage_buffer,
            retry_on=(SinkUnavailable,),
            retry_s=settings.usage_retry_s,
        )

    def refuse(self, error: EmbeddingError) -> EmbeddingError:
        """Count a failure a caller gets without a provider call for it; returns `error`."""
        self.counters.failure(error.reason)
        return error

    def call(self, parts: Sequence[MeteredPart], order: list[int], result: ProviderBatch, texts: list[str]) -> None:
        """One usage row per (purpose, namespace) in this call.

        `texts` are the parts' texts in the parts' order; `order[i]` is the index in `texts` of
        the i-th text sent (the provider's per-text counts come in sent order). Exact per-text
        counts from the provider are used as they are. A batch total is exact for a call of one
        group and apportioned (flagged estimated) across several; with nothing reported, tokens
        are counted with the tokenizer or estimated, and flagged.
        """
        counts: list[int]
        estimated: bool
        if result.token_counts is not None and len(result.token_counts) == len(texts):
            counts = [0] * len(texts)
            for position, index in enumerate(order):
                counts[index] = int(result.token_counts[position])
            estimated = False
        else:
            counts = self.count_tokens(texts)
            estimated = True
        groups: dict[tuple[Purpose, str | None], int] = {}
        start = 0
        for part in parts:
            key = (part.purpose, part.namespace)
            groups[key] = groups.get(key, 0) + sum(counts[start : start + len(part.texts)])
            start += len(part.texts)
        if result.token_counts is None and result.input_tokens is not None:
            groups = apportion(result.input_tokens, groups)
            estimated = len(groups) > 1
        at = datetime.now(UTC)
        for (purpose, namespace), tokens in groups.items():
            self._emit(purpose, namespace, tokens, estimated, at)

    def probe(self, result: ProviderBatch, text: str) -> None:
        """The usage row of a start-up probe that embedded `text`."""
        if result.token_counts is not None:
            tokens, estimated = sum(int(n) for n in result.token_counts), False
        elif result.input_tokens is not None:
            tokens, estimated = result.input_tokens, False
        else:
            tokens, estimated = sum(self.count_tokens([text])), True
        self._emit("probe", None, tokens, estimated, datetime.now(UTC))

    def count_tokens(self, texts: list[str]) -> list[int]:
        if self._token_counter is not None:
            try:
                return self._token_counter.count_tokens(texts)
            except Exception:
                log.exception("token counter failed; estimating from length")
        return estimate_tokens(texts)

    def _emit(self, purpose: Purpose, namespace: str | None, tokens: int, estimated: bool, at: datetime) -> None:
        priced = price(self._info.model, tokens, self._prices)
        row = UsageRow(
            purpose=purpose,
            namespace=namespace,
            provider=self._info.provider,
            model=priced.model,
            input_tokens=tokens,
            estimated=estimated,
            cost_micros=priced.cost_micros,
            at=at,
        )
        self.counters.tokens += tokens
        if estimated:
            self.counters.estimated_tokens += tokens
        self.usage.add(row)
