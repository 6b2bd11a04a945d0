"""One live record per (namespace, source_path): the store refuses a second copy, naming the
holder, and the migration that brings the rule forgets the copies a database already holds,
keeping each path's newest, as a forget does."""

from __future__ import annotations

import datetime as dt
import uuid

import asyncpg
import pytest

from recalld.store.migrations import available, migrate
from recalld.store.records import RecordFields, RecordRepository, SourcePathTaken

pytestmark = pytest.mark.anyio

MIGRATION = "one_live_record_per_source_path"


def fields(title: str, source_path: str | None, namespace: str = "n") -> RecordFields:
    return RecordFields(
        namespace=namespace, kind="doc", title=title, body=f"{title} text", attributes={}, source_path=source_path
    )


async def test_the_store_keeps_one_live_record_per_path(pool: asyncpg.Pool) -> None:
    records = RecordRepository(pool)
    first, _ = await records.create(fields("Guide", "/docs/guide.md"))
    with pytest.raises(SourcePathTaken) as taken:
        await records.create(fields("Another title", "/docs/guide.md"))
    assert taken.value.existing_id == first
    other, _ = await records.create(fields("Notes", "/docs/notes.md"))
    with pytest.raises(SourcePathTaken) as moved:
        await records.update(other, fields("Notes", "/docs/guide.md"))
    assert moved.value.existing_id == first
    elsewhere, _ = await records.create(fields("Guide", "/docs/guide.md", namespace="m"))
    assert elsewhere != first, "another namespace's path is its own"
    unsourced = [await records.create(fields(f"Loose {i}", None)) for i in range(2)]
    assert len(unsourced) == 2, "records without a path are not limited"
    assert await records.forget(first)
    again, _ = await records.create(fields("Another title", "/docs/guide.md"))
    assert [row["id"] for row in await records.by_source("n", "/docs/guide.md")] == [again]


async def test_copies_of_a_path_made_before_the_rule_leave_the_newest_live(fresh_dsn: str) -> None:
    shipped = available()
    at = next(i for i, m in enumerate(shipped) if m.name == MIGRATION)
    conn = await asyncpg.connect(fresh_dsn)
    try:
        await migrate(conn, shipped[:at])
        await conn.execute("INSERT INTO vector_spaces (space_id, spec) VALUES ('s', '{}')")
        now = dt.datetime.now(dt.UTC)

        async def insert(namespace: str, title: str, path: str | None, hours_ago: int) -> uuid.UUID:
            record_id = uuid.uuid4()
            changed = now - dt.timedelta(hours=hours_ago)
            await conn.execute(
                "INSERT INTO records (id, namespace, kind, title, title_norm, body, source_path, content_hash,"
                " created_at, updated_at) VALUES ($1, $2, 'doc', $3, $3, 'the text', $4, 'h', $5, $5)",
                record_id,
                namespace,
                title,
                path,
                changed,
            )
            surrogate = await conn.fetchval(
                "INSERT INTO chunks (record_id, revision, chunker, chunk_no, namespace, text, text_sha256)"
                " VALUES ($1, 1, 'c', 0, $2, 'the text', 'digest') RETURNING surrogate",
                record_id,
                namespace,
            )
            await conn.execute("INSERT INTO chunk_vectors VALUES ('s', $1, '\\x00')", surrogate)
            return record_id

        oldest = await insert("n", "copy one", "/p", 3)
        newest = await insert("n", "copy two", "/p", 1)
        middle = await insert("n", "copy three", "/p", 2)
        theirs = await insert("m", "copy one", "/p", 5)
        loose = [await insert("n", f"loose {i}", None, 4) for i in range(2)]
        before = await conn.fetchval("SELECT max(change_seq) FROM records")

        assert await migrate(conn, shipped[: at + 1]) == [shipped[at].version]

        rows = {
            row["id"]: row
            for row in await conn.fetch(
                """SELECT r.id, r.title, r.body, r.source_path, r.deleted_at IS NOT NULL AS gone, r.change_seq,
                          c.retired_at IS NOT NULL AS retired, c.text, count(v.surrogate) AS vectors
                   FROM records r JOIN chunks c ON c.record_id = r.id
                   LEFT JOIN chunk_vectors v ON v.surrogate = c.surrogate
                   GROUP BY r.id, c.surrogate"""
            )
        }
        for kept in (newest, theirs, *loose):
            row = rows[kept]
            assert (row["gone"], row["retired"], row["text"], row["vectors"]) == (False, False, "the text", 1)
        for copy in (oldest, middle):
            row = rows[copy]
            assert (row["title"], row["body"], row["source_path"], row["gone"]) == ("", "", None, True)
            assert (row["retired"], row["text"], row["vectors"]) == (True, "", 0), "its text and vectors purged"
            assert row["change_seq"] > before, "the indexers learn of the forget"
        with pytest.raises(asyncpg.UniqueViolationError):
            await insert("n", "copy four", "/p", 0)
    finally:
        await conn.close()
