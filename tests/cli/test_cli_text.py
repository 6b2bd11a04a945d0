"""The small things of `recalld`'s text, as an operator meets them: --version, --socket
after the subcommand, recall's text with routes and snippets, `recalld feedback`, the id a 409
names, an unknown namespace, a one-screen `health --ready`, --json."""

from __future__ import annotations

import json
from typing import Any

from tests.support import Daemon
from tests.support.cli import recalld
from tests.support.embedding_service import EmbeddingServer


def test_version_and_socket_after_the_subcommand(daemon: Daemon) -> None:
    version = recalld(None, "--version")
    assert version.returncode == 0 and version.stdout.startswith("recalld 0."), version
    after = recalld(None, "health", "--socket", str(daemon.socket))
    before = recalld(None, "--socket", str(daemon.socket), "health")
    assert after.returncode == before.returncode == 0, after.stderr
    assert after.stdout == before.stdout == "live (pass)\n"


def test_recall_text_shows_routes_snippets_and_the_way_to_feedback(daemon: Daemon, ns: str) -> None:
    status, created = daemon.call(
        "POST",
        "/v1/records",
        {"namespace": ns, "kind": "doc", "title": "Harbour fees", "body": "Mooring costs twelve euros a night."},
    )
    assert status == 201
    shown = recalld(daemon, "recall", "-n", ns, "mooring euros", "--route", "fts")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("fused by ")
    assert lines[1].startswith("  1. Harbour fees")
    assert "from fts #1" in lines[2] and created["id"] in lines[2]
    assert "Mooring costs twelve euros" in lines[3]  # the snippet
    search_id = lines[-1].split()[1].rstrip(":")
    assert "recalld feedback" in lines[-1]

    noted = recalld(daemon, "feedback", search_id, created["id"], "--useful")
    assert noted.returncode == 0 and noted.stdout.startswith("noted"), noted.stderr
    stats = json.loads(recalld(daemon, "stats", "-n", ns, "--json").stdout)
    assert json.dumps(stats).count("1") > 0  # the judgement is counted
    wrong = recalld(daemon, "feedback", "not-a-uuid", created["id"], "--useful")
    assert wrong.returncode == 2 and "UUID" in wrong.stderr


def test_a_409_names_the_existing_record(daemon: Daemon, ns: str) -> None:
    first = recalld(daemon, "put", "-n", ns, "--title", "Pump schedule", "--body", "weekly", "--json")
    existing = json.loads(first.stdout)["id"]
    again = recalld(daemon, "put", "-n", ns, "--title", "Pump schedule", "--body", "weekly")
    assert again.returncode == 1
    assert "exact_duplicate" in again.stderr and f"existing record: {existing}" in again.stderr


def test_an_unknown_namespace_is_not_just_no_results(daemon: Daemon, ns: str) -> None:
    missing = recalld(daemon, "recall", "-n", f"{ns}-typo", "anything")
    assert missing.returncode == 1
    assert "has no records (is it spelled right?)" in missing.stderr


def test_health_ready_fits_one_screen_and_json_has_it_all(daemon: Daemon) -> None:
    ready = recalld(daemon, "health", "--ready")
    lines = ready.stdout.splitlines()
    assert lines[0].startswith(("ready", "ready, degraded")) and lines[0].endswith(("(pass)", "(warn)")), ready.stdout
    assert ready.returncode == 0 and len(lines) < 10
    assert all(": pass" not in line for line in lines[1:])  # only what is not passing
    whole = recalld(daemon, "health", "--ready", "--json")
    assert json.loads(whole.stdout)["checks"]


def test_a_fresh_empty_daemon_is_ready_with_nothing_indexed_yet(make_daemon: Any) -> None:
    """An empty index is not a fault: with no records there is nothing to index. Once a record
    waits for its vectors (the provider here answers after 3 s), the missing generation counts."""
    fake = EmbeddingServer(16)
    try:
        daemon: Daemon = make_daemon(env=fake.env())
        ready = recalld(daemon, "health", "--ready")
        assert ready.returncode == 0, ready.stdout
        assert ready.stdout.splitlines() == ["ready; nothing indexed yet: the store holds no records (pass)"]
        body = daemon.call("GET", "/readyz")[1]
        assert body["status"] == "pass" and body["checks"]["vector"]["status"] == "pass", body
        fake.delay_s = 3.0
        assert (
            daemon.call("POST", "/v1/records", {"namespace": "n", "kind": "doc", "title": "T", "body": "b"})[0] == 201
        )
        body = daemon.call("GET", "/readyz")[1]
        assert body["status"] == "warn", body
        assert body["checks"]["vector"] == {
            **body["checks"]["vector"],
            "status": "fail",
            "reason": "no_verified_generation",
        }
    finally:
        fake.close()
