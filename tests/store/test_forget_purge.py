"""What a forget or an update leaves in PostgreSQL: the forgotten record's vectors, chunk text and
full-text vectors go in the forget's own transaction (vectors can be partly inverted back to
text), as do the vectors of the revision an update replaced; what stays of a retired chunk is its
surrogate row, with nothing of the text, which older generations still need as a tombstone."""

from __future__ import annotations

import uuid

import asyncpg
import numpy as np
import pytest

from recalld.actors.ports.embedding import VectorSpace
from recalld.actors.ports.index import RecordToIndex
from recalld.store.records import RecordFields, RecordRepository
from recalld.store.vectors import PgVectorStore

pytestmark = pytest.mark.anyio

SPACES = [
    VectorSpace(provider="openai", model="m", dimension=4, normalized=True, template_version=1),
    VectorSpace(provider="openai", model="m", dimension=4, normalized=True, template_version=2),
]
CHUNKER = "test-chunker"


def fields(title: str, body: str) -> RecordFields:
    """A record of its own file (a namespace has one live record per source path)."""
    path = f"notes/{title.lower().replace(' ', '-')}.md"
    return RecordFields("purge", "doc", title, body, {"topic": "secrets"}, path)


async def index(store: PgVectorStore, record_id: uuid.UUID) -> None:
    """Store two chunks of the record's current revision in every space, as the builder would."""
    for space in SPACES:
        [record] = [r for r in await store.records_to_index(space.key, CHUNKER, 100) if r.id == record_id]
        texts = [record.body[:20], record.body[20:]]
        vectors = np.eye(4, dtype=np.float32)[:2]
        stored = await store.store_batch(
            space.key, CHUNKER, [(RecordToIndex(*record), texts, [f"h{i}" for i in range(2)], vectors)]
        )
        assert stored == 2


async def vectors_of(conn: asyncpg.Connection, record_id: uuid.UUID, revision: int | None = None) -> int:
    return int(
        await conn.fetchval(
            """SELECT count(*) FROM chunk_vectors v JOIN chunks c ON c.surrogate = v.surrogate
               WHERE c.record_id = $1 AND ($2::int IS NULL OR c.revision = $2)""",
            record_id,
            revision,
        )
    )


async def test_a_forget_removes_the_records_vectors_and_text_in_its_transaction(pool: asyncpg.Pool) -> None:
    store, records = PgVectorStore(pool), RecordRepository(pool)
    for space in SPACES:
        await store.ensure_space(space)
    forgotten, _ = await records.create(fields("Launch codes", "The launch codes are zebra-nine-tango, kept safe."))
    kept, _ = await records.create(fields("Lunch menu", "The lunch menu is soup on Mondays and fish on Fridays."))
    await index(store, forgotten)
    await index(store, kept)
    async with pool.acquire() as conn:
        assert await vectors_of(conn, forgotten) == 4

    assert await records.forget(forgotten)

    async with pool.acquire() as conn:
        assert await vectors_of(conn, forgotten) == 0, "a forgotten record's vectors are gone when the forget commits"
        chunks = await conn.fetch(
            "SELECT text, text_sha256, length(search) AS words, retired_at FROM chunks WHERE record_id = $1",
            forgotten,
        )
        assert len(chunks) == 2, "the surrogate rows stay (older generations' tombstones)"
        assert all(c["retired_at"] is not None for c in chunks)
        assert [(c["text"], c["text_sha256"], c["words"]) for c in chunks] == [("", "", 0)] * 2
        row = await conn.fetchrow(
            "SELECT title, body, attributes, source_path, length(search) AS words FROM records WHERE id = $1",
            forgotten,
        )
        assert dict(row) == {"title": "", "body": "", "attributes": {}, "source_path": None, "words": 0}
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM chunks WHERE text LIKE '%zebra%' OR search @@ to_tsquery('english', 'zebra')"
            )
            == 0
        )
        assert await vectors_of(conn, kept) == 4, "other records keep theirs"


async def test_an_update_removes_the_replaced_revisions_vectors(pool: asyncpg.Pool) -> None:
    store, records = PgVectorStore(pool), RecordRepository(pool)
    for space in SPACES:
        await store.ensure_space(space)
    record_id, _ = await records.create(fields("Door code", "The door code is 4711, change it monthly please."))
    await index(store, record_id)

    assert await records.update(record_id, fields("Door code", "The door code is now kept elsewhere.")) == (2, True)

    async with pool.acquire() as conn:
        assert await vectors_of(conn, record_id, 1) == 0, "the replaced revision's vectors are gone"
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM chunks WHERE record_id = $1 AND revision = 1 AND (text <> '' OR text_sha256 <> '')",
                record_id,
            )
            == 0
        )
    await index(store, record_id)
    async with pool.acquire() as conn:
        assert await vectors_of(conn, record_id, 2) == 4, "the new revision is indexed as usual"
    rows = await store.vectors_after(SPACES[0].key, 4, 0, 100)
    assert set(rows.revisions.tolist()) == {2}
