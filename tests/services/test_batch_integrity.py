"""`POST /v1/records:batch` says what the store holds: an item that fails, whatever the cause
(input PostgreSQL cannot index, the store's connection lost mid-batch), fails in its own slot
while the items around it are written and acknowledged; and concurrent upserts of the same
`source_path`s leave one live record per path."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import httpx

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


# -- upserts of the same source_path at once


def upsert_at_once(daemon: Daemon, batches: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each batch as `POST /v1/records:batch` with `upsert`, all sent together from threads of
    their own (each its own connection); their answers, in order."""
    answers: list[Any] = [None] * len(batches)
    start = threading.Barrier(len(batches))

    def send(at: int) -> None:
        transport = httpx.HTTPTransport(uds=str(daemon.socket))
        with httpx.Client(transport=transport, base_url="http://recalld", timeout=120) as client:
            start.wait(timeout=60)
            answers[at] = client.post("/v1/records:batch", json={"records": batches[at], "upsert": True})

    threads = [threading.Thread(target=send, args=(at,)) for at in range(len(batches))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for answer in answers:
        assert answer is not None and answer.status_code == 200, answer and answer.text
    return [answer.json() for answer in answers]


def pages(ns: str, body: str) -> list[dict[str, Any]]:
    return [
        record(ns, f"Page {i} of the handbook", f"{body} {i}", source_path=f"/handbook/page-{i}.md") for i in range(30)
    ]


def test_concurrent_upserts_of_the_same_paths_leave_one_record_per_path(daemon: Daemon, ns: str) -> None:
    """Eight batches at once, each upserting the same 30 paths: 30 live records, each written
    once and found unchanged by the others (never refused as its own exact duplicate); the
    same again with new text: each updated once, still 30, and recall finds one copy each."""
    answers = upsert_at_once(daemon, [pages(ns, "handbook text") for _ in range(8)])
    outcomes = [result["outcome"] for answer in answers for result in answer["results"]]
    assert set(outcomes) <= {"created", "updated", "unchanged"}, [
        result for answer in answers for result in answer["results"] if result["outcome"] == "failed"
    ]
    assert outcomes.count("created") == 30 and outcomes.count("unchanged") == 7 * 30, outcomes
    held = stored(daemon, ns)
    assert sorted(r["source_path"] for r in held) == sorted(f"/handbook/page-{i}.md" for i in range(30))
    ids = {r["source_path"]: r["id"] for r in held}
    for answer in answers:
        assert {result["id"] for result in answer["results"]} == set(ids.values()), "every item names the one record"

    answers = upsert_at_once(daemon, [pages(ns, "revised handbook text") for _ in range(8)])
    outcomes = [result["outcome"] for answer in answers for result in answer["results"]]
    assert outcomes.count("updated") == 30 and outcomes.count("unchanged") == 7 * 30, outcomes
    held = stored(daemon, ns)
    assert {r["source_path"]: r["id"] for r in held} == ids
    assert {(r["revision"], r["body"].rsplit(" ", 1)[0]) for r in held} == {(2, "revised handbook text")}
    status, found = daemon.call(
        "POST", "/v1/recall", {"namespace": ns, "query": "handbook", "k": 100, "routes": ["fts"]}
    )
    assert status == 200, found
    recalled = [hit["source_path"] for hit in found["results"]]
    assert sorted(recalled) == sorted(ids), "one copy of each path, the current one"


def test_concurrent_upserts_of_different_text_revise_the_one_record(daemon: Daemon, ns: str) -> None:
    """Eight writers at once, each with its own text for the same 30 paths: still one record per
    path, written once and revised by each later writer, and recall finds that one copy."""
    writers = [
        [
            record(ns, f"Page {i}, as writer {w} has it", f"writer {w} text {i}", source_path=f"/pages/{i}.md")
            for i in range(30)
        ]
        for w in range(8)
    ]
    answers = upsert_at_once(daemon, writers)
    outcomes = [result["outcome"] for answer in answers for result in answer["results"]]
    assert outcomes.count("created") == 30 and outcomes.count("updated") == 7 * 30, outcomes
    held = stored(daemon, ns)
    assert sorted(r["source_path"] for r in held) == sorted(f"/pages/{i}.md" for i in range(30))
    assert {r["revision"] for r in held} == {8}, "each writer's text was a revision of the one record"
    status, found = daemon.call(
        "POST", "/v1/recall", {"namespace": ns, "query": "writer text", "k": 100, "routes": ["fts"]}
    )
    assert status == 200, found
    assert sorted(hit["source_path"] for hit in found["results"]) == sorted(r["source_path"] for r in held)


def test_a_second_record_of_a_path_is_refused_naming_the_first(daemon: Daemon, ns: str) -> None:
    """Without `upsert`, a record whose path a live record of the namespace has is a 409
    `source_path_taken` naming that record, whether created alone, in a batch, or moved there."""
    status, first = daemon.call("POST", "/v1/records", record(ns, "Guide", "the guide", source_path="/docs/guide.md"))
    assert status == 201, first
    refused = daemon.call("POST", "/v1/records", record(ns, "Guide, again", "again", source_path="/docs/guide.md"))
    assert refused[0] == 409 and refused[1]["error"]["code"] == "source_path_taken", refused
    assert refused[1]["existing_id"] == first["id"]
    item = record(ns, "Guide 3", "x", source_path="/docs/guide.md")
    status, batch = daemon.call("POST", "/v1/records:batch", {"records": [item]})
    assert status == 200 and batch["results"][0]["error"]["code"] == "source_path_taken", batch
    assert batch["results"][0]["existing_id"] == first["id"]
    status, other = daemon.call("POST", "/v1/records", record(ns, "Notes", "the notes", source_path="/docs/notes.md"))
    assert status == 201, other
    moved = daemon.call(
        "PUT", f"/v1/records/{other['id']}", record(ns, "Notes", "the notes", source_path="/docs/guide.md")
    )
    assert moved[0] == 409 and moved[1]["error"]["code"] == "source_path_taken", moved
    assert [r["id"] for r in stored(daemon, ns) if r["source_path"] == "/docs/guide.md"] == [first["id"]]
