"""Requests over the daemon's socket from a process of another user (the daemon reads the peer's
credentials): the suite runs as root and drops to the uid with `setpriv`."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from tests.support import Daemon

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
