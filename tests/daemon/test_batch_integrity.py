"""`POST /v1/records:batch` says what the store holds: an item that fails, whatever the cause
(input PostgreSQL cannot index, the store's connection lost mid-batch), fails in its own slot
while the items around it are written and acknowledged; and concurrent upserts of the same
`source_path`s leave one live record per path."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from tests.support import Daemon, sql


def record(ns: str, title: str, body: str, **extra: Any) -> dict[str, Any]:
    return {"namespace": ns, "kind": "doc", "title": title, "body": body, **extra}


def stored(daemon: Daemon, ns: str) -> list[dict[str, Any]]:
    """Every live record of `ns`, page by page."""
    found: list[dict[str, Any]] = []
    after = ""
    while True:
        status, page = daemon.call("GET", f"/v1/records?namespace={ns}&limit=1000{after}")
        assert status == 200, page
        found += page["records"]
        if not page["next"]:
            return found
        after = f"&after={page['next']}"


def unindexable() -> str:
    """About 1.4 MB of distinct words: more than PostgreSQL's tsvector holds (1 MB)."""
    return " ".join(uuid.uuid4().hex[:12] for _ in range(110_000))


def test_an_item_that_cannot_be_indexed_fails_in_its_slot_and_the_rest_land(daemon: Daemon, ns: str) -> None:
    items = [
        record(ns, "before the big one", "first"),
        record(ns, "the big one", unindexable()),
        record(ns, "after the big one", "third"),
    ]
    status, answer = daemon.call("POST", "/v1/records:batch", {"records": items})
    assert status == 200, answer
    results = answer["results"]
    assert [(r["index"], r["status"], r["outcome"]) for r in results] == [
        (0, 201, "created"),
        (1, 413, "failed"),
        (2, 201, "created"),
    ]
    assert results[1]["error"]["code"] == "not_indexable", results[1]
    assert (answer["created"], answer["failed"]) == (2, 1)
    held = {r["title"]: r["id"] for r in stored(daemon, ns)}
    assert held == {"before the big one": results[0]["id"], "after the big one": results[2]["id"]}


def test_the_store_lost_mid_batch_fails_the_items_it_cut_and_the_rest_go_on(make_daemon: Any) -> None:
    """Every connection of the daemon's is ended by PostgreSQL again and again while a batch is
    written: the items caught say 503 in their slots, the later ones are still tried, and every
    item acknowledged is stored (an item answered 503 is not known to be written: its commit's
    answer may be what was lost)."""
    daemon = make_daemon(env={"RECALLD_EMBEDDING_PROVIDER": "none"})
    dsn = daemon.env["RECALLD_STORE_DSN"]
    ns = "cut-" + uuid.uuid4().hex[:8]
    items = [record(ns, f"ledger entry {i}", f"balanced {i} " * 200) for i in range(400)]
    answer: dict[str, Any] = {}

    def send() -> None:
        answer["status"], answer["body"] = daemon.call("POST", "/v1/records:batch", {"records": items})

    writer = threading.Thread(target=send)
    writer.start()
    cuts = 0
    deadline = time.monotonic() + 120
    while writer.is_alive():
        assert time.monotonic() < deadline, "the batch did not finish"
        written = sql(dsn, "SELECT count(*) AS n FROM records WHERE namespace = $1", ns)[0]["n"]
        if written >= 20:  # once the batch is well under way
            ended = sql(
                dsn,
                "SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
            )
            cuts += ended[0]["n"]
        time.sleep(0.05)  # polling the store's count, not a barrier
    writer.join()
    assert answer["status"] == 200, answer
    results = answer["body"]["results"]
    assert [r["index"] for r in results] == list(range(len(items)))
    assert {r["status"] for r in results} <= {201, 503}, {r["status"] for r in results}
    cut = [r["index"] for r in results if r["status"] == 503]
    assert cuts and cut, "the outage reached the batch"
    assert {r["error"]["code"] for r in results if r["status"] == 503} == {"store_unavailable"}
    assert any(r["status"] == 201 for r in results[cut[0] + 1 :]), "the items after the first cut were tried"
    acknowledged = {items[r["index"]]["title"]: r["id"] for r in results if r["status"] == 201}
    daemon.wait_ready()
    held = {r["title"]: r["id"] for r in stored(daemon, ns)}
    assert acknowledged.items() <= held.items(), "every acknowledged item is stored"
    assert set(held) - set(acknowledged) <= {items[i]["title"] for i in cut}, "nothing stored was refused"
