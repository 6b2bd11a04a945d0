"""Rehydration's statement: the best chunk of a record only full text found is the one that ranks
best for the query's words, and the highlight query is computed once per statement, not once per
row, even under the generic plan PostgreSQL switches a prepared statement to after five runs."""

from __future__ import annotations

import hashlib
import uuid

import asyncpg
import pytest

from recalld.store.records import RecordFields, RecordRepository
from recalld.store.search import REHYDRATE_SQL, Filters, rehydrate

pytestmark = pytest.mark.anyio


NS = "manuals"
CHUNKS = [
    "The archive tool reads its options from the command line.",
    "Use --directory to change to a folder before unpacking the archive.",
    "Exit status is zero on success.",
]


@pytest.fixture
async def record_id(pool: asyncpg.Pool) -> uuid.UUID:
    """A record with three live chunks, as the index manager writes them."""
    created, _ = await RecordRepository(pool).create(RecordFields(NS, "man", "tar", " ".join(CHUNKS), {}, None))
    async with pool.acquire() as conn:
        await conn.executemany(
            """INSERT INTO chunks (record_id, revision, chunker, chunk_no, namespace, text, text_sha256)
               VALUES ($1, 1, 'test', $2, $3, $4, $5)""",
            [(created, n, NS, text, hashlib.sha256(text.encode()).hexdigest()) for n, text in enumerate(CHUNKS)],
        )
    return created


async def snippet(conn: asyncpg.Connection, record: uuid.UUID, query: str) -> str:
    rows = await rehydrate(conn, Filters(NS), [record], query, 30)
    return str(rows[record]["snippet"])


async def test_a_full_text_hit_shows_its_best_chunk_highlighted(pool: asyncpg.Pool, record_id: uuid.UUID) -> None:
    async with pool.acquire() as conn:
        shown = await snippet(conn, record_id, "unpack into another folder")
    assert "<b>folder</b>" in shown and "<b>unpacking</b>" in shown, shown
    assert "Exit status" not in shown and "command line" not in shown, shown


async def test_the_generic_plan_gives_the_same_snippets_as_custom_plans(
    pool: asyncpg.Pool, record_id: uuid.UUID
) -> None:
    shown: dict[str, set[str]] = {}
    for mode in ("force_custom_plan", "force_generic_plan"):
        async with pool.acquire() as conn:
            await conn.execute(f"SET plan_cache_mode = {mode}")
            try:
                shown[mode] = {await snippet(conn, record_id, "unpack into another folder") for _ in range(7)}
            finally:
                await conn.execute("RESET plan_cache_mode")
    assert shown["force_custom_plan"] == shown["force_generic_plan"], shown
    assert len(shown["force_generic_plan"]) == 1 and "<b>folder</b>" in next(iter(shown["force_generic_plan"]))


async def test_the_highlight_query_is_computed_once_not_per_row(pool: asyncpg.Pool) -> None:
    """In the generic plan the query text is a parameter, so nothing folds the highlight query
    to a constant: only a FROM item keeps PostgreSQL from parsing and stemming it again for every
    chunk it ranks and every snippet it cuts."""
    async with pool.acquire() as conn:
        await conn.execute(f"PREPARE rehydrate_plan AS {REHYDRATE_SQL}")
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        try:
            explained = await conn.fetch(
                "EXPLAIN (VERBOSE) EXECUTE rehydrate_plan"
                f"('{NS}', NULL, NULL, '{{}}', 'unpack into another folder', 'MaxWords=30', '{{}}', '{{}}')"
            )
        finally:
            await conn.execute("RESET plan_cache_mode; DEALLOCATE rehydrate_plan")
    plan = [row[0] for row in explained]
    parsing = [line.strip() for line in plan if "plainto_tsquery" in line]
    assert parsing, "\n".join(plan)
    assert all(line.startswith("Function Call:") for line in parsing), "\n".join(plan)
    assert any("ts_rank(m.search, hl.q)" in line for line in plan), "\n".join(plan)


async def test_only_live_rows_of_the_namespace_that_pass_the_filters_come_back(pool: asyncpg.Pool) -> None:
    """The last guard of every route: whatever ids a route hands over (the vector route's come
    from a FAISS handle that may be behind the store), rehydration returns only live records of
    the asked namespace, kinds and attributes."""
    records = RecordRepository(pool)
    made: dict[str, uuid.UUID] = {}
    for name, namespace, kind, attributes in [
        ("wanted", NS, "man", {"section": "1"}),
        ("other namespace", "secret", "man", {"section": "1"}),
        ("other kind", NS, "faq", {"section": "1"}),
        ("other attributes", NS, "man", {"section": "8"}),
        ("forgotten", NS, "man", {"section": "1"}),
    ]:
        made[name], _ = await records.create(RecordFields(namespace, kind, name, "archive tool", attributes, None))
    assert await records.forget(made["forgotten"])
    async with pool.acquire() as conn:
        rows = await rehydrate(conn, Filters(NS, ["man"], {"section": "1"}), list(made.values()), "archive", 30)
        assert set(rows) == {made["wanted"]}
        # the namespace alone: every kind and attribute of it, never another namespace's record
        rows = await rehydrate(conn, Filters(NS), list(made.values()), "archive", 30)
        assert set(rows) == {made["wanted"], made["other kind"], made["other attributes"]}
