"""The embedding provider down, slow, or answering garbage during ingest: every write succeeds,
recall says out loud that the vector route is missing (and why) while full text answers, and once
the provider is well again the backlog is embedded and every record is found by meaning.

The index is not empty when the fault starts: a generation serves the first records, so the
vector route could answer but for the provider, and the reason it gives must be the provider's
(an empty index would degrade the route for "nothing indexed" whatever the provider did).

The provider is a real HTTP server on loopback (tests/support/embedding_service.py) whose faults the
test switches on and off; the daemon is a real `recalld serve`.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import Daemon, namespace
from tests.support.embedding_service import EmbeddingServer
from tests.support.waits import eventually, wait_for_generation

RECORDS = 8


def fault(fake: EmbeddingServer, kind: str, on: bool) -> None:
    if kind == "down":
        fake.down = on
    elif kind == "slow":
        fake.delay_s = 3.0 if on else 0.0  # beyond the recall's deadline and the provider timeout
    else:
        fake.corrupt = "" if on else None  # every vector one number short


FAULTS = ["down", "slow", "garbage"]
# The codes the vector route may give for each fault: the provider's own, or the breaker's once
# the failures opened it. Never "no verified generation" or "indexing": the index serves.
REASONS = {
    "down": {"provider_error", "circuit_open"},
    "slow": {"provider_timeout", "deadline_exceeded", "circuit_open"},
    "garbage": {"embedding_dimension_mismatch", "circuit_open"},
}


@pytest.mark.parametrize("kind", FAULTS)
def test_writes_succeed_recall_degrades_out_loud_and_the_backlog_is_embedded_after(make_daemon: Any, kind: str) -> None:
    fake = EmbeddingServer(64)
    try:
        daemon: Daemon = make_daemon(
            env={
                **fake.env(),
                "RECALLD_EMBEDDING_TIMEOUT_S": "1",
                "RECALLD_EMBEDDING_BREAKER_RESET_S": "1",
                "RECALLD_INDEX_POLL_S": "0.5",
            }
        )
        ns = namespace()
        ids = {}

        def write(i: int) -> None:
            title = f"Kiln firing schedule {i}"
            status, created = daemon.call(
                "POST", "/v1/records", {"namespace": ns, "kind": "doc", "title": title, "body": f"Fire at dawn, {i}."}
            )
            assert status == 201, created  # the canonical write never waits on the provider
            ids[created["id"]] = title

        for i in range(RECORDS):
            write(i)
        wait_for_generation(daemon, lambda current: current["count"] >= RECORDS)  # no recall: no cached query
        fault(fake, kind, True)
        for i in range(RECORDS, 2 * RECORDS):
            write(i)

        status, answer = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": "kiln", "deadline_ms": 1500})
        assert status == 200, answer
        assert [d["route"] for d in answer["degraded_routes"]] == ["vector"], answer
        assert answer["degraded_routes"][0]["reason"] in REASONS[kind], answer["degraded_routes"]
        assert {hit["id"] for hit in answer["results"]} <= set(ids) and answer["results"], "full text answers"
        generations = daemon.call("GET", "/v1/generations")[1]
        assert generations["pending"] >= RECORDS, "the backlog is waiting, not lost"

        fault(fake, kind, False)
        wait_for_generation(daemon, timeout=120)
        # the route's count of what it cannot find yet is kept for a second: it may lag the index
        eventually(
            lambda: daemon.call(
                "POST", "/v1/recall", {"namespace": ns, "query": "kiln", "routes": ["vector"], "k": 50}
            ),
            120,
            "every record found by meaning alone, the route whole",
            accept=lambda reply: (
                reply[0] == 200
                and {hit["id"] for hit in reply[1]["results"]} == set(ids)
                and not reply[1]["degraded_routes"]
            ),
            poll=0.3,
        )
    finally:
        fake.close()
