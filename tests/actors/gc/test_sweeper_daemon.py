"""The GC sweeper in a running daemon: old generations, crashed build directories and expired
telemetry go; the current generation, the rollback target inside its window and fresh build
directories stay. And a restart announces its generation load to systemd."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

from tests.support import Daemon, scratch_dir, sql
from tests.support.waits import eventually


def current_id(daemon: Daemon) -> str | None:
    current = daemon.call("GET", "/v1/generations")[1]["current"]
    return current["id"] if current else None


def rebuild(daemon: Daemon) -> str:
    before = current_id(daemon)
    assert daemon.call("POST", "/admin/generations/rebuild", {})[0] == 202
    now = eventually(lambda: current_id(daemon), 60, "a new current generation", accept=lambda now: now != before)
    assert now is not None
    return now


def test_sweeper_removes_only_what_nothing_references(make_daemon: Any, fresh_dsn: str) -> None:
    root = scratch_dir("recalld-test-gc-")
    env = {
        "RECALLD_INDEX_DIRECTORY": str(root),
        "RECALLD_GC_INTERVAL_S": "0.5",
        "RECALLD_GC_ROLLBACK_WINDOW_S": "8",
        "RECALLD_GC_TEMP_GRACE_S": "60",
        "RECALLD_GC_SEARCH_RETENTION_DAYS": "1",
    }
    daemon: Daemon = make_daemon(dsn=fresh_dsn, env=env)
    for i in range(3):
        daemon.call("POST", "/v1/records", {"namespace": "gc", "kind": "doc", "title": f"Sweep {i}", "body": "dust"})
    first = eventually(lambda: current_id(daemon), 60, "a first generation")
    second = rebuild(daemon)
    third = rebuild(daemon)
    # a crashed build long ago, a build directory touched just now, a stray unknown generation
    stale_tmp, fresh_tmp, stray = (
        root / ".tmp-gcrashed-1",
        root / ".tmp-gbuilding-2",
        root / "g19990101T000000-deadbeef",
    )
    for path in (stale_tmp, fresh_tmp, stray):
        path.mkdir()
        (path / "index.faiss").write_bytes(b"partial")
    old = time.time() - 3600 * 2
    for path in (stale_tmp, stray):
        os.utime(path, (old, old))

    def searches() -> int:
        return int(sql(fresh_dsn, "SELECT count(*) AS n FROM searches WHERE namespace = 'gc'")[0]["n"])

    # telemetry: one search two days old (aged once written: rows are written in batches), one fresh
    daemon.call("POST", "/v1/recall", {"namespace": "gc", "query": "dust", "routes": ["fts"]})
    eventually(searches, 10, "the search row written", accept=lambda n: n == 1)
    sql(fresh_dsn, "UPDATE searches SET created_at = now() - interval '2 days' WHERE namespace = 'gc'")
    daemon.call("POST", "/v1/recall", {"namespace": "gc", "query": "dust", "routes": ["fts"]})

    # inside the rollback window nothing of the generations goes, but the crash leftovers do
    eventually(
        lambda: (sorted(p.name for p in root.iterdir()), searches()),
        10,
        "the crash leftovers and the old search row swept",
        accept=lambda _: not stale_tmp.exists() and not stray.exists() and searches() == 1,
    )
    assert fresh_tmp.exists(), "a build directory in use (recently touched) is never removed"
    assert all((root / g).is_dir() for g in (first, second, third)), "the window keeps earlier generations"

    # past the window: the earlier generations go (row first, then the directory); the current stays
    eventually(
        lambda: sorted(p.name for p in root.iterdir()),
        40,
        "the earlier generations' directories swept",
        accept=lambda names: first not in names and second not in names,
    )
    states = {r["id"]: r["state"] for r in sql(fresh_dsn, "SELECT id, state FROM generations")}
    assert states == {first: "deleted", second: "deleted", third: "verified"}
    assert (root / third).is_dir() and current_id(daemon) == third
    status, answer = daemon.call("POST", "/v1/recall", {"namespace": "gc", "query": "dust", "routes": ["vector"]})
    assert status == 200 and len(answer["results"]) == 3 and answer["generation"] == third
    metrics = daemon.http.get("/metrics").text
    assert 'recalld_sweeper_deletions_total{what="generation"} 2.0' in metrics


def test_restart_announces_the_generation_load_to_systemd(make_daemon: Any, fresh_dsn: str) -> None:
    root = scratch_dir("recalld-test-extend-")
    env = {"RECALLD_INDEX_DIRECTORY": str(root)}
    daemon: Daemon = make_daemon(dsn=fresh_dsn, env=env)
    daemon.call("POST", "/v1/records", {"namespace": "x", "kind": "doc", "title": "One", "body": "two"})
    eventually(lambda: current_id(daemon), 60, "a first generation")
    assert daemon.stop() == 0
    home = scratch_dir("recalld-test-notify-")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(Path(home) / "notify.sock"))
    listener.settimeout(60)
    try:
        make_daemon(dsn=fresh_dsn, env={**env, "NOTIFY_SOCKET": str(Path(home) / "notify.sock")}, wait_ready=False)
        seen: list[str] = []
        while not any("READY=1" in d for d in seen):
            seen.append(listener.recv(4096).decode())
        extend = [d for d in seen if d.startswith("EXTEND_TIMEOUT_USEC=")]
        assert extend and int(extend[0].split("=")[1]) >= 30_000_000, seen
        assert seen.index(extend[0]) < len(seen) - 1, "the extension comes before READY=1"
    finally:
        listener.close()


def test_retention_runs_without_an_embedding_provider(make_daemon: Any, fresh_dsn: str) -> None:
    """`[embedding] provider = "none"` turns the vector features off, not the housekeeping:
    expired search telemetry and finished disputes are still deleted."""
    env = {
        "RECALLD_EMBEDDING_PROVIDER": "none",
        "RECALLD_ASSIGNMENTS_INTERVAL_S": "0.2",
        "RECALLD_GC_INTERVAL_S": "0.5",
        "RECALLD_GC_SEARCH_RETENTION_DAYS": "1",
        "RECALLD_GC_DISPUTE_RETENTION_DAYS": "1",
    }
    daemon: Daemon = make_daemon(dsn=fresh_dsn, env=env)
    ties = [
        {"entity": "kettle", "characteristic": "wattage", "supplier": s, "value": v, "trust": 0.5}
        for s, v in (("acme", "1500 W"), ("globex", "1800 W"))
    ]
    assert daemon.call("POST", "/v1/observations", {"observations": ties})[0] == 202
    daemon.call("POST", "/v1/records", {"namespace": "ret", "kind": "doc", "title": "Kept", "body": "dust"})
    assert daemon.call("POST", "/v1/recall", {"namespace": "ret", "query": "dust"})[0] == 200

    def rows() -> tuple[int, list[dict[str, Any]]]:
        searches = int(sql(fresh_dsn, "SELECT count(*) AS n FROM searches WHERE namespace = 'ret'")[0]["n"])
        return searches, sql(fresh_dsn, "SELECT id, state FROM disputes WHERE entity = 'kettle'")

    found = eventually(rows, 30, "the search row and the dispute", accept=lambda seen: seen[0] == 1 and seen[1])
    dispute = found[1][0]["id"]
    assert daemon.call("DELETE", f"/admin/disputes/{dispute}")[0] == 200  # superseded: finished
    sql(fresh_dsn, "UPDATE searches SET created_at = now() - interval '2 days' WHERE namespace = 'ret'")
    sql(fresh_dsn, "UPDATE disputes SET updated_at = now() - interval '2 days' WHERE entity = 'kettle'")

    eventually(rows, 30, "the expired rows deleted", accept=lambda seen: seen == (0, []))
    assert daemon.call("GET", "/v1/records?namespace=ret")[1]["records"], "retention deletes telemetry, not records"
