"""A PostgreSQL failover under a client that writes and recalls without pause. The daemon's DSN
names a primary and its streaming standby. The standby first falls behind (the primary's WAL
sender stopped, as over a network that stalls), then the primary is lost (stopped in immediate
mode, as a crash) and, once the daemon has answered writes with no primary, the standby is
promoted (`pg_ctl promote`).

The same daemon process goes on against the new primary: no 500 ever, writes answer 201 or 503
from the loss on and 201 again after the promotion, LISTEN is re-established, every record is
found by the vector route, and a backup (pg_dump) finds the new primary by the same DSN. With a
synchronous standby no acknowledged write is missing on the new primary; with asynchronous
replication those acknowledged while the standby fell behind are (the control that shows the
test sees a loss). The figures are printed (`-s`) for docs/RELIABILITY.md.
"""

from __future__ import annotations

import shutil
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.support import Daemon, scratch_dir, sql
from tests.support.replication import ReplicatedPair, Replication
from tests.support.waits import eventually, wait_for_generation

pytestmark = [pytest.mark.slow, pytest.mark.process, pytest.mark.pg]

NS = "failover"
SWITCH_S = 60.0
"""How long the switch may take, from the loss of the primary to writes acknowledged again: far
more than it takes (a few seconds), for a loaded machine."""
STALL_ACKS = 10
"""Writes acknowledged while the standby falls behind, under asynchronous replication."""
NO_PRIMARY_ANSWERS = 5
"""Creates (each with its recall) answered while there is no primary, before the promotion."""


class Client(threading.Thread):
    """Writes and recalls without pause; keeps every answer's status, and what was acknowledged."""

    def __init__(self, daemon: Daemon) -> None:
        super().__init__()
        self.daemon = daemon
        self.stop = threading.Event()
        self.acked: dict[str, str] = {}
        self.statuses: list[tuple[str, int]] = []
        self.refusals: Counter[str] = Counter()
        """The messages of the creates refused with 503 `store_unavailable`."""
        self.unexpected: list[str] = []

    def run(self) -> None:
        try:
            self._run()
        except httpx.HTTPError as error:  # the daemon went away or broke a connection off
            self.unexpected.append(f"{type(error).__name__}: {error}")

    def _run(self) -> None:
        transport = httpx.HTTPTransport(uds=str(self.daemon.socket))
        with httpx.Client(transport=transport, base_url="http://r", timeout=90) as client:
            while not self.stop.is_set():
                title = f"ledger entry {uuid.uuid4().hex}"
                record = {"namespace": NS, "kind": "doc", "title": title, "body": "balanced books"}
                answer = client.post("/v1/records", json=record)
                self.statuses.append(("create", answer.status_code))
                if answer.status_code == 201:
                    self.acked[answer.json()["id"]] = title
                elif answer.status_code == 503 and answer.json()["error"]["code"] == "store_unavailable":
                    self.refusals[answer.json()["error"]["message"]] += 1
                else:
                    self.unexpected.append(f"create: {answer.status_code} {answer.text}")
                recall = client.post("/v1/recall", json={"namespace": NS, "query": "ledger"})
                self.statuses.append(("recall", recall.status_code))
                if recall.status_code not in (200, 503):
                    self.unexpected.append(f"recall: {recall.status_code} {recall.text}")

    def acked_after(self, count: int, what: str) -> None:
        """Wait until `count` more writes than now are acknowledged."""
        target = len(self.acked) + count
        self.wait(lambda: len(self.acked) >= target, what)

    def answered_after(self, count: int, what: str) -> None:
        """Wait until `count` more requests than now are answered, whatever the answer."""
        target = len(self.statuses) + count
        self.wait(lambda: len(self.statuses) >= target, what)

    def wait(self, done: Callable[[], bool], what: str) -> None:
        """Until `done()`; failing at once on an answer the test does not expect."""
        eventually(lambda: done() or self.unexpected or not self.is_alive(), SWITCH_S, what)
        assert not self.unexpected, self.unexpected[:5]
        assert self.is_alive(), f"the client stopped: {what}"


@pytest.fixture
def make_pair() -> Iterator[Callable[[Replication], ReplicatedPair]]:
    """`make_pair(replication)`: a primary and its streaming standby, started."""
    made: list[ReplicatedPair] = []

    def make(replication: Replication) -> ReplicatedPair:
        made.append(ReplicatedPair(replication))
        return made[-1].start()

    yield make
    for pair in made:
        pair.stop()


@pytest.fixture
def start_daemon(fake: Any) -> Iterator[Any]:
    """`start_daemon(dsn)`: a daemon over `dsn`, embedding with the loopback service."""
    started: list[Daemon] = []

    def start(dsn: str) -> Daemon:
        env = {**fake.env(), "RECALLD_STORE_DSN": dsn, "RECALLD_STORE_HEALTH_TIMEOUT_S": "1"}
        daemon = Daemon(scratch_dir("recalld-failover-"), env)
        started.append(daemon)
        return daemon.start(timeout=120)

    yield start
    for daemon in started:
        daemon.stop()
        shutil.rmtree(daemon.home, ignore_errors=True)


def listening_backends(dsn: str) -> list[Any]:
    """The sessions of recalld's database on this server whose last statement was a LISTEN."""
    return sql(dsn, "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN %'")


def waiting_for_the_standby(dsn: str) -> int:
    """Sessions whose COMMIT waits for the synchronous standby's flush."""
    return int(sql(dsn, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")[0][0])


@pytest.mark.parametrize(
    ("replication", "attrs"),
    [
        # The documented setting: a synchronous standby, and a DSN that only takes a primary.
        ("sync", "read-write"),
        # The control: acknowledged writes the standby never received are lost (the test can see a
        # loss); and a DSN that lands on the standby before its promotion, whose writes meet a
        # read-only server (503, never 500).
        ("async", "any"),
    ],
)
def test_a_failover_needs_no_restart_and_loses_no_acknowledged_write_with_a_synchronous_standby(
    make_pair: Callable[[Replication], ReplicatedPair], start_daemon: Any, replication: Replication, attrs: str
) -> None:
    pair = make_pair(replication)
    daemon = start_daemon(pair.dsn(attrs))
    assert daemon.proc is not None
    pid = daemon.proc.pid
    eventually(lambda: listening_backends(pair.primary.dsn), SWITCH_S, "LISTEN on the primary before the switch")
    client = Client(daemon)
    client.start()
    try:
        client.acked_after(20, "writes acknowledged before the standby falls behind")
        streamed = set(client.acked)
        pair.wait_streamed()
        pair.stall_stream()
        stalled = len(client.acked)
        # Writes go on while the standby receives nothing: acknowledged at once (asynchronous),
        # or each COMMIT waiting for the standby's flush (synchronous), whichever comes
        client.wait(
            lambda: len(client.acked) >= stalled + STALL_ACKS or waiting_for_the_standby(pair.primary.dsn) > 0,
            "writes acknowledged, or waiting for the standby, while it falls behind",
        )
        acked_in_stall = len(client.acked) - stalled
        before = len(client.statuses)
        lost_at = time.monotonic()
        pair.lose_primary()
        # No primary for a while, as while a failover manager makes up its mind: the daemon must
        # meet it (a standby that refuses writes, or no server at all) before the promotion.
        client.answered_after(2 * NO_PRIMARY_ANSWERS, "answers while there is no primary")
        pair.promote_standby()
        promoted_s = time.monotonic() - lost_at
        client.acked_after(20, "writes acknowledged again after the promotion")
        resumed_s = time.monotonic() - lost_at
        during = Counter(status for route, status in client.statuses[before:] if route == "create")
        eventually(lambda: listening_backends(pair.standby.dsn), SWITCH_S, "LISTEN on the new primary")
        daemon.wait_ready(SWITCH_S)
        ready_s = time.monotonic() - lost_at
    finally:
        client.stop.set()
        client.join()
    assert not client.unexpected, client.unexpected[:5]
    # every record, those written in the switch too, found by the vector route: the index
    # manager was woken (by the new LISTEN's catch-up, or its poll) whatever was notified
    wait_for_generation(daemon, timeout=SWITCH_S)
    assert daemon.proc.poll() is None and daemon.proc.pid == pid, "the same daemon, never restarted"
    assert set(during) <= {201, 503} and during[503] > 0, during
    if attrs == "any":  # the pool met the standby before its promotion, and said so
        assert any("refuses writes" in message for message in client.refusals), client.refusals
    # pg_dump, as the backup route runs it, finds the new primary by the same DSN
    status, body = daemon.call("GET", "/admin/backup")
    assert status == 200, body
    stored = {str(r["id"]): r["title"] for r in sql(pair.standby.dsn, "SELECT id, title FROM records")}
    lost = {rid for rid, title in client.acked.items() if stored.get(rid) != title}
    assert not lost & streamed, "a write the standby had received is missing after its promotion"
    if replication == "sync":
        assert not lost, f"{len(lost)} of {len(client.acked)} acknowledged writes missing on the new primary"
    else:
        assert lost, "acknowledged while the standby received nothing: these writes were on the old primary alone"
    print(
        f"\nfailover ({replication} standby, target_session_attrs={attrs}): {acked_in_stall} writes acknowledged "
        f"while the standby received nothing; promoted {promoted_s:.1f} s after the loss, writes acknowledged again "
        f"{resumed_s:.1f} s after it, ready {ready_s:.1f} s after it; creates from the loss on {dict(during)} "
        f"({dict(client.refusals)}); {len(client.acked)} acknowledged, lost {len(lost)}"
    )
