"""The disk full during a generation build: the build fails cleanly, the previous generation keeps
serving, /readyz says why (a warning: the route still answers), no partial directory is left
(the sweeper removes what a build leaves), and once there is room again a build succeeds.

The generations directory is a small tmpfs mounted by the test (it runs as root, as CI does), so
the disk is as full as a real one: writes fail with ENOSPC.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import Daemon, namespace
from tests.support.embedding_service import EmbeddingServer
from tests.support.waits import eventually, wait_for_generation

SMALL = "64k"  # the first generation (12 vectors, about 20 kB) fits; one of 72 (110 kB) does not


@pytest.fixture
def generations() -> Iterator[Path]:
    root = Path(subprocess.run(["mktemp", "-d"], capture_output=True, text=True, check=True).stdout.strip())
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SMALL},mode=0755", "tmpfs", str(root)], check=True)
    yield root
    subprocess.run(["umount", str(root)], check=True)
    shutil.rmtree(root, ignore_errors=True)


def put(daemon: Daemon, ns: str, count: int, start: int) -> None:
    for i in range(start, start + count):
        record = {"namespace": ns, "kind": "doc", "title": f"Shelf {i}", "body": f"Bolts and washers, bin {i}."}
        assert daemon.call("POST", "/v1/records", record)[0] == 201


def build(daemon: Daemon) -> dict[str, Any]:
    status, queued = daemon.call("POST", "/admin/generations/rebuild", {})
    assert status == 202, queued
    build_id = queued["build_id"]
    builds = eventually(
        lambda: {b["id"]: b for b in daemon.call("GET", "/v1/generations")[1]["builds"]},
        120,
        f"build {build_id} ended",
        accept=lambda builds: builds[build_id]["state"] in ("done", "failed", "skipped"),
    )
    return dict(builds[build_id])


def test_a_build_on_a_full_disk_fails_cleanly_and_the_old_generation_serves(
    generations: Path, make_daemon: Any
) -> None:  # `generations` first: it is unmounted after the daemon stops
    fake = EmbeddingServer(384)
    try:
        daemon: Daemon = make_daemon(
            env={
                **fake.env(),
                "RECALLD_INDEX_DIRECTORY": str(generations),
                "RECALLD_INDEX_COMPACT_SHARE": "10",  # builds only when asked
                "RECALLD_GC_INTERVAL_S": "0.5",
                "RECALLD_GC_TEMP_GRACE_S": "1",
            }
        )
        ns = namespace()
        put(daemon, ns, 12, 0)
        first = wait_for_generation(daemon, lambda c: c["count"] >= 12)["current"]
        put(daemon, ns, 60, 12)
        wait_for_generation(daemon)  # every vector stored and searchable (from the delta)

        failed = build(daemon)
        assert failed["state"] == "failed" and "No space left" in (failed.get("error") or ""), failed
        status, ready = daemon.call("GET", "/readyz")
        vector = ready["checks"]["vector"]
        assert status == 200 and vector["status"] == "warn", ready
        assert vector["reason"] == "vector_index_build_failed" and "No space left" in vector["detail"]["message"]
        status, answer = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": "bolts", "routes": ["vector"]})
        assert status == 200 and answer["generation"] == first["id"] and answer["results"], answer
        assert daemon.call("GET", "/v1/generations")[1]["current"]["id"] == first["id"]
        eventually(
            lambda: [p.name for p in generations.iterdir() if p.name != first["id"]],
            60,
            "the sweeper removing the partial directories",
            accept=lambda leftovers: not leftovers,
        )

        subprocess.run(["mount", "-o", "remount,size=4m", str(generations)], check=True)  # room again
        assert build(daemon)["state"] == "done"
        _, ready = daemon.call("GET", "/readyz")
        assert ready["checks"]["vector"]["status"] == "pass", ready
    finally:
        fake.close()
