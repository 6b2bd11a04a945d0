"""Record lifecycle over the socket: create, read, revise, forget; exact duplicates; tombstones."""

from __future__ import annotations

import threading
import uuid

from tests.support import Daemon, sql


def record(ns: str, title: str = "Rotate the signing keys every ninety days", **extra: object) -> dict[str, object]:
    return {
        "namespace": ns,
        "kind": "rule",
        "title": title,
        "body": "Operators rotate the JWT signing keys quarterly; the old key stays valid for one day.",
        "attributes": {"team": "security", "severity": 2},
        **extra,
    }


def test_create_read_update_forget(daemon: Daemon, ns: str) -> None:
    status, created = daemon.call("POST", "/v1/records", record(ns, source_path="/srv/keys.md"))
    assert status == 201
    assert created["revision"] == 1
    # The first record of its namespace and kind: nothing to compare with (tests/services/test_duplicates_daemon.py)
    assert created["duplicate_check"] == {"status": "clear", "threshold": 0.501, "compared": 0, "of": 0}
    rid = created["id"]

    status, got = daemon.call("GET", f"/v1/records/{rid}")
    assert status == 200
    assert got["title"] == "Rotate the signing keys every ninety days"
    assert got["attributes"] == {"team": "security", "severity": 2}
    assert got["namespace"] == ns and got["kind"] == "rule" and got["revision"] == 1

    changed = record(ns, body="Keys now live in the vault.")
    changed.pop("namespace")
    status, updated = daemon.call("PUT", f"/v1/records/{rid}", {**changed, "namespace": ns})
    assert (status, updated["revision"], updated["changed"]) == (200, 2, True)
    status, again = daemon.call("PUT", f"/v1/records/{rid}", {**changed, "namespace": ns})
    assert (status, again["revision"], again["changed"]) == (200, 2, False), "an unchanged write is a no-op"
    assert daemon.call("GET", f"/v1/records/{rid}")[1]["body"] == "Keys now live in the vault."

    status, forgotten = daemon.call("DELETE", f"/v1/records/{rid}")
    assert (status, forgotten) == (200, {"id": rid, "deleted": True})
    assert daemon.call("GET", f"/v1/records/{rid}")[0] == 404
    # the tombstone keeps the id, not what the record said
    [row] = sql(
        daemon.env["RECALLD_STORE_DSN"],
        "SELECT title, body, attributes::text AS attributes, source_path, length(search) AS words, deleted_at IS NOT NULL AS gone "
        "FROM records WHERE id = $1",
        uuid.UUID(rid),
    )
    assert dict(row) == {"title": "", "body": "", "attributes": "{}", "source_path": None, "words": 0, "gone": True}
    assert daemon.call("DELETE", f"/v1/records/{rid}")[0] == 404
    status, body = daemon.call("PUT", f"/v1/records/{rid}", record(ns))
    assert status == 404 and body["error"]["code"] == "not_found", "a forgotten record cannot be revived by PUT"


def test_exact_duplicate_is_rejected_with_existing_id(daemon: Daemon, ns: str) -> None:
    status, created = daemon.call("POST", "/v1/records", record(ns))
    assert status == 201
    for variant in (
        "  rotate the SIGNING keys, every ninety days! ",
        "ROTATE-THE-SIGNING-KEYS every ninety days",
    ):
        status, body = daemon.call("POST", "/v1/records", record(ns, title=variant))
        assert status == 409
        assert body["error"]["code"] == "exact_duplicate"
        assert body["existing_id"] == created["id"]
    # same title in another kind or namespace is not a duplicate
    assert daemon.call("POST", "/v1/records", record(ns, kind="story"))[0] == 201
    assert daemon.call("POST", "/v1/records", record(ns + "-other"))[0] == 201
    # an update onto another record's title is a duplicate too, and changes nothing
    status, other = daemon.call("POST", "/v1/records", record(ns, title="Another rule"))
    status, body = daemon.call(
        "PUT", f"/v1/records/{other['id']}", record(ns, title="rotate the signing keys every ninety days")
    )
    assert status == 409 and body["existing_id"] == created["id"]
    assert daemon.call("GET", f"/v1/records/{other['id']}")[1]["title"] == "Another rule"


def test_title_is_free_again_after_forget(daemon: Daemon, ns: str) -> None:
    first = daemon.call("POST", "/v1/records", record(ns))[1]["id"]
    assert daemon.call("DELETE", f"/v1/records/{first}")[0] == 200
    status, second = daemon.call("POST", "/v1/records", record(ns))
    assert status == 201 and second["id"] != first


def test_client_chosen_id_and_id_conflict(daemon: Daemon, ns: str) -> None:
    chosen = str(uuid.uuid4())
    status, created = daemon.call("POST", "/v1/records", record(ns, id=chosen))
    assert (status, created["id"]) == (201, chosen)
    status, body = daemon.call("POST", "/v1/records", record(ns, title="Something else", id=chosen))
    assert status == 409 and body["error"]["code"] == "id_conflict"
    daemon.call("DELETE", f"/v1/records/{chosen}")
    status, body = daemon.call("POST", "/v1/records", record(ns, title="Third", id=chosen))
    assert status == 409, "the id of a forgotten record is never reused"


def test_namespace_cannot_change_on_update(daemon: Daemon, ns: str) -> None:
    rid = daemon.call("POST", "/v1/records", record(ns))[1]["id"]
    status, body = daemon.call("PUT", f"/v1/records/{rid}", record(ns + "-elsewhere"))
    assert status == 400 and body["error"]["code"] == "invalid_value"
    assert daemon.call("GET", f"/v1/records/{rid}")[1]["namespace"] == ns


def test_concurrent_creates_of_one_title_admit_exactly_one(daemon: Daemon, ns: str) -> None:
    statuses: list[int] = []

    def create(i: int) -> None:
        client = Daemon(daemon.home)  # one client per thread: an httpx client is not shared across threads
        statuses.append(client.call("POST", "/v1/records", record(ns, title=f"Same title{'!' * i}"))[0])
        client.http.close()

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(statuses) == [201] + [409] * 7


def test_list_by_source_path(daemon: Daemon, ns: str) -> None:
    daemon.call("POST", "/v1/records", record(ns, source_path="/docs/keys.md"))
    daemon.call("POST", "/v1/records", record(ns, title="Other", source_path="/docs/other.md"))
    status, body = daemon.call("GET", f"/v1/records?namespace={ns}&source_path=/docs/keys.md")
    assert status == 200 and [r["source_path"] for r in body["records"]] == ["/docs/keys.md"]
    status, body = daemon.call("GET", f"/v1/records?namespace={ns}&limit=1")
    assert status == 200 and len(body["records"]) == 1 and body["next"]
    status, rest = daemon.call("GET", f"/v1/records?namespace={ns}&limit=1&after={body['next']}")
    assert len(rest["records"]) == 1 and rest["records"][0]["id"] != body["records"][0]["id"]


def test_unknown_and_malformed_ids(daemon: Daemon) -> None:
    status, body = daemon.call("GET", f"/v1/records/{uuid.uuid4()}")
    assert status == 404 and body["error"]["code"] == "not_found"
    status, body = daemon.call("GET", "/v1/records/not-a-uuid")
    assert status == 400 and body["error"]["code"] == "invalid_id"
