"""Full text and the re-read of both routes' candidates in one statement (daemon/store/one_trip.py):
full text's candidates are exactly `search.full_text`'s, and the rows re-read are the live ones
that pass the filters, whichever route named them; a forgotten record, a record of another
namespace or kind, never comes back, and a replaced record comes back as it is now."""

from __future__ import annotations

import hashlib
import uuid

import asyncpg
import pytest

from daemon.store.one_trip import Row, answer_rows, full_text_and_rows
from daemon.store.records import RecordFields, RecordRepository
from daemon.store.search import Candidate, Filters, full_text

pytestmark = pytest.mark.anyio

NS = "one-trip"


async def chunk(conn: asyncpg.Connection, record_id: uuid.UUID, revision: int, text: str, no: int = 0) -> int:
    """A chunk as the index manager writes it; its surrogate."""
    return int(
        await conn.fetchval(
            """INSERT INTO chunks (record_id, revision, chunker, chunk_no, namespace, text, text_sha256)
               VALUES ($1, $2, 'test', $3, $4, $5, $6) RETURNING surrogate""",
            record_id,
            revision,
            no,
            NS,
            text,
            hashlib.sha256(text.encode()).hexdigest(),
        )
    )


BODIES = {
    "tar": "tar is an archiving utility that stores files in an archive",
    "gzip": "gzip compresses files; an archive made by tar is often compressed",
    "cpio": "cpio copies files into and out of archives",
    "mount": "mount attaches a filesystem to the directory tree",
    "fstab": "fstab lists the filesystems mounted at boot",
}
QUERIES = ["archive utility", "archive", "filesystem boot", "tar or cpio", "--strip-components", "zebra"]


@pytest.fixture
async def records(pool: asyncpg.Pool) -> dict[str, uuid.UUID]:
    repository = RecordRepository(pool)
    ids = {}
    for title, body in BODIES.items():
        ids[title], _ = await repository.create(
            RecordFields(NS, "man" if title != "fstab" else "conf", title, body, {}, None)
        )
    async with pool.acquire() as conn:
        for title, body in BODIES.items():
            await chunk(conn, ids[title], 1, body)
    return ids


@pytest.mark.parametrize("loose", [False, True])
@pytest.mark.parametrize("query", QUERIES)
async def test_full_texts_candidates_are_the_plain_statements(
    pool: asyncpg.Pool, records: dict[str, uuid.UUID], query: str, loose: bool
) -> None:
    async with pool.acquire() as conn:
        plain = await full_text(conn, Filters(NS), query, 3, loose=loose)
        answer = await full_text_and_rows(conn, Filters(NS), query, 3, [], loose=loose, ranked_chunks=10)
    assert answer is not None
    found, rows = answer
    assert found == plain
    assert set(rows) == {c.id for c in plain}


async def test_the_rows_are_the_live_ones_that_pass_the_filters(
    pool: asyncpg.Pool, records: dict[str, uuid.UUID]
) -> None:
    repository = RecordRepository(pool)
    elsewhere, _ = await repository.create(RecordFields("another", "man", "tar", "an archive elsewhere", {}, None))
    assert await repository.forget(records["cpio"])
    assert await repository.update(records["gzip"], RecordFields(NS, "man", "gzip", "gzip, now rewritten", {}, None))
    async with pool.acquire() as conn:
        old_gzip_chunk = await conn.fetchval("SELECT surrogate FROM chunks WHERE record_id = $1", records["gzip"])
        # as the vector route would name them: a forgotten record, another namespace's, a stale chunk
        vector = [
            Candidate(records["cpio"], 1, 0.9, None),
            Candidate(elsewhere, 1, 0.8, None),
            Candidate(records["gzip"], 1, 0.7, int(old_gzip_chunk)),
            Candidate(records["mount"], 1, 0.6, None),
            Candidate(records["fstab"], 1, 0.5, None),
        ]
        answer = await full_text_and_rows(
            conn, Filters(NS, kinds=["man"]), "archive", 10, vector, loose=False, ranked_chunks=10
        )
    assert answer is not None
    found, rows = answer
    assert {c.id for c in found} == {records["tar"]}  # gzip's body no longer says archive, cpio is gone
    assert set(rows) == {records["tar"], records["gzip"], records["mount"]}  # fstab is of kind conf
    assert rows[records["gzip"]].revision == 2
    assert rows[records["gzip"]].chunk_text is None  # its named chunk is of the old revision: re-read it
    assert rows[records["mount"]].chunk_text is None  # no chunk named, not a full-text candidate
    assert rows[records["tar"]].chunk_text == BODIES["tar"]


async def test_a_long_records_chunk_is_the_one_ranking_best_for_the_query(pool: asyncpg.Pool) -> None:
    texts = ["The tool reads its options.", "Use --directory before unpacking the archive.", "Exit status is 0."]
    created, _ = await RecordRepository(pool).create(RecordFields(NS, "man", "tar", " ".join(texts), {}, None))
    async with pool.acquire() as conn:
        for no, text in enumerate(texts):
            await chunk(conn, created, 1, text, no)
        answer = await full_text_and_rows(conn, Filters(NS), "unpacking archive", 10, [], loose=False, ranked_chunks=1)
    assert answer is not None
    _, rows = answer
    assert rows[created].chunk_text == texts[1]


def test_answer_rows_cut_snippets_and_name_what_is_still_to_read() -> None:
    present, bare, gone, unseen = (uuid.uuid4() for _ in range(4))
    rows = {
        present: Row(present, "tar", "man", None, 1, "an archiving utility"),
        bare: Row(bare, "cpio", "man", None, 1, None),
    }
    answered, missing = answer_rows([present, bare, gone, unseen], rows, {present, bare, gone}, "archive", 30, None)
    assert answered[present]["snippet"] == "an <b>archiving</b> utility"
    assert missing == [bare, unseen]
