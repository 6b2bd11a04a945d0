"""A namespace of 1,000 records crowded by 20,000 in another still gets k results.

The crowd is embedded by a fast controlled provider on loopback (the real model would need
hours for that many chunks on 2 cores) and its records are written straight into PostgreSQL;
everything after that — chunking, embedding, storing, building, searching — is the daemon's.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import pytest

from recalld.actors.records import content_hash, normalise_title
from tests.support import Daemon
from tests.support.embedding_service import EmbeddingServer
from tests.support.waits import wait_for_generation

CROWD, TARGET, RULES = 20_000, 1_000, 20


def insert(dsn: str, rows: list[tuple[Any, ...]]) -> None:
    async def run() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.copy_records_to_table(
                "records",
                records=rows,
                columns=["id", "namespace", "kind", "title", "title_norm", "body", "attributes", "content_hash"],
            )
            await conn.execute("SELECT pg_notify('recalld_records', '')")
        finally:
            await conn.close()

    asyncio.run(run())


def row(namespace: str, kind: str, i: int) -> tuple[Any, ...]:
    title, body = f"{namespace} item {i}", f"Entry {i} of {namespace}."
    digest = content_hash(kind=kind, title=title, body=body, attributes={}, source_path=None)
    return (uuid.uuid4(), namespace, kind, title, normalise_title(title), body, "{}", digest)


@pytest.mark.slow
def test_a_small_namespace_crowded_by_a_large_one_still_fills_k(make_daemon: Any, fresh_dsn: str) -> None:
    fake = EmbeddingServer(dimension=16)
    try:
        env = {
            **fake.env(),
            "RECALLD_INDEX_INDEX_BATCH": "500",
            # A flat scan filtered to the small namespace, as this test was written for (`auto`
            # would build a graph for 21,000 vectors, and score the small namespace one by one).
            "RECALLD_INDEX_FACTORY": "Flat",
            "RECALLD_EMBEDDING_MAX_BATCH": "1000",
            "RECALLD_RECALL_MAX_K": "200",
        }
        daemon: Daemon = make_daemon(dsn=fresh_dsn, env=env)
        rows = [row("crowd", "doc", i) for i in range(CROWD)]
        rows += [row("small", "rule" if i < RULES else "doc", i) for i in range(TARGET)]
        insert(fresh_dsn, rows)
        wait_for_generation(daemon, lambda current: current["count"] >= CROWD + TARGET, timeout=600)
        for k in (10, 100):
            status, answer = daemon.call(
                "POST", "/v1/recall", {"namespace": "small", "query": "q", "routes": ["vector"], "k": k}
            )
            assert status == 200 and len(answer["results"]) == k, answer["degraded_routes"]
            assert all(hit["title"].startswith("small ") for hit in answer["results"])
        # a filter the index cannot apply: the vector route searches deeper until k are found
        status, answer = daemon.call(
            "POST", "/v1/recall", {"namespace": "small", "query": "q", "routes": ["vector"], "k": 10, "kinds": ["rule"]}
        )
        assert status == 200 and len(answer["results"]) == 10
        assert {hit["kind"] for hit in answer["results"]} == {"rule"}
    finally:
        fake.close()
