"""The `recalld` command run as a person runs it: a process of its own, in the repository, its
output captured as text."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping

from tests.support import RECALLD, ROOT, Daemon


def recalld(
    daemon: Daemon | None,
    *args: str,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    timeout: float = 300,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`recalld ARGS`, talking to `daemon` (RECALLD_SOCKET names its socket) or, with None, to no
    daemon (no RECALLD_SOCKET in its environment). `env` adds to or overrides the test's own
    environment. With `check`, an exit status other than 0 fails the test (with the command's
    stderr); else the status is the caller's to check. `timeout` only bounds a hung command."""
    environment = {k: v for k, v in os.environ.items() if k != "RECALLD_SOCKET"}
    if daemon is not None:
        environment["RECALLD_SOCKET"] = str(daemon.socket)
    environment.update(env or {})
    done = subprocess.run(
        [*RECALLD, *args], capture_output=True, text=True, input=input, timeout=timeout, env=environment, cwd=ROOT
    )
    assert not check or done.returncode == 0, f"recalld {' '.join(args)} exited {done.returncode}: {done.stderr}"
    return done
