"""Migrations: fresh database, re-run, concurrent starts, and refusal of a newer schema."""

from __future__ import annotations

import datetime as dt

import anyio
import asyncpg
import pytest

from recalld.store.migrations import Migration, SchemaTooNew, available, current_version, migrate

pytestmark = pytest.mark.anyio


async def test_fresh_database_gets_every_migration_once(fresh_dsn: str) -> None:
    conn = await asyncpg.connect(fresh_dsn)
    try:
        shipped = [m.version for m in available()]
        assert shipped and shipped == list(range(1, len(shipped) + 1))
        assert await migrate(conn) == shipped
        assert await current_version(conn) == shipped[-1]
        assert await migrate(conn) == [], "a second run applies nothing"
        assert await conn.fetchval("SELECT to_regclass('records') IS NOT NULL")
    finally:
        await conn.close()


async def test_concurrent_starts_apply_each_migration_exactly_once(fresh_dsn: str) -> None:
    results: list[list[int]] = []

    async def start() -> None:
        conn = await asyncpg.connect(fresh_dsn)
        try:
            results.append(await migrate(conn))
        finally:
            await conn.close()

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(start)
    applied = sorted(v for r in results for v in r)
    assert applied == [m.version for m in available()]


async def test_a_newer_schema_is_refused_clearly(fresh_dsn: str) -> None:
    conn = await asyncpg.connect(fresh_dsn)
    try:
        await migrate(conn)
        future = [*available(), Migration(len(available()) + 1, "from_the_future", "SELECT 1")]
        await migrate(conn, future)
        with pytest.raises(SchemaTooNew, match="newer recalld"):
            await migrate(conn)
    finally:
        await conn.close()


async def test_a_failing_migration_leaves_no_trace(fresh_dsn: str) -> None:
    conn = await asyncpg.connect(fresh_dsn)
    try:
        broken = [Migration(1, "half", "CREATE TABLE half_done (x int); SELECT no_such_function();")]
        with pytest.raises(asyncpg.PostgresError):
            await migrate(conn, broken)
        assert not await conn.fetchval("SELECT to_regclass('half_done') IS NOT NULL")
        assert await current_version(conn) == 0
    finally:
        await conn.close()


def test_daemon_refuses_to_start_on_a_newer_schema(fresh_dsn: str) -> None:
    import subprocess
    import sys

    async def prepare() -> None:
        conn = await asyncpg.connect(fresh_dsn)
        try:
            await migrate(conn, [*available(), Migration(len(available()) + 1, "later", "SELECT 1")])
        finally:
            await conn.close()

    anyio.run(prepare)
    from tests.support import ROOT, scratch_dir

    home = scratch_dir("recalld-test-")
    done = subprocess.run(
        [sys.executable, "-m", "recalld", "serve", "--data-dir", str(home / "d"), "--socket", str(home / "s")],
        env={"RECALLD_STORE_DSN": fresh_dsn, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode != 0
    assert "newer recalld" in done.stderr


async def test_tombstones_made_before_0008_lose_their_content_and_live_records_keep_theirs(fresh_dsn: str) -> None:
    conn = await asyncpg.connect(fresh_dsn)
    try:
        await migrate(conn, available()[:7])
        insert = (
            "INSERT INTO records (id, namespace, kind, title, title_norm, body, attributes, source_path, content_hash,"
            " deleted_at) VALUES (gen_random_uuid(), 'n', 'doc', $1, $1, 'the text', '{\"a\": 1}', '/p', 'h', $2)"
        )
        await conn.execute(insert, "forgotten", dt.datetime.now(dt.UTC))
        await conn.execute(insert, "live", None)
        assert await migrate(conn, available()[:8]) == [8]
        rows = await conn.fetch(
            "SELECT title, body, attributes::text AS attributes, source_path, length(search) AS words"
            " FROM records ORDER BY deleted_at NULLS FIRST"
        )
        assert [dict(row) for row in rows] == [
            {"title": "live", "body": "the text", "attributes": '{"a": 1}', "source_path": "/p", "words": 2},
            {"title": "", "body": "", "attributes": "{}", "source_path": None, "words": 0},
        ]
    finally:
        await conn.close()


async def test_vectors_and_hashes_of_chunks_retired_before_0009_are_purged(fresh_dsn: str) -> None:
    conn = await asyncpg.connect(fresh_dsn)
    try:
        await migrate(conn, available()[:8])
        await conn.execute("INSERT INTO vector_spaces (space_id, spec) VALUES ('s', '{}')")
        for title, deleted_at in (("forgotten", dt.datetime.now(dt.UTC)), ("live", None)):
            record_id = await conn.fetchval(
                "INSERT INTO records (id, namespace, kind, title, title_norm, body, content_hash, deleted_at)"
                " VALUES (gen_random_uuid(), 'n', 'doc', $1, $1, '', '', $2) RETURNING id",
                title,
                deleted_at,
            )
            surrogate = await conn.fetchval(
                "INSERT INTO chunks (record_id, revision, chunker, chunk_no, namespace, text, text_sha256, retired_at)"
                " VALUES ($1, 1, 'c', 0, 'n', $2, 'digest', $3) RETURNING surrogate",
                record_id,
                f"{title} text" if deleted_at is None else "",
                deleted_at,
            )
            await conn.execute("INSERT INTO chunk_vectors VALUES ('s', $1, '\\x00')", surrogate)
        assert await migrate(conn, available()[:9]) == [9]
        rows = await conn.fetch(
            """SELECT r.title, c.text, c.text_sha256, count(v.surrogate) AS vectors
               FROM records r JOIN chunks c ON c.record_id = r.id LEFT JOIN chunk_vectors v ON v.surrogate = c.surrogate
               GROUP BY 1, 2, 3 ORDER BY 1"""
        )
        assert [tuple(row) for row in rows] == [("forgotten", "", "", 0), ("live", "live text", "digest", 1)]
    finally:
        await conn.close()
