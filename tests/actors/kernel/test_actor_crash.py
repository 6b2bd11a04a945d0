"""An actor that crashes again and again is restarted within the supervisor's intensity (5 in
30 s), and past it the daemon exits non-zero for systemd to restart it whole: never a silent
zombie that answers /livez while doing nothing.

The crashing actor is the embedded PostgreSQL's keeper, made to fail as an operator's machine
would make it: the server is killed, and its data directory is unreadable, so each start fails.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator

import httpx
import pytest

from tests.support import Daemon, scratch_dir
from tests.support.embedded_postgres import postmasters
from tests.support.embedding_service import EmbeddingServer
from tests.support.waits import eventually


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    fake = EmbeddingServer(64)
    home = scratch_dir("recalld-crash-")
    instance = Daemon(home, fake.env())
    instance.start(timeout=180)
    yield instance
    instance.stop()
    fake.close()
    shutil.rmtree(home, ignore_errors=True)


def test_an_actor_failing_past_its_restart_intensity_ends_the_daemon_non_zero(daemon: Daemon) -> None:
    assert daemon.proc is not None
    pgdata = daemon.data_dir / "pg"
    (postmaster,) = (int(p) for p in postmasters(daemon.data_dir))
    pgdata.chmod(0)  # a start can no longer read its cluster
    try:
        os.kill(postmaster, signal.SIGKILL)
        said: set[int] = set()
        proc = daemon.proc

        def exit_code() -> int | None:
            try:
                said.add(daemon.call("GET", "/readyz")[0])
            except httpx.TransportError:
                pass  # it has just exited
            return proc.poll()

        eventually(
            exit_code,
            120,
            "the daemon exiting, not lingering with an actor that cannot run",
            accept=lambda code: code is not None,
            poll=0.2,
        )
    finally:
        pgdata.chmod(0o700)
    assert daemon.proc.returncode not in (0, None), daemon.log()
    assert 503 in said, "until it exited it said it was not ready"
    log = daemon.log_path.read_text(errors="replace")
    assert log.count("starting it again") >= 5, "restarted within its intensity first"
    assert not postmasters(daemon.data_dir), "no server left behind"
