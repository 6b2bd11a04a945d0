"""The embedder's metering: usage rows per provider call, as a table."""

from __future__ import annotations

from dataclasses import dataclass

import anyio
import pytest

from recalld.actors.embedding.meter import BATCH_BUCKETS, Counters, Meter
from recalld.actors.embedding.metering import estimate_tokens
from recalld.actors.embedding.settings import EmbedderSettings
from recalld.actors.ports.embedding import ProviderBatch, ProviderInfo
from recalld.actors.ports.usage import Purpose
from tests.support.usage_sink import ListSink

pytestmark = [pytest.mark.anyio, pytest.mark.anyio_backends("asyncio", "trio")]


@dataclass(frozen=True)
class Part:
    texts: list[str]
    purpose: Purpose
    namespace: str | None


QUERY = Part(["aa"], "query", "ns1")
INDEX = Part(["bbbbbbbb", "cc"], "index", "ns2")
QUERY_TOO = Part(["dd"], "query", "ns1")


@pytest.mark.parametrize(
    ("parts", "order", "token_counts", "input_tokens", "rows"),
    [
        # Per-text counts come in sent order; `order` maps them back to the callers' texts.
        ([QUERY, INDEX], [0, 2, 1], [2, 3, 8], None, {("query", "ns1"): (2, False), ("index", "ns2"): (11, False)}),
        ([QUERY, INDEX], [1, 0, 2], [8, 2, 3], None, {("query", "ns1"): (2, False), ("index", "ns2"): (11, False)}),
        # Callers of one (purpose, namespace) share one row.
        ([QUERY, QUERY_TOO], [0, 1], [4, 5], None, {("query", "ns1"): (9, False)}),
        # A total for one group is exact; shared by several it is apportioned by estimated
        # weight (3 and 7 here), and flagged.
        ([QUERY, QUERY_TOO], [0, 1], None, 12, {("query", "ns1"): (12, False)}),
        ([QUERY, INDEX], [0, 1, 2], None, 30, {("query", "ns1"): (9, True), ("index", "ns2"): (21, True)}),
        # Nothing reported: estimated from length, and flagged.
        (
            [QUERY, INDEX],
            [0, 1, 2],
            None,
            None,
            {
                ("query", "ns1"): (sum(estimate_tokens(QUERY.texts)), True),
                ("index", "ns2"): (sum(estimate_tokens(INDEX.texts)), True),
            },
        ),
    ],
)
async def test_one_usage_row_per_purpose_and_namespace_per_call(
    parts: list[Part],
    order: list[int],
    token_counts: list[int] | None,
    input_tokens: int | None,
    rows: dict[tuple[str, str | None], tuple[int, bool]],
) -> None:
    sink = ListSink()
    meter = Meter(ProviderInfo(provider="openai", model="m"), EmbedderSettings(), sink, None)
    texts = [text for part in parts for text in part.texts]
    result = ProviderBatch(vectors=[[1.0]] * len(texts), input_tokens=input_tokens, token_counts=token_counts)
    async with anyio.create_task_group() as tasks:
        await tasks.start(meter.usage.run)
        meter.call(parts, order, result, texts)
        await meter.usage.flush()
        tasks.cancel_scope.cancel()
    assert {(r.purpose, r.namespace): (r.input_tokens, r.estimated) for r in sink.rows} == rows
    assert meter.counters.tokens == sum(tokens for tokens, _ in rows.values())
    assert meter.counters.estimated_tokens == sum(tokens for tokens, estimated in rows.values() if estimated)


@pytest.mark.parametrize(
    ("sizes", "buckets", "largest"),
    [
        ([1], {"1": 1}, 1),
        ([3, 4, 5], {"4": 2, "8": 1}, 5),
        ([32, 33], {"32": 1, "64": 1}, 33),
        ([BATCH_BUCKETS[-1] + 1], {"+Inf": 1}, BATCH_BUCKETS[-1] + 1),
    ],
)
def test_batch_sizes_fall_in_the_smallest_bucket_that_holds_them(
    sizes: list[int], buckets: dict[str, int], largest: int
) -> None:
    counters = Counters()
    for size in sizes:
        counters.batch(size)
    assert {label: n for label, n in counters.buckets.items() if n} == buckets
    assert counters.batch_max == largest
