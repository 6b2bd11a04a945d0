"""`POST /v1/records:batch` on a real daemon: each item written on its own, a bad one in the
middle reported in its place while the good ones land (issue 22 item 3)."""

from __future__ import annotations

from typing import Any

from tests.support import Daemon


def record(ns: str, title: str, **extra: Any) -> dict[str, Any]:
    return {"namespace": ns, "kind": "doc", "title": title, "body": f"The body of {title}.", **extra}


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
