"""A fleet for a bench: members started from this tree as docs/OPERATIONS.md ("Running a fleet")
sets one up. The first member runs on the embedded defaults (its own PostgreSQL in its data
directory); each further one has a data directory of its own and that PostgreSQL's DSN, and
shares nothing else. Also what a member reports of its own copy of the current generation, and
a wait until every member has taken in every stored vector."""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.lib.corpus import NAMESPACE
from bench.lib.daemon import embedded_dsn, start_fresh, stop_daemon
from bench.lib.report import progress
from recalld.client import Client
from recalld.store.embedded import EmbeddedPostgres

POLL_S = 0.05
"""How often `serving_own_copy` asks a member (polling it, not a barrier)."""
SETTLE_POLL_S = 0.2
"""How often `wait_all_caught_up` asks every member: its requests cost the PostgreSQL too."""


class Fleet:
    """The members started so far (`daemons`, and a client of each in `clients`, the first
    member's first). `stop` stops them all, and the first member's PostgreSQL, which a member
    SIGKILLed leaves running."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.daemons: list[subprocess.Popen[bytes]] = []
        self.clients: list[Client] = []

    @property
    def pgdata(self) -> Path:
        """The data directory of the fleet's PostgreSQL (what `bench.lib.cpu` reads)."""
        return EmbeddedPostgres(self.work / "m0" / "data").pgdata

    def start(self) -> Client:
        """Start the next member and return its client once it answers a full-text recall (its
        vector route may still be building its copy: `serving_own_copy`)."""
        number = len(self.daemons)
        env = {"RECALLD_STORE_DSN": embedded_dsn(self.work / "m0" / "data")} if number else {}
        daemon, socket = start_fresh(self.work / f"m{number}", NAMESPACE, env=env)
        self.daemons.append(daemon)
        self.clients.append(Client(socket, timeout=120))
        return self.clients[-1]

    def write(self, records: list[dict[str, str]], kind: str = "man") -> None:
        """`records` (title, body, source_path) written through the first member, 200 a batch."""
        for start in range(0, len(records), 200):
            self.clients[0].write_records(
                [{"namespace": NAMESPACE, "kind": kind, **r} for r in records[start : start + 200]]
            )

    def stop(self) -> None:
        for client in self.clients:
            client.close()
        for daemon in reversed(self.daemons):
            try:
                stop_daemon(daemon)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        if self.daemons:
            EmbeddedPostgres(self.work / "m0" / "data").stop()


@contextmanager
def fleet() -> Iterator[Fleet]:
    """A fleet on a fresh work directory, every member and the PostgreSQL stopped on the way out,
    whatever happened; the directory is removed after a run that ended well, and kept (with the
    members' logs) after one that failed."""
    work = Path(tempfile.mkdtemp(prefix="recalld-fleet-"))
    work.chmod(0o755)  # the embedded PostgreSQL's account must reach the first member's data directory
    members = Fleet(work)
    try:
        yield members
    except BaseException:
        progress(f"the members' data directories and logs are kept in {work}")
        raise
    finally:
        members.stop()
    shutil.rmtree(work)


def serving_own_copy(client: Client, timeout: float = 600.0) -> tuple[float, int]:
    """Seconds this member took to build its copy of the current generation (from its own
    report), once it serves that copy with nothing pending; and the vectors the copy holds."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        answer = client.request("GET", "/v1/generations")
        current, copy = answer["current"], answer["index"]["copy"]
        if current is not None and answer["serving"]["generation"] == current["id"] and answer["pending"] == 0:
            assert copy is not None and copy["state"] == "done", copy
            took = dt.datetime.fromisoformat(copy["finished_at"]) - dt.datetime.fromisoformat(copy["started_at"])
            return took.total_seconds(), int(copy["count"])
        time.sleep(POLL_S)
    raise SystemExit(f"a member did not serve the current generation within {timeout:.0f} s")


def up_to_date(answer: dict[str, Any]) -> bool:
    """A member's /v1/generations answer says: nothing left to embed, and every stored vector
    taken in, on the current generation, with no build queued or running."""
    current, serving, lag = answer["current"], answer["serving"], answer["lag"]
    building = any(build["state"] in ("queued", "running") for build in answer["builds"])
    return (
        answer["pending"] == 0
        and current is not None
        and serving["generation"] == current["id"]
        and not lag["behind"]
        and not lag["vectors"]
        and not building
    )


def wait_all_caught_up(clients: list[Client], *, settle_s: float = 0.0, timeout: float = 300.0) -> int:
    """Until every member is `up_to_date` in one pass over them all, and has stayed so for
    `settle_s` (the builder starts an automatic build only once the writes have been quiet for
    `[index] quiet_s`, at its next step); the generation requests it took, each a few
    statements for the PostgreSQL."""
    started, asked, since = time.monotonic(), 0, None
    while True:
        answers = [client.request("GET", "/v1/generations") for client in clients]
        asked += len(answers)
        now = time.monotonic()
        if not all(up_to_date(answer) for answer in answers):
            since = None
        elif since is None:
            since = now
        if since is not None and now - since >= settle_s:
            return asked
        if now - started > timeout:
            raise SystemExit(f"the members did not catch up within {timeout:.0f} s")
        time.sleep(SETTLE_POLL_S)
