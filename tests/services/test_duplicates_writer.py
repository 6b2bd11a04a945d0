"""The title vectors checks embedded, stored after their answers (`TitleVectorWriter`): in the
check's space, what waits stored together, and neither a full queue nor PostgreSQL's trouble a
reason for a check to wait or the writer to stop."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import asyncpg
import numpy as np
import numpy.typing as npt
import pytest

from recalld.actors.duplicates.rules import title_key
from recalld.actors.ports.embedding import VectorSpace
from recalld.services.duplicates_writer import TitleVectorWriter
from recalld.store.duplicates import PgTitleStore
from tests.support.waits import eventually_async

pytestmark = pytest.mark.anyio

SPACE = VectorSpace(provider="local", model="titles", dimension=4, normalized=True, template_version=1)


class CountingTitles(PgTitleStore):
    """The real store, counting its statements that store title vectors."""

    stores = 0

    async def store_titles(self, space_id: str, items: Sequence[tuple[str, npt.NDArray[np.float32]]]) -> int:
        self.stores += 1
        return await super().store_titles(space_id, items)


def vectors(*titles: str) -> list[tuple[str, npt.NDArray[np.float32]]]:
    return [(title_key(title), np.full(4, 0.5, dtype=np.float32)) for title in titles]


async def stored(pool: asyncpg.Pool) -> set[str]:
    rows = await pool.fetch("SELECT title_sha256 FROM title_vectors WHERE space_id = $1", SPACE.key)
    return {row["title_sha256"] for row in rows}


async def test_what_waits_is_stored_together_in_the_checks_space(pool: asyncpg.Pool) -> None:
    store = CountingTitles(pool)
    writer = TitleVectorWriter(store)
    writer.put(SPACE, vectors("export invoices as pdf", "reset a password"))
    writer.put(SPACE, vectors("reset a password", "import a catalogue"))  # one title twice
    writer.put(SPACE, [])
    async with anyio.create_task_group() as tasks:
        await tasks.start(writer.run)
        await eventually_async(lambda: writer.stored == 3, 30, "the three titles stored")
        tasks.cancel_scope.cancel()
    assert await stored(pool) == {
        title_key(t) for t in ("export invoices as pdf", "reset a password", "import a catalogue")
    }
    assert store.stores == 1  # the space registered, then one statement for all that waited
    assert (writer.dropped, writer.failed) == (0, 0)


async def test_a_full_queue_drops_rather_than_waits(pool: asyncpg.Pool) -> None:
    writer = TitleVectorWriter(PgTitleStore(pool), queued=1)
    writer.put(SPACE, vectors("first title"))
    writer.put(SPACE, vectors("second title", "third title"))  # the writer is not even running
    assert writer.dropped == 2


async def test_postgresqls_trouble_is_counted_and_the_writer_goes_on(fresh_dsn: str) -> None:
    pool = await asyncpg.create_pool(fresh_dsn, min_size=1, max_size=1)
    await pool.close()  # every statement now fails as when PostgreSQL is gone
    writer = TitleVectorWriter(PgTitleStore(pool))
    async with anyio.create_task_group() as tasks:
        await tasks.start(writer.run)
        writer.put(SPACE, vectors("lost for now"))
        await eventually_async(lambda: writer.failed == 1, 30, "the failure counted")
        writer.put(SPACE, vectors("also lost", "and this"))  # the writer did not stop
        await eventually_async(lambda: writer.failed == 3, 30, "the writer still taking work")
        tasks.cancel_scope.cancel()
    assert writer.stored == 0
