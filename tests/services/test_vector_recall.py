"""The vector route end to end: the real local model, real FAISS generations, real PostgreSQL."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import numpy as np
import pytest

from tests.support import Daemon, search_rows, sql
from tests.support.waits import eventually, wait_for_generation

# Paraphrase pairs: the query shares no content word with its record.
RECORDS = {
    "keys": ("Rotate the signing keys", "Cryptographic signing material is replaced every quarter by operators."),
    "backup": ("Nightly ledger backup", "The accounting database is dumped to cold storage at two in the morning."),
    "refund": ("Refund approvals", "Money returned to a customer above 500 EUR needs two managers to agree."),
    "oncall": ("On-call rota", "One engineer carries the pager each week and answers incidents at night."),
    "vacation": ("Holiday policy", "Staff get twenty-five paid days off per year, booked through the HR portal."),
    "deploy": ("Release process", "Production deployments happen on Tuesdays after the change board approves."),
}
QUERIES = {
    "keys": "how often do we change our crypto credentials",
    "backup": "when is the finance data copied for safekeeping",
    "refund": "who must sign off when we pay a client back",
    "oncall": "who is responsible for responding to outages at 3am",
    "vacation": "how many days of leave do employees have",
    "deploy": "what day can we ship code to prod",
}


def vector(daemon: Daemon, ns: str, query: str, **extra: Any) -> dict[str, Any]:
    status, body = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": query, "routes": ["vector"], **extra})
    assert status == 200, body
    return body


@pytest.fixture(scope="module")
def corpus(daemon: Daemon) -> tuple[str, dict[str, str]]:
    ns = "vec-corpus"
    ids = {}
    for key, (title, body) in RECORDS.items():
        status, created = daemon.call(
            "POST", "/v1/records", {"namespace": ns, "kind": "doc", "title": title, "body": body}
        )
        assert status == 201
        ids[key] = created["id"]
    wait_for_generation(daemon, lambda current: current["count"] >= len(RECORDS))
    return ns, ids


def test_paraphrases_are_found_by_the_vector_route_and_by_fusion(
    daemon: Daemon, corpus: tuple[str, dict[str, str]]
) -> None:
    ns, ids = corpus
    for key, query in QUERIES.items():
        answer = vector(daemon, ns, query, k=3)
        assert answer["results"][0]["id"] == ids[key], (query, [r["title"] for r in answer["results"]])
        assert answer["degraded_routes"] == [] and answer["generation"]
        assert answer["timings_ms"]["embed"] > 0 and answer["timings_ms"]["vector"] > 0
        status, fused = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": query, "k": 3})
        assert status == 200 and fused["results"][0]["id"] == ids[key], (query, fused["results"][:2])
        assert "vector" in fused["results"][0]["routes"]


def test_generation_is_reported_with_its_space(daemon: Daemon, corpus: tuple[str, dict[str, str]]) -> None:
    body = wait_for_generation(daemon, lambda current: current["count"] >= len(RECORDS))
    current = body["current"]
    assert current["space"]["dimension"] == 384 and current["space"]["normalized"] is True
    assert current["index_type"] == "Flat" and current["state"] == "verified"


def test_namespaces_do_not_leak_through_the_vector_route(daemon: Daemon, corpus: tuple[str, dict[str, str]]) -> None:
    assert vector(daemon, "vec-elsewhere", QUERIES["keys"])["results"] == []


def test_a_forgotten_record_is_never_returned_even_a_moment_later(daemon: Daemon) -> None:
    ns = "vec-forget"
    ids = []
    for i in range(3):
        _, created = daemon.call(
            "POST",
            "/v1/records",
            {
                "namespace": ns,
                "kind": "doc",
                "title": f"Greenhouse note {i}",
                "body": "Tomatoes need warmth and water.",
            },
        )
        ids.append(created["id"])
    wait_for_generation(daemon)
    eventually(
        lambda: vector(daemon, ns, "growing vegetables", k=5)["results"],
        60,
        "the three records found by meaning",
        accept=lambda hits: len(hits) >= 3,
    )
    assert daemon.call("DELETE", f"/v1/records/{ids[0]}")[0] == 200
    for _ in range(5):  # immediately, and again and again
        found = [r["id"] for r in vector(daemon, ns, "growing vegetables", k=5)["results"]]
        assert ids[0] not in found and len(found) == 2


def test_an_updated_record_is_found_by_its_new_meaning_only(daemon: Daemon) -> None:
    ns = "vec-update"
    _, created = daemon.call(
        "POST", "/v1/records", {"namespace": ns, "kind": "doc", "title": "Office pet", "body": "The office has a cat."}
    )
    rid = created["id"]
    daemon.call(
        "POST",
        "/v1/records",
        {"namespace": ns, "kind": "doc", "title": "Parking", "body": "Cars park in the basement."},
    )
    daemon.call(
        "PUT",
        f"/v1/records/{rid}",
        {"namespace": ns, "kind": "doc", "title": "Office plant", "body": "A large fern stands by the window."},
    )
    eventually(
        lambda: vector(daemon, ns, "green leafy thing near the glass", k=1)["results"],
        60,
        "the second revision found by its new meaning",
        accept=lambda hit: hit and hit[0]["id"] == rid and hit[0]["revision"] == 2,
    )


def test_kind_filter_on_the_vector_route_still_fills_k(daemon: Daemon) -> None:
    ns = "vec-crowd"
    for i in range(40):
        daemon.call(
            "POST",
            "/v1/records",
            {"namespace": ns, "kind": "noise", "title": f"Boat trip {i}", "body": "Sailing on the lake."},
        )
    for i in range(5):
        daemon.call(
            "POST",
            "/v1/records",
            {"namespace": ns, "kind": "rule", "title": f"Lake rule {i}", "body": "Life vests on boats."},
        )
    wait_for_generation(daemon, lambda current: current["count"] >= 45)
    found = eventually(
        lambda: vector(daemon, ns, "sailing on the lake", k=5, kinds=["rule"])["results"],
        60,
        "five rules found by meaning",
        accept=lambda hits: len(hits) == 5,
    )
    assert {r["kind"] for r in found} == {"rule"}


def put_all(daemon: Daemon, ns: str, records: list[dict[str, Any]]) -> dict[str, str]:
    """Create `records` in `ns` and wait until the vector route has them all; ids by title."""
    ids = {}
    for record in records:
        status, created = daemon.call("POST", "/v1/records", {"namespace": ns, **record})
        assert status == 201, created
        ids[record["title"]] = created["id"]
    wait_for_generation(daemon)
    return ids


def test_identifiers_are_found_by_full_text_and_by_fusion(daemon: Daemon) -> None:
    """Codes and option names, which the model reads as their neighbours do: full text finds
    the one record that holds them, and fusion keeps it first."""
    ns = "vec-identifiers"
    ids = put_all(
        daemon,
        ns,
        [
            {"kind": "doc", "title": "Login error E4012", "body": "E4012: the session token expired; sign in again."},
            {"kind": "doc", "title": "Login error E4013", "body": "E4013: the password is wrong; try again."},
            {"kind": "doc", "title": "Login error E4021", "body": "E4021: the account is locked after five tries."},
            {
                "kind": "doc",
                "title": "Unpacking a release tarball",
                "body": "tar --strip-components=1 -xf release.tar.gz drops the top directory while extracting.",
            },
            {
                "kind": "doc",
                "title": "Extracting archives",
                "body": "tar -xf archive.tar.gz unpacks every file of an archive into the current directory.",
            },
            {
                "kind": "doc",
                "title": "Listing archives",
                "body": "tar -tf archive.tar.gz lists the files an archive holds without extracting them.",
            },
        ],
    )
    for query, title in (("E4012", "Login error E4012"), ("--strip-components", "Unpacking a release tarball")):
        status, text = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": query, "routes": ["fts"]})
        assert status == 200 and [r["id"] for r in text["results"]] == [ids[title]], (query, text["results"])
        status, fused = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": query})
        assert status == 200 and fused["degraded_routes"] == [], fused
        first = fused["results"][0]
        assert first["id"] == ids[title] and first["routes"]["fts"] == 1, (query, fused["results"][:3])
        # the vector route answered too: the rest of the list is its neighbours
        assert len(fused["results"]) == 6 and any("vector" in r["routes"] for r in fused["results"])


def test_filters_hold_on_every_route_and_on_fusion(daemon: Daemon) -> None:
    """Rehydration drops whatever fails the filters, so each route must apply them itself (or,
    the vector route, search deeper): 40 newer records that match the query better but not the
    filters are more than a route's candidates (30), and a route ignoring the filters would
    hand over only those and answer short."""
    ns = "vec-filters"
    records = [
        {
            "kind": kind,
            "title": f"Harbour {kind} {team}",
            "body": "Boats moor in the harbour overnight.",
            "attributes": {"team": team, "site": "north"},
        }
        for kind in ("rule", "doc")
        for team in ("ops", "sales")
    ]
    decoys = [
        {
            "kind": "noise",
            "title": f"Harbour log {i}",
            "body": "Where do boats moor? Boats moor in the harbour; the harbour moors boats overnight.",
            "attributes": {"team": "other", "site": "north"},
        }
        for i in range(40)
    ]
    ids = put_all(daemon, ns, records + decoys)
    for filters, titles in (
        ({"kinds": ["rule"]}, {"Harbour rule ops", "Harbour rule sales"}),
        ({"attributes": {"team": "ops"}}, {"Harbour rule ops", "Harbour doc ops"}),
        ({"kinds": ["doc"], "attributes": {"team": "sales", "site": "north"}}, {"Harbour doc sales"}),
        ({"attributes": {"team": "nobody"}}, set()),
    ):
        for routes in (["fts"], ["vector"], ["structured"], None):
            body = {"namespace": ns, "query": "where do boats moor in the harbour", **filters}
            if routes:
                body["routes"] = routes
            status, answer = daemon.call("POST", "/v1/recall", body)
            assert status == 200 and answer["degraded_routes"] == [], (filters, routes, answer)
            assert {r["id"] for r in answer["results"]} == {ids[t] for t in titles}, (filters, routes, answer)


def test_filters_far_from_the_query_still_return_k(make_daemon: Any) -> None:
    """pgvector#259: a filter applied after the index walk answers short when the records it
    selects lie beyond the query's neighbours. Here 60 harbour notes outrank every other record
    for a harbour question, and the vector route reaches 40 records at most (10 candidates, one
    round 4x deeper). The 14 rules (under `exact_filter_max_records`) are scored exactly, so the
    best 10 of them come back; the 30 memos are too many for that, and the short answer says
    why instead of passing for "fewer than k match"."""
    daemon = make_daemon(
        env={
            "RECALLD_RECALL_VECTOR_CANDIDATES": "10",
            "RECALLD_RECALL_OVERFETCH_ROUNDS": "1",
            "RECALLD_RECALL_EXACT_FILTER_MAX_RECORDS": "20",
        }
    )
    ns = "vec-far-filters"
    harbour = [
        {
            "kind": "doc",
            "title": f"Harbour note {i}",
            "body": "Boats moor in the harbour overnight; the harbour master assigns each boat a berth.",
        }
        for i in range(60)
    ]
    rules = [
        {
            "kind": "rule",
            "title": f"Expense rule {i}",
            "body": f"Expense reports above {100 * (i + 1)} euros need a scanned receipt and a manager's approval.",
            "attributes": {"team": "finance"},
        }
        for i in range(14)
    ]
    memos = [
        {
            "kind": "memo",
            "title": f"Cafeteria memo {i}",
            "body": f"In week {i} the cafeteria serves soup, bread and salad.",
        }
        for i in range(30)
    ]
    ids = put_all(daemon, ns, harbour + rules + memos)
    rule_ids = {ids[r["title"]] for r in rules}
    question = {"namespace": ns, "query": "where do boats moor in the harbour", "k": 10}

    # the reference: the unfiltered search of the whole namespace (104 records, exact), rules kept
    unfiltered = vector(daemon, ns, question["query"], k=len(ids))["results"]
    assert len(unfiltered) == len(ids) and all(r["id"] not in rule_ids for r in unfiltered[:60])
    best = [r["id"] for r in unfiltered if r["id"] in rule_ids][:10]
    # fewer records pass than asked for: all of them, and nothing is said to be missing
    status, all_rules = daemon.call(
        "POST", "/v1/recall", {**question, "k": 20, "kinds": ["rule"], "routes": ["vector"]}
    )
    assert status == 200 and {r["id"] for r in all_rules["results"]} == rule_ids, all_rules
    assert all_rules["degraded_routes"] == []
    assert vector(daemon, ns, question["query"], kinds=[])["results"] == []
    for filters in ({"kinds": ["rule"]}, {"attributes": {"team": "finance"}}):
        for routes in (["vector"], None):
            body = {**question, **filters, **({"routes": routes} if routes else {})}
            status, answer = daemon.call("POST", "/v1/recall", body)
            assert status == 200 and answer["degraded_routes"] == [], (filters, routes, answer)
            assert [r["id"] for r in answer["results"]] == best, (filters, routes)
            scores = [r["route_scores"]["vector"] for r in answer["results"]]
            assert scores == sorted(scores, reverse=True)

    status, answer = daemon.call("POST", "/v1/recall", {**question, "kinds": ["memo"], "routes": ["vector"]})
    assert status == 200 and len(answer["results"]) < 10, answer
    assert [(d["route"], d["reason"]) for d in answer["degraded_routes"]] == [("vector", "overfetch_exhausted")]
    message = answer["degraded_routes"][0]["message"]
    assert "search for 40 records" in message and "narrow the filters" in message, message
    metrics = daemon.http.get("/metrics").text
    assert re.search(r'recalld_recall_degraded_total\{reason="overfetch_exhausted",route="vector"\} 1\.0', metrics)


def test_rebuild_swaps_and_activate_rolls_back(daemon: Daemon, corpus: tuple[str, dict[str, str]]) -> None:
    before = wait_for_generation(daemon)["current"]["id"]

    def index_calls() -> int:
        usage = daemon.call("GET", "/v1/usage")[1]["usage"]
        return sum(row["calls"] for row in usage if row["purpose"] == "index")

    embedded = index_calls()
    status, body = daemon.call("POST", "/admin/generations/rebuild", {})
    assert status == 202 and body["build_id"]
    current = eventually(
        lambda: daemon.call("GET", "/v1/generations")[1],
        60,
        "the rebuilt generation current",
        accept=lambda body: body["current"]["id"] != before,
    )
    assert current["previous"] == before
    assert index_calls() == embedded, "a rebuild of an unchanged space re-embeds nothing"
    build = next(b for b in current["builds"] if b["id"] == body["build_id"])
    assert build["state"] == "done" and build["done"] == build["total"] > 0
    status, answer = daemon.call("POST", f"/admin/generations/{before}/activate", {})
    assert (status, answer["id"]) == (200, before)
    assert daemon.call("GET", "/v1/generations")[1]["current"]["id"] == before
    ns, ids = corpus
    eventually(
        lambda: vector(daemon, ns, QUERIES["deploy"], k=1)["generation"],
        30,
        "recall answering from the generation activated",
        accept=lambda generation: generation == before,
    )
    assert vector(daemon, ns, QUERIES["deploy"], k=1)["results"][0]["id"] == ids["deploy"]
    status, body = daemon.call("POST", "/admin/generations/g-nope/activate", {})
    assert status == 404 and body["error"]["code"] == "not_found"


def test_usage_rows_are_metered_per_purpose(daemon: Daemon, corpus: tuple[str, dict[str, str]]) -> None:
    ns, _ = corpus
    vector(daemon, ns, "anything at all")
    status, usage = daemon.call("GET", f"/v1/usage?namespace={ns}")
    assert status == 200
    purposes = {row["purpose"]: row for row in usage["usage"]}
    assert purposes["index"]["input_tokens"] > 0 and purposes["index"]["provider"] == "local"
    assert purposes["query"]["calls"] >= 1
    assert all(row["namespace"] == ns for row in usage["usage"])
    assert usage["system"] == [], "system purposes never count in a namespace's report"
    metrics = daemon.http.get("/metrics").text
    outcomes = dict(re.findall(r'^recalld_usage_rows_total\{outcome="(\w+)"\} (\S+)$', metrics, re.M))
    assert float(outcomes["written"]) >= sum(row["calls"] for row in usage["usage"]), metrics
    assert float(outcomes["failed"]) == float(outcomes["dropped"]) == 0


def stage_histograms(daemon: Daemon) -> dict[str, tuple[float, float]]:
    """recalld_recall_stage_seconds by stage: (count, sum)."""
    metrics = daemon.http.get("/metrics").text
    pattern = r'^recalld_recall_stage_seconds_(count|sum)\{stage="(\w+)"\} (\S+)$'
    found: dict[str, dict[str, float]] = {}
    for field, stage, value in re.findall(pattern, metrics, re.M):
        found.setdefault(stage, {})[field] = float(value)
    return {stage: (v["count"], v["sum"]) for stage, v in found.items()}


def test_each_stage_of_a_recall_is_a_prometheus_histogram(daemon: Daemon, corpus: tuple[str, dict[str, str]]) -> None:
    ns, _ = corpus
    before = stage_histograms(daemon)
    status, fused = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": "who carries the pager at night"})
    assert status == 200, fused
    status, text_only = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": "pager", "routes": ["fts"]})
    assert status == 200, text_only
    after = stage_histograms(daemon)
    ran = {"embed", "vector", "fts", "rehydrate", "fusion", "total"}
    assert ran <= set(after), after
    for stage in ran | {"structured"}:
        count, total_s = after.get(stage, (0.0, 0.0))
        count_before, total_before_s = before.get(stage, (0.0, 0.0))
        # the vector route's stages ran in the fused recall only; neither asked for `structured`
        answers = [fused] if stage in ("embed", "vector") else [] if stage == "structured" else [fused, text_only]
        assert count - count_before == len(answers), (stage, before.get(stage), after.get(stage))
        reported_ms = sum(answer["timings_ms"][stage] for answer in answers)
        # the answer rounds each stage to the microsecond
        assert abs((total_s - total_before_s) * 1000 - reported_ms) < 0.01, (stage, reported_ms)


# A long record: paragraphs about gardens, then one last paragraph on another subject.
GARDEN = "Roses like sun and well-drained soil; prune them in early spring and feed them monthly. " * 14


def create_notes(daemon: Daemon, ns: str, last_paragraph: str) -> dict[str, Any]:
    status, created = daemon.call(
        "POST",
        "/v1/records",
        {"namespace": ns, "kind": "doc", "title": "Notes", "body": GARDEN + "\n\n" + last_paragraph},
    )
    assert status == 201
    return created


def test_a_long_record_is_chunked_and_the_snippet_is_its_best_chunk(daemon: Daemon) -> None:
    ns = "vec-chunks"
    created = create_notes(
        daemon, ns, "The replica streams write-ahead log records from the primary and can take over after a failure."
    )
    daemon.call("POST", "/v1/records", {"namespace": ns, "kind": "doc", "title": "Other", "body": "Bread needs flour."})
    wait_for_generation(daemon)
    hits = eventually(
        lambda: vector(daemon, ns, "standby server takes over when the main one dies", k=1)["results"],
        60,
        "the long record found first by meaning",
        accept=lambda hits: hits and hits[0]["id"] == created["id"],
    )
    assert "replica" in hits[0]["snippet"] or "write-ahead" in hits[0]["snippet"], hits[0]["snippet"]
    assert "Roses" not in hits[0]["snippet"]


def test_a_full_text_hit_shows_its_best_matching_chunk(daemon: Daemon) -> None:
    ns = "fts-chunks"
    created = create_notes(
        daemon, ns, "Writes are acknowledged once a quorum of three replicas has persisted the entry."
    )
    wait_for_generation(daemon)
    chunks = sql(
        daemon.env["RECALLD_STORE_DSN"],
        "SELECT count(*) FROM chunks WHERE record_id = $1 AND retired_at IS NULL",
        uuid.UUID(created["id"]),
    )
    assert chunks[0]["count"] >= 2, "the record is long enough to be cut into several chunks"
    status, answer = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": "quorum", "routes": ["fts"]})
    assert status == 200 and answer["results"][0]["id"] == created["id"]
    snippet = answer["results"][0]["snippet"]
    assert "quorum" in snippet and "Roses" not in snippet, snippet


def test_a_repeated_query_reuses_its_vector_without_calling_the_model(
    daemon: Daemon, corpus: tuple[str, dict[str, str]]
) -> None:
    ns, ids = corpus

    def query_calls() -> int:
        _, usage = daemon.call("GET", f"/v1/usage?namespace={ns}")
        return sum(row["calls"] for row in usage["usage"] if row["purpose"] == "query")

    def cache_hits() -> float:
        metrics = daemon.http.get("/metrics").text
        found = re.search(r'^recalld_query_vector_cache_lookups_total\{result="hit"\} (\S+)$', metrics, re.M)
        assert found, "the cache's lookups are in /metrics"
        return float(found.group(1))

    query = "who keeps the pager during the week, asked twice"
    first = vector(daemon, ns, query)
    calls, hits = query_calls(), cache_hits()
    second = vector(daemon, ns, query)
    assert [r["id"] for r in second["results"]] == [r["id"] for r in first["results"]]
    assert second["results"][0]["id"] == ids["oncall"]
    assert query_calls() == calls, "the second ask did not reach the model"
    assert cache_hits() == hits + 1


def test_any_word_matches_are_fetched_only_when_full_text_answers_alone(
    daemon: Daemon, corpus: tuple[str, dict[str, str]]
) -> None:
    ns, ids = corpus
    query = "signing ledger"  # no record holds both words
    alone = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": query, "routes": ["fts"]})[1]
    assert {hit["id"] for hit in alone["results"]} == {ids["keys"], ids["backup"]}, alone
    fused = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": query})[1]
    assert fused["results"] and not fused["degraded_routes"]
    assert all("fts" not in hit["routes"] for hit in fused["results"]), "any-word matches only break ties"


def index_snapshot(daemon: Daemon) -> dict[str, Any]:
    """The index manager's own counters (`/v1/generations` `index`, administrators only)."""
    status, body = daemon.call("GET", "/v1/generations")
    assert status == 200, body
    return dict(body["index"])


def test_once_all_is_indexed_only_changed_records_are_read_and_a_change_counts_at_once(daemon: Daemon, ns: str) -> None:
    status, _ = daemon.call("POST", "/v1/records", {"namespace": ns, "kind": "doc", "title": "Quiet", "body": "Calm."})
    assert status == 201
    wait_for_generation(daemon)
    # Finding unindexed records reads every live record it looks at. Once all are indexed the
    # index manager's polls (every 2 s) look only at records changed since: two steps of its own
    # later, the count of full passes has not moved.

    def settled() -> bool:
        before = index_snapshot(daemon)
        after_two = eventually(
            lambda: index_snapshot(daemon),
            30,
            "two more index steps",
            accept=lambda now: now["steps"] >= before["steps"] + 2,
        )
        return bool(after_two["full_passes"] == before["full_passes"])

    eventually(settled, 60, "the index manager to stop reading every record once all are indexed")
    passes = index_snapshot(daemon)["full_passes"]

    # A write whose notification is lost (made here without one) is counted at once all the
    # same: it is a change after the mark. A caller polling `pending` is never told "caught up"
    # about a record it has just written.
    sql(
        daemon.env["RECALLD_STORE_DSN"],
        "UPDATE records SET body = 'Calm again.', revision = revision + 1,"
        " change_seq = nextval('record_change_seq') WHERE namespace = $1",
        ns,
    )
    body = daemon.call("GET", "/v1/generations")[1]
    assert body["pending"] >= 1, body
    body = eventually(
        lambda: daemon.call("GET", "/v1/generations")[1],
        60,
        "the new revision indexed",
        accept=lambda body: body["pending"] == 0,
    )
    assert body["index"]["full_passes"] == passes  # indexed without reading every record
    answer = vector(daemon, ns, "calm again")
    assert [hit["revision"] for hit in answer["results"]] == [2]


def record_cosines(daemon: Daemon, ns: str, query: str) -> dict[str, float]:
    """Record id -> cosine of `query` and the record's best chunk, from the stored vectors and the
    same local model and query template the daemon uses."""
    from recalld.actors.embedding.template import render_query
    from recalld.providers.local import LocalProvider

    _, ready = daemon.call("GET", "/readyz")
    detail = ready["checks"]["embedding"]["detail"]
    rows = sql(
        daemon.env["RECALLD_STORE_DSN"],
        """SELECT c.record_id, v.vector FROM chunks c
           JOIN records r ON r.id = c.record_id AND r.revision = c.revision
           JOIN chunk_vectors v ON v.surrogate = c.surrogate AND v.space_id = $2
           WHERE r.namespace = $1 AND r.deleted_at IS NULL AND c.retired_at IS NULL""",
        ns,
        detail["space_id"],
    )
    vectors, _ = LocalProvider().encode([render_query(query, version=detail["space"]["template_version"]).text])
    best: dict[str, float] = {}
    for row in rows:
        cosine = float(np.frombuffer(row["vector"], dtype="<f4") @ vectors[0])
        best[str(row["record_id"])] = max(cosine, best.get(str(row["record_id"]), -1.0))
    return best


def test_a_vector_threshold_keeps_only_the_records_at_least_that_close(
    daemon: Daemon, corpus: tuple[str, dict[str, str]]
) -> None:
    """`thresholds.vector` is a cosine floor: exactly the records whose best chunk reaches it come
    back. None reaching it, the vector route answers nothing (it is not down) and full text still
    answers. The floor is in the answer, and in the telemetry row with the fusion settings."""
    ns, ids = corpus
    query = QUERIES["keys"]
    ranked = sorted(record_cosines(daemon, ns, query).items(), key=lambda item: -item[1])
    assert ranked[0][0] == ids["keys"]
    floor = round((ranked[0][1] + ranked[1][1]) / 2, 6)  # between the best record and the next
    answer = vector(daemon, ns, query, k=5, thresholds={"vector": floor})
    assert [r["id"] for r in answer["results"]] == [ids["keys"]], (floor, ranked[:3])
    assert answer["results"][0]["route_scores"]["vector"] == pytest.approx(ranked[0][1], abs=1e-4)
    assert answer["fusion"]["thresholds"] == {"vector": floor} and answer["degraded_routes"] == []
    below = round((ranked[2][1] + ranked[3][1]) / 2, 6)  # the best three
    assert [r["id"] for r in vector(daemon, ns, query, k=5, thresholds={"vector": below})["results"]] == [
        record for record, _ in ranked[:3]
    ]
    assert len(vector(daemon, ns, query, k=10, thresholds={"vector": -1})["results"]) == len(RECORDS)
    assert vector(daemon, ns, query, k=5, thresholds={"vector": 1})["results"] == []

    status, fused = daemon.call(
        "POST", "/v1/recall", {"namespace": ns, "query": "Tuesdays", "k": 3, "thresholds": {"vector": 1}}
    )
    assert status == 200 and fused["degraded_routes"] == [], fused
    assert [(r["id"], r["routes"]) for r in fused["results"]] == [(ids["deploy"], {"fts": 1})]
    assert set(fused["results"][0]["route_scores"]) == {"fts"}
    # the vector route found nothing, so full text answers as if alone: any-word matches too
    _, loose = daemon.call(
        "POST", "/v1/recall", {"namespace": ns, "query": "signing ledger", "thresholds": {"vector": 1}}
    )
    assert {hit["id"] for hit in loose["results"]} == {ids["keys"], ids["backup"]}, loose
    # a vector score sent back as the floor keeps its own record: the floor is inclusive
    exact = answer["results"][0]["route_scores"]["vector"]
    assert [r["id"] for r in vector(daemon, ns, query, k=5, thresholds={"vector": exact})["results"]] == [ids["keys"]]
    (row,) = search_rows(daemon, [fused["search_id"]])
    assert json.loads(row["fusion"])["thresholds"] == {"vector": 1.0}


def test_a_configured_floor_applies_unless_the_request_sets_its_own(make_daemon: Any) -> None:
    configured = make_daemon(env={"RECALLD_RECALL_THRESHOLDS": "{ vector = 0.9 }"})
    status, answer = configured.call("POST", "/v1/recall", {"namespace": "floors", "query": "anything", "k": 3})
    assert status == 200 and answer["fusion"]["thresholds"] == {"vector": 0.9}, answer
    # -1 lets every vector candidate through: the request turns the configured floor off
    body = {"namespace": "floors", "query": "anything", "thresholds": {"vector": -1}}
    assert configured.call("POST", "/v1/recall", body)[1]["fusion"]["thresholds"] == {"vector": -1.0}
    # a request that does not ask for the vector route is not told of its floor
    only_fts = {"namespace": "floors", "query": "anything", "routes": ["fts"]}
    assert configured.call("POST", "/v1/recall", only_fts)[1]["fusion"]["thresholds"] == {}
