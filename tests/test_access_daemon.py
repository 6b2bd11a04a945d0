"""Peer credentials over the real socket: a client process running as another user gets what
`[access]` grants that user, and a 403 with a stable code for the rest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from conftest import Daemon, namespace

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching to another user needs root")

# Runs as the other user: one HTTP/1.1 request over the socket, prints the status and the body.
CLIENT = """
import json, socket, sys
path, method, target, body = sys.argv[1:5]
s = socket.socket(socket.AF_UNIX)
s.settimeout(30)
try:
    s.connect(path)
except OSError as e:
    print(json.dumps({"refused": e.errno})); sys.exit(0)
head = f"{method} {target} HTTP/1.1\\r\\nHost: recalld\\r\\nConnection: close\\r\\n"
if body:
    head += f"Content-Type: application/json\\r\\nContent-Length: {len(body.encode())}\\r\\n"
s.sendall((head + "\\r\\n" + body).encode())
data = b""
while chunk := s.recv(65536):
    data += chunk
status_line, _, rest = data.decode().partition("\\r\\n")
print(json.dumps({"status": int(status_line.split()[1]), "body": json.loads(rest.partition("\\r\\n\\r\\n")[2])}))
"""


def as_user(daemon: Daemon, uid: int, method: str, target: str, body: Any = None) -> dict[str, Any]:
    done = subprocess.run(
        [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            sys.executable,
            "-c",
            CLIENT,
            str(daemon.socket),
            method,
            target,
            json.dumps(body) if body is not None else "",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


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
