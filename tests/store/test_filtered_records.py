"""The records kind and attribute filters let through, for the vector route's exact scoring:
live ones of the namespace only, and None once more than the limit pass."""

from __future__ import annotations

import asyncpg
import pytest

from recalld.store.records import RecordFields, RecordRepository
from recalld.store.search import Filters, filtered_records

pytestmark = pytest.mark.anyio


async def test_filters_pick_live_records_of_the_namespace_up_to_the_limit(pool: asyncpg.Pool) -> None:
    repository = RecordRepository(pool)
    rules = []
    for i in range(4):
        record_id, _ = await repository.create(RecordFields("ns", "rule", f"Rule {i}", "b", {"team": "ops"}, None))
        rules.append(record_id)
    doc, _ = await repository.create(RecordFields("ns", "doc", "Doc", "b", {"team": "ops"}, None))
    await repository.create(RecordFields("other", "rule", "Rule 0", "b", {"team": "ops"}, None))
    assert await repository.forget(rules[3])

    async def allowed(filters: Filters, limit: int = 10) -> set[object] | None:
        async with pool.acquire() as conn:
            found = await filtered_records(conn, filters, limit)
        return None if found is None else set(found)

    assert await allowed(Filters("ns", kinds=["rule"])) == set(rules[:3])
    assert await allowed(Filters("ns", attributes={"team": "ops"})) == {*rules[:3], doc}
    assert await allowed(Filters("ns", kinds=["doc"], attributes={"team": "ops"})) == {doc}
    assert await allowed(Filters("ns", kinds=["memo"])) == await allowed(Filters("ns", kinds=[])) == set()
    assert await allowed(Filters("ns", attributes={})) == {*rules[:3], doc}  # as the other routes read {}
    assert await allowed(Filters("ns", kinds=["rule"]), limit=3) == set(rules[:3])
    assert await allowed(Filters("ns", kinds=["rule"]), limit=2) is None
