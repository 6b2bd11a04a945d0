"""`POST /v1/records:batch` on a real daemon: each item written on its own, a bad one in the
middle reported in its place while the good ones land."""

from __future__ import annotations

from typing import Any

from tests.support import Daemon
from tests.support.duplicates import usage_rows, wait_comparable
from tests.support.embedding_service import EmbeddingServer


def record(ns: str, title: str, **extra: Any) -> dict[str, Any]:
    return {"namespace": ns, "kind": "doc", "title": title, "body": f"The body of {title}.", **extra}


def story(ns: str, title: str, **extra: Any) -> dict[str, Any]:
    """A record whose title is checked for duplicates (`doc`, what `recalld ingest` writes, is
    not by default: `[duplicates] unchecked_kinds`)."""
    return record(ns, title, kind="story", **extra)


def test_a_bad_item_in_the_middle_is_reported_and_the_good_ones_land(daemon: Daemon, ns: str) -> None:
    items = [
        record(ns, "First"),
        record(ns, "Second"),
        {"namespace": ns, "kind": "doc", "title": "No body"},  # not a record
        record(ns, "First"),  # the same title as the first: an exact duplicate
        record(ns, "x" * 5000),  # over [records] max_title_chars
        record(ns, "Third"),
    ]
    status, answer = daemon.call("POST", "/v1/records:batch", {"records": items})
    assert status == 200, answer
    results = answer["results"]
    assert [r["index"] for r in results] == list(range(6))
    assert [r["status"] for r in results] == [201, 201, 400, 409, 400, 201]
    assert [r["outcome"] for r in results] == ["created", "created", "failed", "failed", "failed", "created"]
    assert (answer["created"], answer["failed"]) == (3, 3)
    assert results[2]["error"]["code"] == "invalid_request" and "body" in results[2]["error"]["message"]
    assert results[3]["error"]["code"] == "exact_duplicate" and results[3]["existing_id"] == results[0]["id"]
    assert results[4]["error"]["code"] == "invalid_value"
    assert all(r["revision"] == 1 and r["duplicate_check"]["status"] for r in results if r["status"] == 201)
    status, listed = daemon.call("GET", f"/v1/records?namespace={ns}")
    assert status == 200
    assert sorted(r["title"] for r in listed["records"]) == ["First", "Second", "Third"]  # nothing half written


def test_upsert_revises_the_record_of_the_same_source_path(daemon: Daemon, ns: str) -> None:
    first = [record(ns, "Guide", source_path="/docs/guide.md"), record(ns, "Notes", source_path="/docs/notes.md")]
    status, answer = daemon.call("POST", "/v1/records:batch", {"records": first, "upsert": True})
    assert status == 200 and answer["created"] == 2
    again = [
        record(ns, "Guide", source_path="/docs/guide.md", body="A new body."),
        record(ns, "Notes", source_path="/docs/notes.md"),
        record(ns, "Extra", source_path="/docs/extra.md"),
    ]
    status, answer = daemon.call("POST", "/v1/records:batch", {"records": again, "upsert": True})
    assert status == 200, answer
    assert [r["outcome"] for r in answer["results"]] == ["updated", "unchanged", "created"]
    assert answer["results"][0]["id"] == answer["results"][0]["id"] and answer["results"][0]["revision"] == 2
    assert (answer["created"], answer["updated"], answer["unchanged"]) == (1, 1, 1)


def test_what_is_not_a_batch_is_refused_whole(daemon: Daemon, ns: str) -> None:
    status, answer = daemon.call("POST", "/v1/records:batch", {"items": []})
    assert status == 400 and answer["error"]["code"] == "invalid_request"
    status, answer = daemon.call("POST", "/v1/records:batch", {"records": [{}] * 1001})
    assert status == 413 and "max_batch" in answer["error"]["message"]
    status, listed = daemon.call("GET", f"/v1/records?namespace={ns}")
    assert listed["records"] == []


# -- the duplicate checks of a batch (docs/DUPLICATES.md): one embedding call and one comparison for all


def test_a_batch_checks_its_titles_with_one_embedding_call(make_daemon: Any, fake: EmbeddingServer) -> None:
    daemon = make_daemon(env=fake.env())
    status, _ = daemon.call("POST", "/v1/records", record("one-call", "an existing story", kind="story"))
    assert status == 201
    wait_comparable(daemon, "one-call", 1)
    before = usage_rows(daemon, "dedupe", "one-call")
    items = [record("one-call", f"a batch story number {i}", kind="story") for i in range(20)]
    items.insert(5, record("one-call", "an existing story", kind="story"))  # refused: no check
    status, answer = daemon.call("POST", "/v1/records:batch", {"records": items})
    assert status == 200 and answer["created"] == 20 and answer["failed"] == 1, answer
    assert usage_rows(daemon, "dedupe", "one-call") - before == 1
    checks = [r.get("duplicate_check") for r in answer["results"]]
    assert checks[5] is None
    # each item compared with the record before the batch and the batch's earlier items only
    written = [c for c in checks if c is not None]
    assert [(c["status"], c["compared"], c["of"]) for c in written] == [("clear", i + 1, i + 1) for i in range(20)]


def test_two_near_duplicates_in_one_batch_warn(daemon: Daemon, ns: str) -> None:
    status, existing = daemon.call("POST", "/v1/records", story(ns, "Cannot upload files larger than 10 MB"))
    assert status == 201
    wait_comparable(daemon, ns, 1)
    items = [
        story(ns, "Export monthly sales report to CSV"),
        story(ns, "Archive closed support tickets after a year"),
        story(ns, "Download the sales report for each month as a CSV file"),
        story(ns, "File upload fails for attachments over 10MB"),
    ]
    status, answer = daemon.call("POST", "/v1/records:batch", {"records": items})
    assert status == 200 and answer["created"] == 4, answer
    results = answer["results"]
    checks = [r["duplicate_check"] for r in results]
    assert checks[0]["status"] == "clear" and checks[0]["of"] == checks[0]["compared"] == 1, checks[0]
    assert checks[1]["status"] == "clear" and checks[1]["of"] == 2
    assert checks[2]["status"] == "warned" and checks[2]["of"] == checks[2]["compared"] == 3, checks[2]
    assert [s["id"] for s in checks[2]["similar"]] == [results[0]["id"]]
    assert [s["id"] for s in checks[3]["similar"]] == [existing["id"]], checks[3]
    # the batch's own titles were stored: a later single check compares with all of them
    later = daemon.call(
        "POST", "/v1/duplicates/check", {"namespace": ns, "kind": "story", "title": "Sales report as CSV"}
    )
    assert later[1]["compared"] == later[1]["of"] == 5


def test_the_time_cap_is_the_whole_batch_s(make_daemon: Any, fake: EmbeddingServer) -> None:
    daemon = make_daemon(env={**fake.env(), "RECALLD_DUPLICATES_TIME_CAP_S": "0.5"})
    status, _ = daemon.call("POST", "/v1/records", story("capped", "an existing story"))
    assert status == 201
    wait_comparable(daemon, "capped", 1)
    fake.delay_s = 3.0
    items = [story("capped", f"a story checked by a slow provider {i}") for i in range(5)]
    status, answer = daemon.call("POST", "/v1/records:batch", {"records": items})
    assert status == 200 and answer["created"] == 5, answer
    assert {(r["duplicate_check"]["status"], r["duplicate_check"]["reason"]) for r in answer["results"]} == {
        ("skipped", "time_cap_exceeded")
    }


def test_each_namespace_and_kind_of_a_batch_is_checked_on_its_own(daemon: Daemon, ns: str) -> None:
    other = f"{ns}-other"
    items = [
        story(ns, "Export monthly sales report to CSV"),
        story(other, "Export monthly sales report to CSV"),
        record(ns, "Download the sales report for each month as a CSV file", kind="rule"),
        story(other, "Download the sales report for each month as a CSV file"),
        story(ns, "Download the sales report for each month as a CSV file"),
    ]
    status, answer = daemon.call("POST", "/v1/records:batch", {"records": items})
    assert status == 200 and answer["created"] == 5, answer
    results = answer["results"]
    checks = [r["duplicate_check"] for r in results]
    # the rule has nothing of its kind before it; the others each have their own namespace's
    assert [(c["status"], c["compared"], c["of"]) for c in checks] == [
        ("clear", 0, 0),
        ("clear", 0, 0),
        ("clear", 0, 0),
        ("warned", 1, 1),
        ("warned", 1, 1),
    ], checks
    assert [s["id"] for s in checks[3]["similar"]] == [results[1]["id"]]
    assert [s["id"] for s in checks[4]["similar"]] == [results[0]["id"]]
    assert (usage_rows(daemon, "dedupe", ns), usage_rows(daemon, "dedupe", other)) == (1, 1)
