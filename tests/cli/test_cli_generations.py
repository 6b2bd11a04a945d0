"""`recalld generations -n NAMESPACE`: the records still pending for the vector route, counted in
one namespace only, so a user following their own upload is not shown another's.
A real daemon; its embedding provider, on loopback, is down, so what is written stays pending."""

from __future__ import annotations

import json
from typing import Any

from tests.support import Daemon
from tests.support.cli import recalld
from tests.support.embedding_service import EmbeddingServer
from tests.support.waits import wait_for_generation


def test_generations_counts_one_namespaces_pending(make_daemon: Any) -> None:
    fake = EmbeddingServer(dimension=16)
    try:
        daemon: Daemon = make_daemon(env=fake.env())
        status, _ = daemon.call(
            "POST", "/v1/records", {"namespace": "quiet", "kind": "doc", "title": "seed", "body": "x"}
        )
        assert status == 201
        wait_for_generation(daemon, lambda current: current["count"] >= 1)

        fake.down = True  # nothing written from here on reaches the vector route
        for i in range(3):
            body = {"namespace": "busy", "kind": "doc", "title": f"Pump note {i}", "body": f"Grease bearing {i}."}
            status, answer = daemon.call("POST", "/v1/records", body)
            assert status == 201, answer

        def pending(*args: str) -> int:
            listed = recalld(daemon, "generations", *args, "--json")
            assert listed.returncode == 0, listed.stderr
            return int(json.loads(listed.stdout)["pending"])

        assert pending("-n", "busy") == 3
        assert pending("--namespace", "quiet") == 0
        assert pending() == 3  # every namespace
        text = recalld(daemon, "generations", "-n", "busy")
        assert text.returncode == 0 and "pending: 3 in busy" in text.stdout, text.stdout

        # longer than [records] max_namespace_chars may ever be: a one-line 400, nothing listed
        refused = recalld(daemon, "generations", "-n", "n" * 1001)
        assert refused.returncode == 1 and "namespace" in refused.stderr and not refused.stdout, refused
    finally:
        fake.close()
