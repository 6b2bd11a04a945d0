"""SIGKILL of the daemon's process group at random moments of ingest, and during generation builds
seen running in `/v1/generations`: after every restart each write the API acknowledged is there
with its content, nothing unacknowledged is half there, a forgotten record is never read or
recalled, the daemon is ready on the last verified generation, and one embedded PostgreSQL runs
for the data directory (none after the last stop).

The daemon runs with its own embedded server and a real loopback embedding server (fast and
deterministic, so that the rounds fit CI); its process group is killed, as `systemctl kill -s
KILL` or the OOM killer would. The moments are drawn from a seeded generator (FAULT_SEED),
`FAULT_ROUNDS` kills of each kind (15 by default: 30 in all). Run with `-s` for the figures
(docs/RELIABILITY.md).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest

from tests.support import Daemon, scratch_dir, sql
from tests.support.embedded_postgres import embedded_dsn, postmasters
from tests.support.embedding_service import EmbeddingServer
from tests.support.waits import eventually

ROUNDS = int(os.environ.get("FAULT_ROUNDS", "15"))
SEED = int(os.environ.get("FAULT_SEED", "23"))
WRITES_PER_ROUND = 10
"""Acknowledged creates each ingest round waits for before its kill: the kills then always fall
among writes, and a slow machine cannot leave the test with too few to prove anything."""
NS = "faults"
WORDS = ["ledger", "refund", "rotation", "backup", "invoice", "quota", "alert", "login", "shipping", "search"]


@dataclass
class Ledger:
    """What the client was told: acknowledged records (title -> body), forgotten ids, every title
    sent, and the records whose forget got no answer (the kill came first: forgotten or not)."""

    acked: dict[str, tuple[str, str]] = field(default_factory=dict)
    forgotten: dict[str, str] = field(default_factory=dict)
    forgetting: dict[str, tuple[str, str]] = field(default_factory=dict)
    sent: dict[str, str] = field(default_factory=dict)
    created: int = 0
    """Creates acknowledged so far, forgotten ones included."""
    lock: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture(scope="module")
def provider() -> Iterator[EmbeddingServer]:
    fake = EmbeddingServer(384)
    yield fake
    fake.close()


@pytest.fixture
def daemon(provider: EmbeddingServer) -> Iterator[Daemon]:
    home = scratch_dir("recalld-faults-")
    env = {**provider.env(), "RECALLD_INDEX_FACTORY": "HNSW32", "RECALLD_INDEX_COMPACT_SHARE": "10"}
    instance = Daemon(home, env)
    yield instance
    instance.stop()
    assert not postmasters(instance.data_dir), "an embedded PostgreSQL outlived the daemon"
    shutil.rmtree(home, ignore_errors=True)


def start(daemon: Daemon) -> None:
    daemon.start(timeout=180, start_new_session=True)  # its own process group, killed whole


def kill(daemon: Daemon) -> None:
    assert daemon.proc is not None
    os.killpg(daemon.proc.pid, signal.SIGKILL)
    daemon.proc.wait()
    daemon.stop()  # closes the client; the process is gone


def write(daemon: Daemon, ledger: Ledger, rng: random.Random, stop: threading.Event, tag: str) -> None:
    """Creates, with a forget now and then, until stopped or the daemon is gone."""
    client = httpx.Client(transport=httpx.HTTPTransport(uds=str(daemon.socket)), base_url="http://r", timeout=10)
    i = 0
    try:
        while not stop.is_set():
            title = f"{WORDS[i % 10]} procedure {tag}-{i} {uuid.uuid4().hex[:6]}"
            body = " ".join(rng.choice(WORDS) for _ in range(60))
            with ledger.lock:
                ledger.sent[title] = body
            answer = client.post("/v1/records", json={"namespace": NS, "kind": "doc", "title": title, "body": body})
            if answer.status_code == 201:
                with ledger.lock:
                    ledger.acked[answer.json()["id"]] = (title, body)
                    ledger.created += 1
            if i % 7 == 3 and ledger.acked:
                with ledger.lock:  # out of `acked` until answered: a kill leaves it in `forgetting`
                    victim = rng.choice(sorted(ledger.acked))
                    ledger.forgetting[victim] = ledger.acked.pop(victim)
                status = client.delete(f"/v1/records/{victim}").status_code
                with ledger.lock:
                    content = ledger.forgetting.pop(victim)
                    if status == 200:
                        ledger.forgotten[victim] = content[0]
                    else:
                        ledger.acked[victim] = content
            i += 1
    except httpx.TransportError:
        pass  # killed under it: whatever was in flight is unacknowledged
    finally:
        client.close()


def check(daemon: Daemon, ledger: Ledger, where: str) -> None:
    rows = {str(r["id"]): r for r in sql(embedded_dsn(daemon), "SELECT id, title, body, deleted_at FROM records")}
    for rid, (title, body) in ledger.acked.items():
        row = rows.get(rid)
        assert row is not None and (row["title"], row["body"]) == (title, body), f"{where}: acknowledged {rid} lost"
    for rid, row in rows.items():
        if row["deleted_at"] is None:
            assert ledger.sent.get(row["title"]) == row["body"], f"{where}: {rid} is half there"
    for rid, (title, body) in ledger.forgetting.items():  # either forgotten or whole
        row = rows.get(rid)
        assert row is not None, f"{where}: acknowledged {rid} lost"
        if row["deleted_at"] is None:
            assert (row["title"], row["body"]) == (title, body), f"{where}: {rid}, its forget unanswered, changed"
    for rid in ledger.forgotten:
        assert rows[rid]["deleted_at"] is not None, f"{where}: forgotten {rid} is back"
        assert daemon.call("GET", f"/v1/records/{rid}")[0] == 404
    for rid, title in list(ledger.forgotten.items())[-5:]:
        status, answer = daemon.call("POST", "/v1/recall", {"namespace": NS, "query": title, "k": 50})
        assert status == 200 and rid not in {hit["id"] for hit in answer["results"]}, f"{where}: {rid} recalled"
    assert len(postmasters(daemon.data_dir)) == 1, f"{where}: {postmasters(daemon.data_dir)}"
    pointer = sql(embedded_dsn(daemon), "SELECT current FROM generation_pointer")[0]["current"]
    current = daemon.call("GET", "/v1/generations")[1]["current"]
    assert (current or {}).get("id") == pointer, f"{where}: not serving the pointer's generation"


@pytest.mark.slow
def test_sigkill_during_ingest_and_builds_loses_no_acknowledged_write(daemon: Daemon) -> None:
    rng = random.Random(SEED)
    ledger = Ledger()
    start(daemon)
    kills = {"ingest": 0, "build": 0}
    missed_builds = 0
    while kills["ingest"] < ROUNDS or kills["build"] < ROUNDS:
        stop = threading.Event()
        writer = threading.Thread(target=write, args=(daemon, ledger, rng, stop, f"r{sum(kills.values())}"))
        writer.start()
        if kills["ingest"] < ROUNDS:
            # enough acknowledged writes in every round, however slow the machine (a condition)
            floor = ledger.created + WRITES_PER_ROUND
            eventually(
                lambda: ledger.created,
                120,
                f"{WRITES_PER_ROUND} more writes acknowledged",
                accept=lambda created, floor=floor: created >= floor,
                poll=0.01,
            )
            time.sleep(rng.uniform(0.05, 0.8))  # a random moment of the ingest, not a barrier
            kind = "ingest"
        else:
            status, build = daemon.call("POST", "/admin/generations/rebuild", {})
            assert status == 202, build
            running = False
            while not running:  # kill only once the build is seen running
                builds = {b["id"]: b for b in daemon.call("GET", "/v1/generations")[1]["builds"]}
                state = builds[build["build_id"]]["state"]
                running = state == "running"
                if state in ("done", "failed", "skipped"):
                    break
                time.sleep(0.005)  # polling for the condition above, not a barrier
            if not running:
                missed_builds += 1
                assert missed_builds < 3 * ROUNDS, "builds end before they are seen running"
                stop.set()
                writer.join()
                continue
            kind = "build"
        kill(daemon)
        kills[kind] += 1
        stop.set()
        writer.join()
        start(daemon)
        check(daemon, ledger, f"after {kind} kill {kills[kind]}")
    assert ledger.created >= WRITES_PER_ROUND * ROUNDS and ledger.forgotten, (ledger.created, len(ledger.forgotten))
    print(
        f"\nsigkill: {kills['ingest']} kills during ingest, {kills['build']} during builds seen running "
        f"({missed_builds} builds ended before seen), {len(ledger.sent)} creates sent, "
        f"{len(ledger.acked) + len(ledger.forgotten)} acknowledged, {len(ledger.forgotten)} forgotten; lost: none"
    )
