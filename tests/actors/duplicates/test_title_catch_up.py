"""The builder's title catch-up (`TitleCatchUp`) over real PostgreSQL: it stops once the builder
lock is lost, as the chunks' catch-up does, so that the member that took the lock embeds what is
left and no title is embedded by two members."""

from __future__ import annotations

import anyio
import asyncpg
import pytest

from recalld.actors.duplicates.catch_up import TitleCatchUp
from recalld.actors.embedding.embedder import Embedder, EmbedderSettings
from recalld.store.duplicates import PgTitleStore
from recalld.store.records import RecordFields, RecordRepository
from tests.support.index_cluster import WordsProvider
from tests.support.usage_sink import ListSink

pytestmark = pytest.mark.anyio

TITLES = ("Export invoices as PDF", "Reset a forgotten password", "Import a product catalogue")


async def test_a_title_pass_stops_once_the_builder_lock_is_lost(pool: asyncpg.Pool) -> None:
    records = RecordRepository(pool)
    for title in TITLES:
        await records.create(RecordFields("ns", "story", title, "", {}, None))
    store = PgTitleStore(pool)
    # one title a provider call, so that the lock is asked about before each
    embedder = Embedder(WordsProvider(), usage=ListSink(), settings=EmbedderSettings(max_batch=1, max_wait_s=0.0))
    async with anyio.create_task_group() as tasks:
        await tasks.start(embedder.run)
        catch_up = TitleCatchUp(store, embedder)
        asked: list[bool] = []

        def holding() -> bool:  # held for the first call, lost before the second
            asked.append(len(asked) < 1)
            return asked[-1]

        assert await catch_up.run(holding=holding) is None
        assert catch_up.embedded_titles == 1 and asked == [True, False], asked
        assert embedder.space is not None
        left = await store.titles_to_embed(embedder.space.key, 10)
        assert len(left) == 2, "what is left is the new holder's"
        await catch_up.run()  # held throughout: the rest
        assert catch_up.embedded_titles == 3
        assert await store.titles_to_embed(embedder.space.key, 10) == []
        tasks.cancel_scope.cancel()
