"""Recall while a namespace is still being indexed: the vector route answers,
says it is partial (`vector_indexing`, with the records pending), and full text's answer is not
crowded out. A real daemon, real PostgreSQL and FAISS; the provider is a slow embedding server
on loopback."""

from __future__ import annotations

from typing import Any

from tests.support import Daemon
from tests.support.embedding_service import EmbeddingServer
from tests.support.waits import eventually, wait_for_generation

SLOW_S = 2.0
"""Each provider call takes this long: the records created stay pending for seconds."""


def recall(daemon: Daemon, ns: str, query: str) -> dict[str, Any]:
    status, body = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": query, "deadline_ms": 30_000})
    assert status == 200, body
    return body


def indexing(answer: dict[str, Any]) -> list[dict[str, Any]]:
    return [d for d in answer["degraded_routes"] if d["reason"] == "vector_indexing"]


def test_recall_during_indexing_names_the_partial_vector_route(make_daemon: Any) -> None:
    fake = EmbeddingServer(dimension=16)
    try:
        daemon: Daemon = make_daemon(env=fake.env())
        ns = "indexing"
        status, _ = daemon.call("POST", "/v1/records", {"namespace": ns, "kind": "doc", "title": "seed", "body": "x"})
        assert status == 201
        wait_for_generation(daemon, lambda current: current["count"] >= 1)
        assert indexing(recall(daemon, ns, "seed")) == []  # caught up: nothing to say

        fake.delay_s = SLOW_S
        titles = [f"Pump maintenance note {i}" for i in range(12)]
        records = [{"namespace": ns, "kind": "doc", "title": t, "body": f"{t}: grease the bearings."} for t in titles]
        # One batch, and the recall straight after it: the write tells the vector route that its
        # count of what it cannot find yet (kept for a second) is out of date.
        status, written = daemon.call("POST", "/v1/records:batch", {"records": records})
        assert status == 200 and written["created"] == len(titles), written
        answer = recall(daemon, ns, "grease the bearings")
        [partial] = indexing(answer)
        assert partial["route"] == "vector" and 1 <= partial["pending"] <= len(titles), partial
        assert str(partial["pending"]) in partial["message"]
        # full text found them all, and the half-built vector route (which has only the seed)
        # did not push them out: the seed, found by the vector route alone, comes after them
        assert all("fts" in hit["routes"] for hit in answer["results"][:10]), answer["results"]

        fake.delay_s = 0.0
        # the daemon's count of what is still to index is at most 1 s old
        answer = eventually(
            lambda: recall(daemon, ns, "grease the bearings"),
            120,
            "the vector route no longer indexing",
            accept=lambda answer: not indexing(answer),
            poll=0.2,
        )
        assert any("vector" in hit["routes"] for hit in answer["results"])
    finally:
        fake.close()
