"""A create's title is embedded while its record is written, not after: the duplicate check's
slow step (the title model) runs beside the write's PostgreSQL work. Over a real PostgreSQL and
the OpenAI wire format on loopback, through the service the record routes call."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import anyio
import anyio.to_thread
import asyncpg
import numpy as np
import numpy.typing as npt
import pytest

from recalld.actors.embedding.embedder import Embedder, EmbedderSettings
from recalld.config import Config, DuplicatesConfig
from recalld.metrics import Metrics
from recalld.providers.http import OpenAIProvider
from recalld.services.duplicates import DuplicateChecker
from recalld.services.duplicates_writer import TitleVectorWriter
from recalld.services.records import RecordWrites
from recalld.store.duplicates import PgTitleStore
from recalld.store.records import RecordRepository
from recalld.wire.errors import ApiError
from recalld.wire.records import RecordIn
from tests.support.embedding_service import EmbeddingService, serve
from tests.support.usage_sink import NoSink
from tests.support.waits import eventually_async

pytestmark = [pytest.mark.anyio]


@asynccontextmanager
async def record_writes(
    pool: asyncpg.Pool,
    service: EmbeddingService,
    titles: PgTitleStore | None = None,
    metrics: Metrics | None = None,
    *,
    store_vectors: bool = True,
) -> AsyncIterator[RecordWrites]:
    """The record service with duplicate checks by an embedder on `service`; `store_vectors`
    False: the title writer does not run, so every vector a check hands over stays unstored, as
    between a check's answer and its writer's turn."""
    async with serve(service, "asyncio") as (url, client):
        provider = OpenAIProvider(client, url=f"{url}/v1", model="text-embedding-3-small")
        embedder = Embedder(provider, usage=NoSink(), settings=EmbedderSettings(max_wait_s=0.0))
        store = titles or PgTitleStore(pool)
        writer = TitleVectorWriter(store)
        checker = DuplicateChecker(store, embedder, DuplicatesConfig(), metrics or Metrics(), writer=writer)
        async with anyio.create_task_group() as tasks:
            await tasks.start(embedder.run)
            if store_vectors:
                await tasks.start(writer.run)
            yield RecordWrites(RecordRepository(pool), Config(), Metrics(), checker, None)
            tasks.cancel_scope.cancel()


def story(title: str) -> RecordIn:
    return RecordIn(namespace="ns", kind="story", title=title, body="b")


def sent(service: EmbeddingService) -> list[str]:
    return [text for call in service.calls_to("/v1/embeddings") for text in call.inputs]


async def test_the_title_goes_to_the_model_while_the_record_is_still_being_written(pool: asyncpg.Pool) -> None:
    service = EmbeddingService(dimension=8)
    async with record_writes(pool, service) as writes:
        await writes.create(story("Export the monthly sales report to CSV"))
        async with pool.acquire() as blocker, anyio.create_task_group() as tasks:
            # Another transaction holds the records table: the create's insert waits for it.
            transaction = blocker.transaction()
            await transaction.start()
            await blocker.execute("LOCK TABLE records IN EXCLUSIVE MODE")
            created = []

            async def create() -> None:
                created.append(await writes.create(story("Import product catalogue from Excel")))

            tasks.start_soon(create)
            await eventually_async(
                lambda: any("import product catalogue from excel" in text for text in sent(service)),
                10,
                "the new title sent to the model while its record waits for the table",
            )
            assert not created, "the create finished with the table held"
            await transaction.rollback()
    [answer] = created
    assert answer.duplicate_check is not None and answer.duplicate_check.status in ("clear", "warned")
    assert answer.duplicate_check.compared == 1
    # one embedding of the new title, not a second one after the write
    assert sum("import product catalogue from excel" in text for text in sent(service)) == 1


async def test_a_refused_write_is_answered_as_before(pool: asyncpg.Pool) -> None:
    service = EmbeddingService(dimension=8)
    async with record_writes(pool, service) as writes:
        await writes.create(story("Export the monthly sales report to CSV"))
        await writes.create(story("Reset a forgotten password"))
        with pytest.raises(ApiError) as refused:
            await writes.create(story("Reset a forgotten password!"))  # the same title, normalised
    assert refused.value.status == 409


async def test_when_the_embedding_ahead_fails_the_check_says_why_and_calls_no_more(pool: asyncpg.Pool) -> None:
    service = EmbeddingService(dimension=8)
    async with record_writes(pool, service) as writes:
        await writes.create(story("Export the monthly sales report to CSV"))
        calls = len(service.calls_to("/v1/embeddings"))
        service.fail_next("http503")
        answer = await writes.create(story("Import product catalogue from Excel"))
    check = answer.duplicate_check
    assert check is not None and (check.status, check.reason) == ("skipped", "provider_down"), check
    assert len(service.calls_to("/v1/embeddings")) == calls + 1  # the failed one: one call a check


async def test_creates_written_at_once_take_each_others_vectors_rather_than_embed_them_again(
    pool: asyncpg.Pool,
) -> None:
    service = EmbeddingService(dimension=8)
    titles = [f"Export the {what} report to CSV" for what in ("sales", "stock", "tax", "payroll")]
    async with record_writes(pool, service, store_vectors=False) as writes:
        await writes.create(story("Reset a forgotten password"))
        answers = []

        async def create(title: str) -> None:
            answers.append(await writes.create(story(title)))

        async with pool.acquire() as blocker, anyio.create_task_group() as tasks:
            # The records table held: the four titles go to the model while their writes wait, and
            # each check then finds the others written with no stored vector.
            transaction = blocker.transaction()
            await transaction.start()
            await blocker.execute("LOCK TABLE records IN EXCLUSIVE MODE")
            for title in titles:
                tasks.start_soon(create, title)
            await eventually_async(
                lambda: all(title.lower() in " ".join(sent(service)) for title in titles),
                10,
                "the four titles sent to the model while their records wait for the table",
            )
            await transaction.rollback()
        later = await writes.create(story("Rotate the signing keys"))
    checks = [answer.duplicate_check for answer in [*answers, later]]
    assert all(check is not None for check in checks)
    # every check compared with every live title it found, the ones written beside it included
    assert [(check.compared, check.of) for check in checks if check is not None][-1] == (5, 5)
    assert all(check.compared == check.of for check in checks if check is not None), checks
    # and each title went to the model once: by its own create (the first title by a create's call)
    every = ["Reset a forgotten password", *titles, "Rotate the signing keys"]
    assert [sum(title.lower() in text for text in sent(service)) for title in every] == [1] * len(every)


class CountingTitles(PgTitleStore):
    """The real store, counting its reads of stored title vectors (a subclass: every query runs)."""

    vector_reads = 0

    async def vectors(self, space_id: str, keys: Sequence[str], dimension: int) -> dict[str, npt.NDArray[np.float32]]:
        self.vector_reads += 1
        return await super().vectors(space_id, keys, dimension)


async def test_titles_embedded_ahead_are_not_looked_up_in_postgresql(pool: asyncpg.Pool) -> None:
    service = EmbeddingService(dimension=8)
    titles = CountingTitles(pool)
    async with record_writes(pool, service, titles) as writes:
        await writes.create(story("Export the monthly sales report to CSV"))
        await writes.create(story("Reset a forgotten password"))
        reads = titles.vector_reads
        answer = await writes.create(story("Import product catalogue from Excel"))
    assert answer.duplicate_check is not None and answer.duplicate_check.compared == 2
    # its own title was with the model already: nothing to read for it, and nothing else waited
    assert titles.vector_reads == reads


async def test_a_small_kind_is_compared_without_waiting_for_a_worker_thread(pool: asyncpg.Pool) -> None:
    service = EmbeddingService(dimension=8)
    async with record_writes(pool, service) as writes:
        await writes.create(story("Export the monthly sales report to CSV"))
        limiter = anyio.to_thread.current_default_thread_limiter()
        tokens, limiter.total_tokens = limiter.total_tokens, 1
        release = threading.Event()
        try:
            async with anyio.create_task_group() as tasks:
                # every worker thread taken (by a slow call elsewhere in the daemon)
                tasks.start_soon(lambda: anyio.to_thread.run_sync(release.wait, 30))
                await eventually_async(lambda: limiter.borrowed_tokens, 10, "the worker thread taken", poll=0.001)
                with anyio.fail_after(10):
                    answer = await writes.create(story("Import product catalogue from Excel"))
                release.set()
        finally:
            release.set()
            limiter.total_tokens = tokens
    assert answer.duplicate_check is not None and answer.duplicate_check.compared == 1


async def test_a_batchs_titles_go_to_the_model_before_its_items_are_written(pool: asyncpg.Pool) -> None:
    service = EmbeddingService(dimension=8)
    titles = [f"Export the {what} report to CSV" for what in ("sales", "stock", "tax")]
    async with record_writes(pool, service) as writes:
        await writes.create(story("Reset a forgotten password"))
        items = [story(title) for title in titles]
        async with writes.batch_ahead(items) as ahead:
            await eventually_async(
                lambda: all(title.lower() in " ".join(sent(service)) for title in titles),
                10,
                "the batch's titles sent to the model before any item is written",
            )
            written = [await writes.write_item(item, upsert=False) for item in items]
            checks = await writes.check_titles([checked for _, checked in written if checked is not None], ahead)
    assert [(check.compared, check.of) for check in checks] == [(1, 1), (2, 2), (3, 3)]
    # one embedding of each title: the check made no call of its own
    assert [sum(title.lower() in text for text in sent(service)) for title in titles] == [1, 1, 1]


def stage_seconds(metrics: Metrics) -> dict[str, float]:
    """Each stage's seconds so far, as `/metrics` exposes them."""
    samples = metrics.duplicate_check_stages.collect()[0].samples
    return {sample.labels["stage"]: sample.value for sample in samples if sample.name.endswith("_sum")}


async def test_a_checks_time_is_told_by_stage_where_it_went(pool: asyncpg.Pool) -> None:
    """`recalld_duplicate_check_stage_seconds`: a slow title model shows as the `embed` stage, and
    in no other."""
    service, metrics = EmbeddingService(dimension=8), Metrics()
    async with record_writes(pool, service, metrics=metrics) as writes:
        await writes.create(story("Reset a forgotten password"))
        service.delay_s = 1.0
        await writes.create(story("Export the sales report to CSV"))
    seconds = stage_seconds(metrics)
    assert set(seconds) == {"titles", "vectors", "embed", "store", "compare", "similar"}
    # the call starts while the record is written: the stages before `embed` overlap its start
    assert seconds["embed"] >= 0.8, seconds
    assert max(value for stage, value in seconds.items() if stage != "embed") < 0.5, seconds
