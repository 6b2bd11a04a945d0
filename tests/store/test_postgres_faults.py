"""The embedded PostgreSQL killed (SIGKILL of its postmaster) and frozen (SIGSTOP of every one of
its processes) under a client that writes and recalls: the daemon says it is not ready while
the store is gone, comes back by itself (the same daemon process, no restart), and every write it
acknowledged is there afterwards. The time to ready again is printed (`-s`) for
docs/RELIABILITY.md.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import Daemon, scratch_dir, sql
from tests.support.embedded_postgres import embedded_dsn, postmasters
from tests.support.embedding_service import EmbeddingServer

NS = "pg-faults"
FROZEN_S = 4.0
"""How long the server stays frozen: longer than the readiness check's own timeout."""


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    fake = EmbeddingServer(64)
    home = scratch_dir("recalld-pg-faults-")
    instance = Daemon(home, {**fake.env(), "RECALLD_STORE_HEALTH_TIMEOUT_S": "1"})
    instance.start(timeout=180)
    yield instance
    instance.stop()
    fake.close()
    assert not postmasters(instance.data_dir)
    shutil.rmtree(home, ignore_errors=True)


def server_processes(data_dir: Path) -> list[int]:
    """The postmaster and its children (backends, checkpointer, ...)."""
    (postmaster,) = (int(p) for p in postmasters(data_dir))
    children = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]) == postmaster:
                children.append(int(proc.name))
        except (OSError, ValueError, IndexError):
            continue
    return [postmaster, *children]


class Client(threading.Thread):
    """Writes and recalls without pause; counts what was acknowledged and what was refused."""

    def __init__(self, daemon: Daemon) -> None:
        super().__init__()
        self.daemon = daemon
        self.stop = threading.Event()
        self.acked: dict[str, str] = {}
        self.refused = 0
        self.recalls = 0
        self.unexpected: list[str] = []

    def run(self) -> None:
        transport = httpx.HTTPTransport(uds=str(self.daemon.socket))
        with httpx.Client(transport=transport, base_url="http://r", timeout=30) as client:
            while not self.stop.is_set():
                title = f"ledger entry {uuid.uuid4().hex}"
                record = {"namespace": NS, "kind": "doc", "title": title, "body": "balanced"}
                answer = client.post("/v1/records", json=record)
                if answer.status_code == 201:
                    self.acked[answer.json()["id"]] = title
                elif answer.status_code == 503:  # the store's outage, said as such
                    self.refused += 1
                else:
                    self.unexpected.append(f"create: {answer.status_code} {answer.text}")
                recall = client.post("/v1/recall", json={"namespace": NS, "query": "ledger"})
                if recall.status_code not in (200, 503):
                    self.unexpected.append(f"recall: {recall.status_code} {recall.text}")
                self.recalls += 1


def wait_until(daemon: Daemon, ready: bool, timeout: float = 90) -> float:
    """Seconds until /readyz says `ready` (200) or not (503)."""
    started = time.monotonic()
    while (daemon.call("GET", "/readyz")[0] == 200) != ready:
        assert time.monotonic() - started < timeout, daemon.log()
        time.sleep(0.05)  # polling for the condition above, not a barrier
    return time.monotonic() - started


@pytest.mark.parametrize("fault", ["sigkill", "sigstop"])
def test_the_store_goes_away_and_comes_back_without_a_restart(daemon: Daemon, fault: str) -> None:
    assert daemon.proc is not None
    pid = daemon.proc.pid
    client = Client(daemon)
    client.start()
    try:
        while len(client.acked) < 20:
            time.sleep(0.05)  # polling for some writes before the fault, not a barrier
        victims = server_processes(daemon.data_dir)
        faulted = time.monotonic()
        if fault == "sigkill":
            os.kill(victims[0], signal.SIGKILL)
        else:
            for victim in victims:
                os.kill(victim, signal.SIGSTOP)
        wait_until(daemon, ready=False)
        if fault == "sigstop":
            time.sleep(max(0.0, FROZEN_S - (time.monotonic() - faulted)))  # the outage's length, not a barrier
            for victim in victims:
                os.kill(victim, signal.SIGCONT)
        back = wait_until(daemon, ready=True)
        down_s = time.monotonic() - faulted
        acked_before = len(client.acked)
        while len(client.acked) < acked_before + 20:
            time.sleep(0.05)  # polling for writes after the recovery, not a barrier
    finally:
        client.stop.set()
        client.join()
    assert not client.unexpected, client.unexpected[:5]
    assert daemon.proc.poll() is None and daemon.proc.pid == pid, "the same daemon, never restarted"
    rows = {
        str(r["id"]): r["title"]
        for r in sql(embedded_dsn(daemon), "SELECT id, title FROM records WHERE namespace = $1", NS)
    }
    lost = {rid for rid, title in client.acked.items() if rows.get(rid) != title}
    assert not lost, f"{len(lost)} acknowledged writes lost"
    when = (
        f"{down_s:.1f} s after the kill"
        if fault == "sigkill"
        else f"{back:.1f} s after SIGCONT ({FROZEN_S:g} s frozen)"
    )
    print(
        f"\n{fault}: ready again {when}; {len(client.acked)} writes acknowledged, {client.refused} refused with 503, "
        f"{client.recalls} recalls; lost: none"
    )
