"""Remote embedding providers as a deployment uses them: the daemon pointed by config at a real
HTTP server on loopback (Ollama or OpenAI wire format), metered with a price catalogue, and
degrading out loud when the provider goes away mid-run."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import httpx
import pytest

from tests.support import Daemon, search_rows
from tests.support.embedding_service import EmbeddingServer
from tests.support.locks import table_locked
from tests.support.waits import eventually


def wait_vector(daemon: Daemon, ns: str, query: str, n: int, timeout: float = 60) -> dict[str, Any]:
    _, answer = eventually(
        lambda: daemon.call("POST", "/v1/recall", {"namespace": ns, "query": query, "routes": ["vector"], "k": 10}),
        timeout,
        f"at least {n} records of {ns} found by meaning, the route whole",
        accept=lambda reply: reply[0] == 200 and len(reply[1]["results"]) >= n and not reply[1]["degraded_routes"],
    )
    return dict(answer)


@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_switching_provider_in_config_works_against_a_real_http_server(
    make_daemon: Any, fake: EmbeddingServer, provider: str
) -> None:
    daemon: Daemon = make_daemon(env=fake.env(model="fake-embedder", provider=provider))
    ready = daemon.call("GET", "/readyz")[1]
    embedding = ready["checks"]["embedding"]
    assert embedding["status"] == "pass"
    assert embedding["detail"]["space"]["provider"] == provider
    assert embedding["detail"]["space"]["model"] == "fake-embedder" and embedding["detail"]["space"]["dimension"] == 48
    assert embedding["detail"]["probe"]["status"] == "pass"
    for i in range(4):
        daemon.call("POST", "/v1/records", {"namespace": "p", "kind": "doc", "title": f"Note {i}", "body": f"text {i}"})
    answer = wait_vector(daemon, "p", "anything", 4)
    assert {hit["title"] for hit in answer["results"]} == {f"Note {i}" for i in range(4)}
    assert len(fake.calls) >= 3, "probe, index and query calls reached the server"


def wait_index_usage(daemon: Daemon, ns: str, tokens: int, timeout: float = 60) -> dict[str, Any]:
    """The namespace's usage rows once its `index` row counts at least `tokens` input tokens: the
    chunks are embedded first, the title for duplicate checks by the index manager after them."""

    def rows() -> dict[str, Any]:
        status, usage = daemon.call("GET", f"/v1/usage?namespace={ns}")
        assert status == 200, usage
        return {row["purpose"]: row for row in usage["usage"]}

    return eventually(
        rows,
        timeout,
        f"the index usage of {ns} counting {tokens} tokens",
        accept=lambda found: found.get("index", {}).get("input_tokens", 0) >= tokens,
    )


def test_usage_rows_carry_provider_tokens_and_catalogue_cost(make_daemon: Any, fake: EmbeddingServer) -> None:
    # 2,500 micro-units per 1,000 tokens: the provider counts a text's words plus two
    env = {**fake.env(model="fake-embedder"), "RECALLD_EMBEDDING_PRICES": "{ fake-embedder = 2500.0 }"}
    daemon: Daemon = make_daemon(env=env)
    body = "one two three four five six seven eight nine ten"
    # a story: its title is checked for duplicates, so the index manager embeds it too (a doc's is not)
    daemon.call("POST", "/v1/records", {"namespace": "metered", "kind": "story", "title": "Ten words", "body": body})
    wait_vector(daemon, "metered", "anything", 1)
    rows = wait_index_usage(daemon, "metered", 18)
    index = rows["index"]
    # the indexed inputs are "Ten words\n\n<body>" and, for duplicate checks, the normalised
    # title "ten words": (12 + 2) + (2 + 2) tokens as the fake provider counts them
    assert index["input_tokens"] == 18 and index["estimated_calls"] == 0
    assert index["cost_micros"] == 45  # 18 tokens * 2500 / 1000
    assert rows["query"]["input_tokens"] == 3 and rows["query"]["cost_micros"] in (7, 8)
    everything = daemon.call("GET", "/v1/usage")[1]
    assert any(row["purpose"] == "probe" for row in everything["system"]), "the probe is metered as system work"
    assert all(row["purpose"] != "probe" for row in everything["usage"])


def test_an_unpriced_model_costs_nothing_and_names_no_model(make_daemon: Any, fake: EmbeddingServer) -> None:
    daemon: Daemon = make_daemon(env=fake.env(model="unlisted-model"))
    daemon.call("POST", "/v1/records", {"namespace": "free", "kind": "doc", "title": "T", "body": "b"})
    wait_vector(daemon, "free", "anything", 1)
    rows = daemon.call("GET", "/v1/usage?namespace=free")[1]["usage"]
    assert rows and all(row["cost_micros"] == 0 for row in rows)


def test_provider_stopping_mid_run_degrades_to_full_text_and_recovers(make_daemon: Any, fake: EmbeddingServer) -> None:
    env = {**fake.env(), "RECALLD_EMBEDDING_BREAKER_FAILURES": "2", "RECALLD_EMBEDDING_BREAKER_RESET_S": "1"}
    daemon: Daemon = make_daemon(env=env)
    ns = "outage"
    daemon.call(
        "POST", "/v1/records", {"namespace": ns, "kind": "doc", "title": "Ledger backup", "body": "Dumped nightly."}
    )
    wait_vector(daemon, ns, "ledger", 1)
    fake.down = True
    seen: set[str] = set()
    for _ in range(4):
        status, answer = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": "ledger backup"})
        assert status == 200 and answer["results"], "full-text still answers"
        assert [d["route"] for d in answer["degraded_routes"]] == ["vector"]
        seen |= {d["reason"] for d in answer["degraded_routes"]}
    assert seen <= {"provider_error", "provider_unavailable", "circuit_open"} and "circuit_open" in seen, seen
    metrics = daemon.http.get("/metrics").text
    opened = re.search(r"^recalld_embedder_circuit_opened_total ([0-9.]+)$", metrics, re.M)
    assert opened and float(opened.group(1)) >= 1, "the breaker's state is in /metrics"
    assert re.search(r'^recalld_recall_degraded_total\{reason="circuit_open",route="vector"\} [1-9]', metrics, re.M)
    assert "recalld_embedder_circuit_state{state=" in metrics
    # writes and forgets never wait on the provider
    status, created = daemon.call(
        "POST", "/v1/records", {"namespace": ns, "kind": "doc", "title": "During", "body": "x"}
    )
    assert status == 201
    assert daemon.call("DELETE", f"/v1/records/{created['id']}")[0] == 200
    status, body = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": "nightly ledger", "routes": ["vector"]})
    assert status == 503 and body["error"]["code"] == "route_unavailable"
    # a query asked before the outage still has its vector in the query-vector cache
    status, body = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": "ledger", "routes": ["vector"]})
    assert status == 200 and body["results"] and not body["degraded_routes"], body
    ready = daemon.call("GET", "/readyz")
    assert ready[0] == 200 and ready[1]["status"] == "warn", "an optional route down is a warning, not unready"
    fake.down = False
    wait_vector(daemon, ns, "ledger", 1, timeout=30)


def test_vector_required_makes_the_daemon_unready_without_a_provider(make_daemon: Any, fake: EmbeddingServer) -> None:
    fake.down = True
    daemon: Daemon = make_daemon(env={**fake.env(), "RECALLD_RECALL_VECTOR_REQUIRED": "true"}, wait_ready=False)
    status, body = eventually(
        lambda: daemon.call("GET", "/readyz") if daemon.socket.exists() else None,
        30,
        "the socket answering with the embedding check's verdict: fail",
        accept=lambda answer: answer is not None and answer[1]["checks"].get("embedding", {}).get("status") == "fail",
        ignoring=(httpx.TransportError,),
    )
    assert status == 503 and body["checks"]["embedding"]["status"] == "fail"
    assert daemon.call("GET", "/livez")[0] == 200


def test_a_short_deadline_returns_what_finished_and_names_the_late_route(
    make_daemon: Any, fake: EmbeddingServer
) -> None:
    daemon: Daemon = make_daemon(env=fake.env())
    ns = "deadline"
    daemon.call(
        "POST", "/v1/records", {"namespace": ns, "kind": "doc", "title": "Kiln schedule", "body": "Fire at dawn."}
    )
    wait_vector(daemon, ns, "kiln", 1)
    fake.delay_s = 6.0  # the provider now answers too late for the request below
    started = time.monotonic()
    status, answer = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": "kiln schedule", "deadline_ms": 300})
    elapsed = time.monotonic() - started
    assert status == 200 and [r["title"] for r in answer["results"]] == ["Kiln schedule"]
    assert answer["degraded_routes"] == [
        {"route": "vector", "reason": "deadline_exceeded", "message": "no answer within 300 ms"}
    ]
    # far below the provider's delay, far above the deadline: a busy machine (two test workers) passes it
    assert elapsed < 3.0, f"the answer waited {elapsed:.2f}s for a late route"
    assert answer["results"][0]["routes"] == {"fts": 1}


def test_routes_that_all_run_out_of_the_clients_time_answer_nothing_and_name_every_late_route(
    make_daemon: Any, fake: EmbeddingServer
) -> None:
    daemon: Daemon = make_daemon(env=fake.env())
    ns = "all-late"
    daemon.call("POST", "/v1/records", {"namespace": ns, "kind": "doc", "title": "Kiln log", "body": "Fire at dawn."})
    wait_vector(daemon, ns, "kiln", 1)
    fake.delay_s = 2.0
    with table_locked(daemon.env["RECALLD_STORE_DSN"], "records"):
        started = time.monotonic()
        status, answer = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": "kiln log", "deadline_ms": 300})
        elapsed = time.monotonic() - started
        # the client's deadline passed, no route is down: a 200 with what finished (nothing)
        assert status == 200, answer
        assert answer["results"] == [] and elapsed < 1.5
        assert sorted((d["route"], d["reason"]) for d in answer["degraded_routes"]) == [
            ("fts", "deadline_exceeded"),
            ("vector", "deadline_exceeded"),
        ]
        status, text_only = daemon.call(
            "POST", "/v1/recall", {"namespace": ns, "query": "kiln", "routes": ["fts"], "deadline_ms": 200}
        )
        assert status == 200 and text_only["results"] == [], text_only
        assert [(d["route"], d["reason"]) for d in text_only["degraded_routes"]] == [("fts", "deadline_exceeded")]
    # a route that is down, not late, is still a 503 when nothing else was asked for
    fake.delay_s, fake.down = 0.0, True
    status, body = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": "a new query", "routes": ["vector"]})
    assert status == 503 and body["error"]["code"] == "route_unavailable", body
    assert body["degraded_routes"][0]["route"] == "vector"
    assert body["degraded_routes"][0]["reason"] != "deadline_exceeded"
    # both late answers were recorded as searches, late routes included
    rows = search_rows(daemon, [answer["search_id"], text_only["search_id"]])
    assert sorted(len(json.loads(row["degraded_routes"])) for row in rows) == [1, 2]


def test_a_vector_hit_on_a_replaced_revision_is_dropped_at_rehydration(make_daemon: Any, fake: EmbeddingServer) -> None:
    """Between an update and the index manager tombstoning the old chunks (it embeds the new
    revision first, slowly here), the index still holds the old revision's vectors: the vector
    route finds the record by its old text, and only rehydration can tell it is stale."""
    # No timed step of the index manager: the only one after the update is the one its
    # notification wakes, which embeds the new revision (slowly) before it tombstones the old.
    daemon: Daemon = make_daemon(env={**fake.env(), "RECALLD_INDEX_POLL_S": "60"})
    ns = "stale-revision"
    _, created = daemon.call(
        "POST", "/v1/records", {"namespace": ns, "kind": "doc", "title": "Kiln log", "body": "Fire at dawn."}
    )
    assert wait_vector(daemon, ns, "kiln", 1)["results"][0]["revision"] == 1  # "kiln" is now a cached query vector
    fake.delay_s = 5.0  # the new revision's embedding (not the cached query) is slow
    body = {"namespace": ns, "kind": "doc", "title": "Kiln log", "body": "Glaze recipes moved to the wiki."}
    status, updated = daemon.call("PUT", f"/v1/records/{created['id']}", body)
    assert status == 200 and updated["revision"] == 2
    answer = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": "kiln", "routes": ["vector"]})[1]
    handle = daemon.call("GET", "/v1/generations")[1]["index"]["handle"]
    # the index still held revision 1's vector, untombstoned, when the recall searched it
    assert handle["tombstones"] == 0 and handle["count"] == 1, handle
    # the stale hit is dropped, and the route says the new revision is not searchable yet
    assert answer["results"] == [], answer
    assert [(d["reason"], d["pending"]) for d in answer["degraded_routes"]] == [("vector_indexing", 1)], answer
    fake.delay_s = 0.0
    found = wait_vector(daemon, ns, "kiln", 1)["results"][0]
    assert (found["id"], found["revision"]) == (created["id"], 2)


def test_before_anything_is_indexed_the_vector_route_says_so(make_daemon: Any, fake: EmbeddingServer) -> None:
    daemon: Daemon = make_daemon(env=fake.env())
    fake.delay_s = 5.0  # the record below waits for its vectors
    daemon.call("POST", "/v1/records", {"namespace": "new", "kind": "doc", "title": "Kiln log", "body": "Fire."})
    status, answer = daemon.call("POST", "/v1/recall", {"namespace": "new", "query": "kiln"})
    assert status == 200 and [r["title"] for r in answer["results"]] == ["Kiln log"], answer
    assert [(d["route"], d["reason"]) for d in answer["degraded_routes"]] == [("vector", "no_verified_generation")]
    status, body = daemon.call("POST", "/v1/recall", {"namespace": "new", "query": "kiln", "routes": ["vector"]})
    assert status == 503 and body["error"]["code"] == "route_unavailable", body
    assert body["degraded_routes"] == [{"route": "vector", "reason": "no_verified_generation"}]


def test_a_broken_query_vector_degrades_the_vector_route_with_its_reason(
    make_daemon: Any, fake: EmbeddingServer
) -> None:
    daemon: Daemon = make_daemon(env=fake.env())
    ns = "broken-vector"
    daemon.call("POST", "/v1/records", {"namespace": ns, "kind": "doc", "title": "Kiln log", "body": "Fire at dawn."})
    wait_vector(daemon, ns, "kiln", 1)
    fake.corrupt = "smouldering"
    for _ in range(2):  # the broken vector is not kept: the repeated query asks the provider again
        calls = len(fake.calls)
        status, answer = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": "kiln smouldering"})
        assert len(fake.calls) > calls
        assert status == 200 and [r["title"] for r in answer["results"]] == ["Kiln log"], answer
        assert [(d["route"], d["reason"]) for d in answer["degraded_routes"]] == [
            ("vector", "embedding_dimension_mismatch")
        ]
        assert answer["results"][0]["routes"] == {"fts": 1}
    status, answer = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": "kiln at dawn"})
    assert status == 200 and answer["degraded_routes"] == [] and "vector" in answer["results"][0]["routes"]


def test_a_route_limit_bounds_a_slow_route_inside_a_longer_deadline(make_daemon: Any, fake: EmbeddingServer) -> None:
    daemon: Daemon = make_daemon(env={**fake.env(), "RECALLD_RECALL_ROUTE_DEADLINE_MS": "{ vector = 400 }"})
    ns = "route-limit"
    daemon.call("POST", "/v1/records", {"namespace": ns, "kind": "doc", "title": "Glaze recipe", "body": "Mix ash."})
    wait_vector(daemon, ns, "glaze", 1)
    fake.delay_s = 3.0
    started = time.monotonic()
    status, answer = daemon.call(
        "POST", "/v1/recall", {"namespace": ns, "query": "glaze recipe", "deadline_ms": 10_000}
    )
    assert status == 200 and answer["results"][0]["title"] == "Glaze recipe"
    assert answer["degraded_routes"][0]["route"] == "vector"
    assert answer["degraded_routes"][0]["reason"] == "deadline_exceeded"
    assert "400 ms route limit" in answer["degraded_routes"][0]["message"]
    assert time.monotonic() - started < 2.0
    # the daemon's own limit, not the client's deadline, cut the only route asked for: a 503
    status, body = daemon.call(
        "POST", "/v1/recall", {"namespace": ns, "query": "glaze notes", "routes": ["vector"], "deadline_ms": 10_000}
    )
    assert status == 503 and body["error"]["code"] == "route_unavailable", body
    assert body["degraded_routes"] == [{"route": "vector", "reason": "deadline_exceeded"}]


def test_a_record_the_provider_refuses_is_set_aside_and_its_batch_mates_are_indexed(
    make_daemon: Any, fake: EmbeddingServer
) -> None:
    fake.refuse = "POISON"
    daemon: Daemon = make_daemon(env=fake.env())
    ns = "poison"
    ids = {}
    for title in ("Backups", "Rotation", "POISON pill", "Failover", "Vacuum"):
        status, created = daemon.call(
            "POST", "/v1/records", {"namespace": ns, "kind": "doc", "title": title, "body": "x"}
        )
        assert status == 201
        ids[title] = created["id"]
    # the four others are indexed though they shared a batch with the refused one
    answer = wait_vector(daemon, ns, "anything", 4)
    assert {hit["title"] for hit in answer["results"]} == {"Backups", "Rotation", "Failover", "Vacuum"}
    generations = daemon.call("GET", "/v1/generations")[1]
    assert generations["pending"] == 1, "not searchable by meaning, so still pending"
    assert generations["index"]["held"] == {"input_rejected": 1}
    metrics = daemon.http.get("/metrics").text
    assert re.search(r'^recalld_index_held_records\{reason="input_rejected"\} 1\.0$', metrics, re.M), metrics
    # set aside: the provider is not asked again on every poll (2 s), nor is the breaker tripped
    calls, steps = len(fake.calls), generations["index"]["steps"]
    eventually(
        lambda: daemon.call("GET", "/v1/generations")[1]["index"]["steps"],
        30,
        "two more index steps",
        accept=lambda now: now >= steps + 2,
    )
    assert len(fake.calls) == calls, f"{len(fake.calls) - calls} calls while nothing changed"
    assert daemon.call("GET", "/readyz")[1]["checks"]["embedding"]["status"] == "pass"
    # a user's query is never refused for a record's input it was batched with, and full text
    # still finds the held record
    status, answer = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": "POISON pill"})
    assert status == 200 and answer["results"][0]["title"] == "POISON pill", answer
    # a new revision is tried at once
    status, _ = daemon.call(
        "PUT", f"/v1/records/{ids['POISON pill']}", {"namespace": ns, "kind": "doc", "title": "Antidote", "body": "x"}
    )
    assert status == 200
    wait_vector(daemon, ns, "anything", 5)
    generations = daemon.call("GET", "/v1/generations")[1]
    assert generations["index"]["held"] == {} and generations["pending"] == 0


def test_a_record_whose_hold_ends_is_pending_and_tried_again_without_waiting_for_a_full_recheck(
    make_daemon: Any, fake: EmbeddingServer
) -> None:
    # holds of 2 s, doubled per refusal; a full re-read of all records only every 10 minutes
    fake.refuse = "POISON"
    env = {**fake.env(), "RECALLD_INDEX_HOLD_S": "2", "RECALLD_INDEX_RECHECK_S": "600"}
    daemon: Daemon = make_daemon(env=env)
    ns = "retried"
    for title in ("Backups", "POISON pill"):
        assert (
            daemon.call("POST", "/v1/records", {"namespace": ns, "kind": "doc", "title": title, "body": "x"})[0] == 201
        )
    wait_vector(daemon, ns, "anything", 1)

    def refusals() -> int:
        generations = daemon.call("GET", "/v1/generations")[1]
        # never reported caught up: held, or due for another try
        assert generations["pending"] == 1, generations
        return fake.refused

    # the first try refuses once or twice (a merged call, then the record alone); a third
    # refusal needs at least one try after a hold ended
    eventually(refusals, 30, "a third refusal: a try after a hold ended", accept=lambda n: n >= 3, poll=0.2)
    fake.refuse = None  # the provider now takes it: the next try indexes it
    answer = wait_vector(daemon, ns, "anything", 2, timeout=30)
    assert {hit["title"] for hit in answer["results"]} == {"Backups", "POISON pill"}
    generations = daemon.call("GET", "/v1/generations")[1]
    assert generations["pending"] == 0 and generations["index"]["held"] == {}
