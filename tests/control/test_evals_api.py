"""`POST /v1/evals` and `GET /v1/evals`: a run is kept whole or refused with a 400 naming why."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import Daemon

FIGURES = {"hit_at_5": 2, "of": 3, "mrr_at_10": 0.5, "recall_at_10": 0.6667, "ndcg_at_10": 0.55}


def run(**changes: Any) -> dict[str, Any]:
    body = {
        "golden": "api-set",
        "source": "/sets/api/questions.toml",
        "namespace": "eval-api-set-20261202T000000Z",
        "space": {"provider": "local", "model": "m", "dimension": 384, "template_version": 1},
        "space_id": "vs1-abc",
        "questions": 3,
        "count": 2,
        "of": 3,
        "floor": 2,
        "verdict": "at_or_above_floor",
        "routes": {"fused": {"natural": FIGURES, "all": FIGURES}},
        "started_at": "2026-12-02T00:00:00Z",
        "duration_s": 12.5,
    }
    return body | changes


def runs_of(daemon: Daemon, golden: str) -> list[dict[str, Any]]:
    status, body = daemon.call("GET", f"/v1/evals?golden={golden}")
    assert status == 200, body
    return list(body["runs"])


def test_a_run_is_recorded_and_listed_newest_first(daemon: Daemon) -> None:
    status, first = daemon.call("POST", "/v1/evals", run(started_at="2026-12-01T00:00:00Z", golden="listed"))
    assert status == 201, first
    status, second = daemon.call("POST", "/v1/evals", run(golden="listed", count=None, of=None, verdict=None))
    assert status == 201, second
    listed = runs_of(daemon, "listed")
    assert [r["id"] for r in listed] == [second["id"], first["id"]]
    assert listed[1]["routes"] == {"fused": {"natural": FIGURES, "all": FIGURES}}
    assert listed[1]["space"]["model"] == "m" and listed[1]["started_at"] == "2026-12-01T00:00:00Z"
    assert (listed[0]["count"], listed[0]["of"], listed[0]["verdict"]) == (None, None, None)
    status, limited = daemon.call("GET", "/v1/evals?golden=listed&limit=1")
    assert status == 200 and [r["id"] for r in limited["runs"]] == [second["id"]]


@pytest.mark.parametrize(
    ("body", "code", "says"),
    [
        (run(extra=1), "invalid_request", "extra"),
        (run(questions=0), "invalid_request", "questions"),
        (run(routes={"structured": {"all": FIGURES}}), "invalid_request", "routes"),
        (run(verdict="fine"), "invalid_request", "verdict"),
        (run(count=4), "invalid_value", "count 4 of 3"),
        (run(count=None), "invalid_value", "count and of come together"),
        (run(routes={"fused": {"all": FIGURES | {"hit_at_5": 5}}}), "invalid_value", "hit_at_5 5 of 3"),
        (run(routes={"fused": {"all": FIGURES | {"mrr_at_10": 1.5}}}), "invalid_request", "mrr_at_10"),
        (run(routes={}), "invalid_value", "at least one route"),
        (run(golden=" "), "invalid_value", "golden must not be empty"),
        (run(namespace="a\x00b"), "invalid_value", "NUL"),
        (run(started_at="2026-12-02T00:00:00"), "invalid_value", "time zone"),
    ],
)
def test_bad_runs_are_refused_and_nothing_is_written(
    daemon: Daemon, body: dict[str, Any], code: str, says: str
) -> None:
    body["golden"] = body["golden"] if body["golden"].strip() == "" else "refused"
    status, answer = daemon.call("POST", "/v1/evals", body)
    assert status == 400, answer
    assert answer["error"]["code"] == code
    assert says in answer["error"]["message"]
    assert runs_of(daemon, "refused") == []


@pytest.mark.parametrize("query", ["limit=0", "limit=1001", "limit=ten", "golden=" + "x" * 201])
def test_bad_history_queries_are_refused(daemon: Daemon, query: str) -> None:
    status, answer = daemon.call("GET", f"/v1/evals?{query}")
    assert status == 400, answer
    assert answer["error"]["code"] == "invalid_value"
