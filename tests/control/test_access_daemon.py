"""Peer credentials over the real socket: a client process running as another user gets what
`[access]` grants that user, and a 403 with a stable code for the rest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from typing import Any

import pytest

from tests.support import ROOT, Daemon, namespace
from tests.support.other_users import as_user
from tests.support.waits import wait_for_generation

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching to another user needs root")


def test_each_user_gets_what_access_grants_it(make_daemon: Any) -> None:
    mine, other = namespace(), namespace()
    daemon: Daemon = make_daemon(
        env={
            "RECALLD_SERVER_SOCKET_MODE": str(0o666),  # let the access layer, not the file mode, decide
            "RECALLD_ACCESS_READERS": f'{{ "65534" = ["{mine}"] }}',
            "RECALLD_ACCESS_WRITERS": f'{{ "65533" = ["{mine}"] }}',
        }
    )
    for ns in (mine, other):
        status, _ = daemon.call("POST", "/v1/records", {"namespace": ns, "kind": "doc", "title": "Keys", "body": "x"})
        assert status == 201  # the test runs as root: an administrator

    def recall(uid: int, ns: str) -> dict[str, Any]:
        return as_user(daemon, uid, "POST", "/v1/recall", {"namespace": ns, "query": "keys", "routes": ["fts"]})

    # a reader reads its namespace, and nothing else
    answer = recall(65534, mine)
    assert answer["status"] == 200 and [r["title"] for r in answer["body"]["results"]] == ["Keys"]
    for refused in (
        recall(65534, other),
        as_user(daemon, 65534, "POST", "/v1/records", {"namespace": mine, "kind": "doc", "title": "T", "body": "b"}),
        as_user(daemon, 65534, "POST", "/admin/generations/rebuild"),
    ):
        assert refused["status"] == 403 and refused["body"]["error"]["code"] == "forbidden", refused

    # a writer writes and reads its namespace
    created = as_user(
        daemon, 65533, "POST", "/v1/records", {"namespace": mine, "kind": "doc", "title": "W", "body": "b"}
    )
    assert created["status"] == 201, created
    assert recall(65533, mine)["status"] == 200

    # a user with no right at all is refused before its request is read
    stranger = recall(65532, mine)
    assert stranger["status"] == 403 and stranger["body"]["error"]["code"] == "forbidden", stranger


def _readers_and_writers(make_daemon: Any, mine: str) -> Daemon:
    """65534 reads `mine`, 65533 writes it; neither has any right elsewhere."""
    daemon: Daemon = make_daemon(
        env={
            "RECALLD_SERVER_SOCKET_MODE": str(0o666),
            "RECALLD_ACCESS_READERS": f'{{ "65534" = ["{mine}"] }}',
            "RECALLD_ACCESS_WRITERS": f'{{ "65533" = ["{mine}"] }}',
        }
    )
    return daemon


def _create(daemon: Daemon, ns: str, title: str) -> str:
    status, created = daemon.call("POST", "/v1/records", {"namespace": ns, "kind": "doc", "title": title, "body": "x"})
    assert status == 201, created
    return str(created["id"])


def test_an_id_beyond_the_callers_rights_answers_as_one_that_does_not_exist(make_daemon: Any) -> None:
    """Probing with ids must not tell a user whether a record of another namespace exists, nor
    that namespace's name: a hidden id gets the very answer an unknown id gets."""
    mine, hidden = namespace(), namespace()
    daemon = _readers_and_writers(make_daemon, mine)
    own, secret = _create(daemon, mine, "Keys"), _create(daemon, hidden, "Keys")
    unknown = str(uuid.uuid4())
    answers: list[dict[str, Any]] = []

    def twins(uid: int, method: str, target: str, body: Any = None) -> dict[str, Any]:
        """The answer for the hidden id, once checked to equal the one for an unknown id."""
        seen = as_user(daemon, uid, method, target.format(secret), body)
        absent = as_user(daemon, uid, method, target.format(unknown), body)
        assert json.dumps(seen).replace(secret, "ID") == json.dumps(absent).replace(unknown, "ID"), (seen, absent)
        answers.append(seen)
        return seen

    edit = {"namespace": mine, "kind": "doc", "title": "Moved", "body": "y"}
    for uid, method, body in (
        (65534, "GET", None),
        (65534, "DELETE", None),
        (65533, "GET", None),
        (65533, "DELETE", None),
        (65533, "PUT", edit),  # a namespace it may write, for an id that lives elsewhere
    ):
        answer = twins(uid, method, "/v1/records/{}", body)
        assert answer["status"] == 404 and answer["body"]["error"]["code"] == "not_found", answer
    # a write to a namespace the caller may not write, named by the caller: refused alike
    for uid, body in ((65534, edit), (65533, {**edit, "namespace": hidden})):
        assert twins(uid, "PUT", "/v1/records/{}", body)["status"] == 403

    # a search of the hidden namespace is as unknown as a search that never was
    status, found = daemon.call("POST", "/v1/recall", {"namespace": hidden, "query": "keys", "routes": ["fts"]})
    assert status == 200 and [r["id"] for r in found["results"]] == [secret]
    seen = as_user(
        daemon, 65534, "POST", "/v1/recall/feedback", {"search_id": found["search_id"], "id": secret, "useful": True}
    )
    absent = as_user(daemon, 65534, "POST", "/v1/recall/feedback", {"search_id": unknown, "id": secret, "useful": True})
    assert seen["status"] == 404 and json.dumps(seen).replace(found["search_id"], "ID") == json.dumps(absent).replace(
        unknown, "ID"
    ), (seen, absent)
    answers.append(seen)

    # a chosen id that is taken is taken wherever it lives: the answer names no namespace
    taken = {
        record_id: as_user(daemon, 65533, "POST", "/v1/records", {**edit, "title": f"T {record_id}", "id": record_id})
        for record_id in (secret, own)
    }
    assert json.dumps(taken[secret]).replace(secret, "ID") == json.dumps(taken[own]).replace(own, "ID"), taken
    assert taken[secret]["status"] == 409 and taken[secret]["body"]["error"]["code"] == "id_conflict"
    answers.append(taken[secret])

    assert all(hidden not in json.dumps(answer) for answer in answers), answers
    # what the caller may read still shows, and a record it may read but not write is a 403
    assert as_user(daemon, 65534, "GET", f"/v1/records/{own}")["status"] == 200
    assert as_user(daemon, 65534, "DELETE", f"/v1/records/{own}")["status"] == 403
    assert daemon.call("GET", f"/v1/records/{secret}")[0] == 200, "nothing was forgotten or moved"


def test_generations_show_a_user_no_paths_and_an_administrator_everything(make_daemon: Any) -> None:
    mine, other = namespace(), namespace()
    daemon = _readers_and_writers(make_daemon, mine)
    _create(daemon, mine, "Keys")
    for title in ("Locks", "Doors", "Hinges"):
        _create(daemon, other, title)
    full = wait_for_generation(daemon, lambda current: current["count"] == 4)
    assert full["current"]["directory"].startswith(str(daemon.data_dir)), "an administrator sees everything"

    answer = as_user(daemon, 65534, "GET", "/v1/generations")
    assert answer["status"] == 200, answer
    seen = answer["body"]
    # The v1 wire fields, counted over the namespaces this user may read: one vector of `mine`,
    # not the four of both (how much another namespace holds is not this user's to know)
    assert seen["pending"] == 0 and seen["current"]["id"] == full["current"]["id"]
    assert {key: seen["current"][key] for key in ("space", "built_at")} == {
        key: full["current"][key] for key in ("space", "built_at")
    }
    assert seen["current"]["count"] == 1, seen["current"]
    # the history of builds (whose counts span every namespace) is for administrators
    assert [row["id"] for row in seen["generations"]] == [full["current"]["id"]], seen["generations"]
    assert seen["builds"] and all("total" not in build and "done" not in build for build in seen["builds"])
    assert str(daemon.home) not in json.dumps(seen), "no path of the daemon's files"
    assert "index" not in seen, "the daemon's internals are for administrators"

    # and `recalld generations` still prints it for that user
    done = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            sys.executable,
            "-m",
            "recalld",
            "--socket",
            str(daemon.socket),
            "generations",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0 and f"* {full['current']['id']}" in done.stdout, (done.stdout, done.stderr)
