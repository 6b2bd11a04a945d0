"""The full-text route's statement: evidence levels order the candidates (the query word for
word, then every term, then, only when asked, any term), with or without the any-term step."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from recalld.actors.recall.query import Evidence, evidence_of
from recalld.store.records import RecordFields, RecordRepository
from recalld.store.search import Filters, full_text

pytestmark = pytest.mark.anyio


NS = "keys"
# The all-terms record repeats the words, so by ts_rank alone it would come first.
RECORDS = {
    "phrase": ("How we rotate signing keys", "Every quarter we rotate signing keys."),
    "all terms": ("Keys", "Signing keys, signing keys: operators rotate them, and rotate them again."),
    "some terms": ("Signing", "Only the signing service lives here."),
    "none": ("Lunch", "The canteen opens at noon."),
}


@pytest.fixture
async def ids(pool: asyncpg.Pool) -> dict[uuid.UUID, str]:
    repository = RecordRepository(pool)
    found = {}
    for name, (title, body) in RECORDS.items():
        record_id, _ = await repository.create(RecordFields(NS, "doc", title, body, {}, None))
        found[record_id] = name
    # the same words in another namespace never come back
    await repository.create(
        RecordFields("other", "doc", "How we rotate signing keys", "Rotate signing keys.", {}, None)
    )
    return found


async def search(pool: asyncpg.Pool, query: str, *, loose: bool) -> list[tuple[uuid.UUID, Evidence]]:
    async with pool.acquire() as conn:
        candidates = await full_text(conn, Filters(NS), query, 30, loose=loose)
    return [(c.id, evidence_of(c.score)) for c in candidates]


async def test_the_phrase_comes_first_then_every_term_then_any_term(
    pool: asyncpg.Pool, ids: dict[uuid.UUID, str]
) -> None:
    found = await search(pool, "rotate signing keys", loose=True)
    assert [(ids[i], e) for i, e in found] == [
        ("phrase", Evidence.EXACT),
        ("all terms", Evidence.ALL_TERMS),
        ("some terms", Evidence.SOME_TERMS),
    ]


async def test_without_the_any_term_step_only_records_holding_every_term_come(
    pool: asyncpg.Pool, ids: dict[uuid.UUID, str]
) -> None:
    found = await search(pool, "rotate signing keys", loose=False)
    assert [(ids[i], e) for i, e in found] == [("phrase", Evidence.EXACT), ("all terms", Evidence.ALL_TERMS)]


async def test_identifier_queries_are_exact_evidence_without_a_phrase(
    pool: asyncpg.Pool, ids: dict[uuid.UUID, str]
) -> None:
    found = await search(pool, "signing --rotate", loose=False)
    assert {ids[i] for i, _ in found} == {"phrase", "all terms"}
    assert {e for _, e in found} == {Evidence.EXACT}
