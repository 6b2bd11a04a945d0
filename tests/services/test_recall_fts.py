"""Full-text recall over the socket: ranking, filters, namespaces, tombstones, degradation."""

from __future__ import annotations

import json
import uuid
from typing import Any

from recalld.actors.recall.fusion import RRF_VERSION
from recalld.actors.records import query_hash
from tests.support import Daemon, search_rows

DOCS = [
    (
        "doc",
        "Backup the ledger nightly",
        "The ledger database is dumped every night at 02:00 to cold storage.",
        {"team": "ops"},
    ),
    (
        "doc",
        "Rotate signing keys",
        "JWT signing keys rotate quarterly; the previous key stays valid for a day.",
        {"team": "security"},
    ),
    (
        "rule",
        "Refunds need two approvals",
        "Any refund above 500 EUR needs approval from two managers.",
        {"team": "billing"},
    ),
    (
        "story",
        "Customer asks for a refund",
        "As a customer I can request a refund from my order page.",
        {"team": "billing"},
    ),
    (
        "doc",
        "Error E4012 on login",
        "E4012 means the session token expired; the client must sign in again.",
        {"team": "ops"},
    ),
]


def seed(daemon: Daemon, ns: str) -> dict[str, str]:
    ids = {}
    for kind, title, body, attributes in DOCS:
        status, created = daemon.call(
            "POST",
            "/v1/records",
            {"namespace": ns, "kind": kind, "title": title, "body": body, "attributes": attributes},
        )
        assert status == 201
        ids[title] = created["id"]
    return ids


def recall(daemon: Daemon, ns: str, query: str, **options: Any) -> dict[str, Any]:
    status, body = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": query, "routes": ["fts"], **options})
    assert status == 200, body
    return body


def titles(answer: dict[str, Any]) -> list[str]:
    return [hit["title"] for hit in answer["results"]]


def test_keyword_and_identifier_queries_find_the_right_record(daemon: Daemon, ns: str) -> None:
    seed(daemon, ns)
    assert titles(recall(daemon, ns, "ledger dumped nightly"))[0] == "Backup the ledger nightly"
    assert titles(recall(daemon, ns, "E4012"))[0] == "Error E4012 on login"
    answer = recall(daemon, ns, "refund")
    assert set(titles(answer)) == {"Refunds need two approvals", "Customer asks for a refund"}
    hit = answer["results"][0]
    assert hit["routes"] == {"fts": 1} and hit["score"] > 0 and hit["kind"] in ("rule", "story")
    assert "refund" in (hit["snippet"] or "").lower()
    assert (answer["fusion"]["name"], answer["fusion"]["version"]) == ("rrf", RRF_VERSION)
    assert set(answer["timings_ms"]) >= {"embed", "vector", "fts", "rehydrate", "fusion", "total"}
    assert answer["generation"] is None and answer["search_id"]


def test_k_limits_results_and_order_is_stable(daemon: Daemon, ns: str) -> None:
    for i in range(12):
        daemon.call(
            "POST",
            "/v1/records",
            {"namespace": ns, "kind": "doc", "title": f"Alert runbook {i}", "body": "alert"},
        )
    first = recall(daemon, ns, "alert runbook", k=5)
    assert len(first["results"]) == 5
    assert [h["id"] for h in recall(daemon, ns, "alert runbook", k=5)["results"]] == [h["id"] for h in first["results"]]


def test_filters_by_kind_and_attributes(daemon: Daemon, ns: str) -> None:
    seed(daemon, ns)
    assert titles(recall(daemon, ns, "refund", kinds=["story"])) == ["Customer asks for a refund"]
    assert titles(recall(daemon, ns, "refund", attributes={"team": "security"})) == []
    assert set(titles(recall(daemon, ns, "refund", attributes={"team": "billing"}))) == {
        "Refunds need two approvals",
        "Customer asks for a refund",
    }


def test_structured_route_alone(daemon: Daemon, ns: str) -> None:
    seed(daemon, ns)
    answer = recall(daemon, ns, "anything", routes=["structured"], attributes={"team": "ops"})
    assert set(titles(answer)) == {"Backup the ledger nightly", "Error E4012 on login"}
    assert all(hit["routes"] == {"structured": i} for i, hit in enumerate(answer["results"], 1))


def test_namespaces_never_leak(daemon: Daemon, ns: str) -> None:
    seed(daemon, ns)
    assert recall(daemon, ns + "-x", "ledger")["results"] == []


def test_forgotten_records_never_come_back(daemon: Daemon, ns: str) -> None:
    ids = seed(daemon, ns)
    target = ids["Backup the ledger nightly"]
    assert target in [h["id"] for h in recall(daemon, ns, "ledger")["results"]]
    assert daemon.call("DELETE", f"/v1/records/{target}")[0] == 200
    for query in ("ledger", "backup nightly", "cold storage"):
        assert target not in [h["id"] for h in recall(daemon, ns, query)["results"]]
    assert target not in [h["id"] for h in recall(daemon, ns, "x", routes=["structured"])["results"]]


def test_updated_text_is_what_recall_sees(daemon: Daemon, ns: str) -> None:
    ids = seed(daemon, ns)
    rid = ids["Rotate signing keys"]
    daemon.call(
        "PUT",
        f"/v1/records/{rid}",
        {
            "namespace": ns,
            "kind": "doc",
            "title": "Rotate signing keys",
            "body": "Keys live in the vault now.",
        },
    )
    assert rid not in [h["id"] for h in recall(daemon, ns, "quarterly")["results"]]
    hit = recall(daemon, ns, "vault")["results"][0]
    assert (hit["id"], hit["revision"]) == (rid, 2)


def test_vector_route_is_reported_degraded_not_silently_dropped(make_daemon: Any, ns: str) -> None:
    daemon = make_daemon(env={"RECALLD_EMBEDDING_PROVIDER": "none"})
    seed(daemon, ns)
    status, answer = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": "ledger"})
    assert status == 200 and answer["results"]
    assert [(d["route"], d["reason"]) for d in answer["degraded_routes"]] == [("vector", "no_provider")]
    # no record holds both words: with the vector route down, records holding either fill in
    status, answer = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": "ledger signing"})
    assert status == 200 and {"Backup the ledger nightly", "Rotate signing keys"} <= set(titles(answer)), answer
    status, body = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": "ledger", "routes": ["vector"]})
    assert status == 503 and body["error"]["code"] == "route_unavailable"
    assert body["degraded_routes"][0]["route"] == "vector"
    assert body["degraded_routes"][0]["reason"] == "no_provider"

    # The last answer's search row: everything its order depended on, and the degraded route.
    (row,) = search_rows(daemon, [answer["search_id"]])
    assert row["namespace"] == ns and row["query_hash"] == query_hash(ns, "ledger signing")
    assert row["routes"] == ["fts", "vector"]
    fusion = json.loads(row["fusion"])
    assert {key: fusion[key] for key in ("name", "version", "weights", "k")} == {
        key: answer["fusion"][key] for key in ("name", "version", "weights", "k")
    }
    assert json.loads(row["results"]) == [
        {"id": hit["id"], "rank": rank, "routes": hit["routes"]} for rank, hit in enumerate(answer["results"], 1)
    ]
    assert json.loads(row["timings_ms"]) == answer["timings_ms"]
    assert json.loads(row["degraded_routes"]) == [{"route": "vector", "reason": "no_provider"}]


def test_each_recall_writes_a_telemetry_row_without_the_query_text(daemon: Daemon, ns: str) -> None:
    seed(daemon, ns)
    answer = recall(daemon, ns, "ledger secret words")
    (found,) = search_rows(daemon, [answer["search_id"]])
    assert found["namespace"] == ns and found["routes"] == ["fts"]
    assert "secret" not in str(dict(found))


def test_feedback_feeds_per_namespace_statistics(daemon: Daemon, ns: str) -> None:
    ids = seed(daemon, ns)
    answer = recall(daemon, ns, "refund", k=5)
    first, second = answer["results"][0]["id"], answer["results"][1]["id"]
    for rid, useful in ((first, True), (second, False), (second, True), (second, False)):  # the latest judgement wins
        status, body = daemon.call(
            "POST", "/v1/recall/feedback", {"search_id": answer["search_id"], "id": rid, "useful": useful}
        )
        assert status == 200 and body["rank"] in (1, 2)
    recall(daemon, ns, "nothing matches this xyzzy")
    status, stats = daemon.call("GET", f"/v1/stats?namespace={ns}&k=5")
    assert status == 200
    assert (stats["searches"], stats["empty_searches"], stats["searches_with_feedback"]) == (2, 1, 1)
    assert (stats["judged_at_k"], stats["useful_at_k"], stats["precision_at_k"]) == (2, 1, 0.5)
    assert stats["useful_rank_distribution"] == {"1": 1}
    # other namespaces see nothing of it
    assert daemon.call("GET", f"/v1/stats?namespace={ns}-other")[1]["searches"] == 0
    # a result that was not in the answer, an unknown search, a missing namespace
    status, body = daemon.call(
        "POST",
        "/v1/recall/feedback",
        {"search_id": answer["search_id"], "id": ids["Rotate signing keys"], "useful": True},
    )
    assert status == 400 and body["error"]["code"] == "invalid_value"
    status, body = daemon.call(
        "POST", "/v1/recall/feedback", {"search_id": str(uuid.uuid4()), "id": first, "useful": True}
    )
    assert status == 404 and body["error"]["code"] == "not_found"
    status, body = daemon.call("POST", "/v1/recall/feedback", {"search_id": "nope", "id": first, "useful": True})
    assert status == 400 and body["error"]["code"] == "invalid_request"
    assert daemon.call("GET", "/v1/stats")[0] == 400


def test_fusion_settings_from_config_are_applied_and_reported(make_daemon: Any, ns: str) -> None:
    env = {
        "RECALLD_EMBEDDING_PROVIDER": "none",
        "RECALLD_RECALL_RRF_K": "5",
        "RECALLD_RECALL_WEIGHTS": "{ fts = 2.0, vector = 1.0, structured = 0.25 }",
    }
    daemon = make_daemon(env=env)
    seed(daemon, ns)
    answer = recall(daemon, ns, "ledger")
    assert answer["fusion"]["k"] == 5 and answer["fusion"]["weights"] == {"fts": 2.0}
    # one full-text match of a plain word: weight 2 x all_terms factor 0.03 / (k 5 + rank 1)
    assert answer["results"][0]["score"] == round(2.0 * 0.03 / 6, 6)
    status, answer = daemon.call(
        "POST", "/v1/recall", {"namespace": ns, "query": "rules", "routes": ["structured"], "kinds": ["rule"]}
    )
    assert status == 200 and answer["fusion"]["weights"] == {"structured": 0.25}
    assert answer["results"][0]["score"] == round(0.25 / 6, 6)
