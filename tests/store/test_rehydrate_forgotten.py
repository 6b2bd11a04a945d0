"""Rehydration alone keeps a forgotten or replaced record out of every answer.

The index's layers (its tombstones, the FAISS selector; tests/actors/index/test_forgotten_layers.py)
are absent here by construction: the candidates are given as an index with no tombstones would
give them after a rollback to a generation built before the forget, or after a restart on one,
namely the forgotten record's id and the replaced record's old best chunk. Only rehydration's
statement stands between them and the client; the full-text and structured routes' own
statements are checked the same way, since rehydration re-reads whatever they return.
"""

from __future__ import annotations

import hashlib
import uuid

import asyncpg
import pytest

from recalld.store.records import RecordFields, RecordRepository
from recalld.store.search import Filters, full_text, rehydrate, structured

pytestmark = pytest.mark.anyio

NS = "forgetting"


async def chunk(conn: asyncpg.Connection, record_id: uuid.UUID, revision: int, text: str) -> int:
    """A chunk as the index manager writes it; its surrogate."""
    return int(
        await conn.fetchval(
            """INSERT INTO chunks (record_id, revision, chunker, chunk_no, namespace, text, text_sha256)
               VALUES ($1, $2, 'test', 0, $3, $4, $5) RETURNING surrogate""",
            record_id,
            revision,
            NS,
            text,
            hashlib.sha256(text.encode()).hexdigest(),
        )
    )


async def test_rehydration_alone_drops_forgotten_records_and_old_revisions(pool: asyncpg.Pool) -> None:
    records = RecordRepository(pool)
    forgotten, _ = await records.create(
        RecordFields(NS, "doc", "Vault", "the vault pass phrase is swordfish", {}, None)
    )
    replaced, _ = await records.create(RecordFields(NS, "doc", "Budget", "the first draft budget is secret", {}, None))
    kept, _ = await records.create(RecordFields(NS, "doc", "Garden", "the garden rota", {}, None))
    async with pool.acquire() as conn:
        old_chunks = {forgotten: await chunk(conn, forgotten, 1, "the vault pass phrase is swordfish")}
        old_chunks[replaced] = await chunk(conn, replaced, 1, "the first draft budget is secret")
    assert await records.forget(forgotten)
    assert await records.update(replaced, RecordFields(NS, "doc", "Budget", "the approved budget", {}, None))

    async with pool.acquire() as conn:
        rows = await rehydrate(
            conn, Filters(NS), [forgotten, replaced, kept], "swordfish secret draft", 30, best_chunks=old_chunks
        )
        assert forgotten not in rows, "a forgotten record never comes back"
        assert rows[replaced]["revision"] == 2, "a replaced record comes back as it is now"
        for row in rows.values():
            for gone in ("swordfish", "secret", "draft"):
                assert gone not in row["snippet"] and gone not in row["title"], row
        # the other routes' statements, which rehydration re-reads
        found = {c.id for c in await full_text(conn, Filters(NS), "swordfish OR secret OR draft", 10)}
        assert not found & {forgotten, replaced}
        assert forgotten not in {c.id for c in await structured(conn, Filters(NS, kinds=["doc"]), 10)}
