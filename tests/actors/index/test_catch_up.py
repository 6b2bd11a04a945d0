"""The catch-up's provider calls: a batch of records goes to the provider in calls as full as the
embedder's pace and `max_batch` allow, not a record or two at a time.

The store is the in-memory fake of `kernel.fakes` and the embedder the real actor, as in
`test_index_manager.py`; the provider counts the texts of each call it gets.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from recalld.actors.embedding.embedder import EmbedderSettings
from recalld.actors.ports.embedding import ProviderBatch, ProviderInfo
from tests.support.index_cluster import MOCK_SECOND, REAL_S, Cluster, WordsProvider, live_chunks
from tests.support.waits import eventually_async

pytestmark = [pytest.mark.anyio, pytest.mark.anyio_backends("trio")]

RECORDS = 300
MAX_BATCH = EmbedderSettings().max_batch


class CountingProvider(WordsProvider):
    """Remembers the number of texts in each call; takes `concurrency` calls at a time."""

    def __init__(self, concurrency: int) -> None:
        super().__init__()
        self.concurrency = concurrency
        self.calls: list[int] = []

    def describe(self) -> ProviderInfo:
        return ProviderInfo(provider="test", model="words", max_concurrency=self.concurrency)

    async def embed(self, texts: Sequence[str], *, timeout: float) -> ProviderBatch:  # noqa: ASYNC109
        self.calls.append(len(texts))
        return await super().embed(texts, timeout=timeout)


@pytest.mark.parametrize("concurrency", [1, 4], ids=["local", "remote"])
async def test_a_batch_of_records_fills_the_provider_calls(tmp_path: Path, concurrency: int) -> None:
    provider = CountingProvider(concurrency)
    cluster = Cluster(tmp_path / "generations", provider=provider)
    for i in range(RECORDS):
        await cluster.records.create("ns", f"Record {i}", f"a short body {i}")
    async with cluster.daemon(index_batch=RECORDS) as manager:
        await eventually_async(
            lambda: manager.pending == 0 and manager.full_passes >= 1, REAL_S, "caught up", poll=MOCK_SECOND
        )
    # The probe and the pace's one-text first call, then calls of max_batch texts (the mock
    # clock makes every call take no time, so the pace allows max_batch). Records that queued
    # their texts one per pass of the event loop went out one or two a call.
    assert sum(provider.calls) >= RECORDS
    assert len(provider.calls) <= 2 + -(-RECORDS // MAX_BATCH) + 2, provider.calls


class GatedProvider(WordsProvider):
    """Says when a call with the gated text has arrived (it waits for `opened` then)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = "GATE"
        self.reached = anyio.Event()

    async def embed(self, texts: Sequence[str], *, timeout: float) -> ProviderBatch:  # noqa: ASYNC109
        if any("GATE" in text for text in texts):
            self.reached.set()
        return await super().embed(texts, timeout=timeout)


async def test_a_pass_stops_once_the_builder_lock_is_lost(tmp_path: Path) -> None:
    """Another daemon holds the lock now and embeds what is left: the pass that lost it embeds no
    further batch (only the one in flight when the lock went)."""
    provider = GatedProvider()
    cluster = Cluster(tmp_path / "generations", provider=provider)
    for i in range(8):
        await cluster.records.create("ns", f"Record {i}", f"a short body {i}" + (" GATE" if i == 1 else ""))
    async with cluster.daemon(index_batch=2):
        await eventually_async(provider.reached.is_set, REAL_S, "the first batch with the provider", poll=MOCK_SECOND)
        holder = cluster.locks.holder
        assert holder is not None
        holder.drop()  # the lock's connection died while the first batch was with the provider
        assert await cluster.locks.lock().try_acquire(), "another daemon took the lock"
        provider.opened.set()
        await eventually_async(
            lambda: live_chunks(cluster) == 2, REAL_S, "the batch in flight stored", poll=MOCK_SECOND
        )
        await anyio.sleep(60)  # a minute of polls
        assert live_chunks(cluster) == 2, "no batch embedded after the lock was lost"
