"""The recall policy, table-driven: caps, the loose full-text step, when full text waits for
the embedding, floors, fusion's evidence weights, the over-fetch, shortfall reasons and the
"nothing answered" verdict."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from recalld.actors.recall.policy import (
    Degradation,
    DegradedReason,
    NothingAnswered,
    Overfetch,
    RecallPolicy,
    above_floor,
    filled,
    fts_waits_for_embedding,
    loose_after,
    loose_up_front,
    nothing_answered,
    one_per_record,
    route_limit_missed,
    still_indexing,
    unanswered,
)
from recalld.actors.recall.query import Evidence, banded_score

POLICY = RecallPolicy(
    fts_candidates=30,
    structured_candidates=20,
    vector_candidates=40,
    rrf_k=30.0,
    weights={"fts": 1.0, "vector": 1.0, "structured": 0.5},
    fts_evidence_weights={"exact": 2.0, "all_terms": 0.03, "some_terms": 0.03},
    thresholds={},
    overfetch_rounds=3,
    exact_filter_max_records=1000,
    partial_weight=0.5,
)


@dataclass(frozen=True)
class Hit:
    id: str
    score: float


LATE = DegradedReason.DEADLINE_EXCEEDED


def late(route: str) -> Degradation:
    return Degradation(route, LATE, "no answer within 100 ms")


def down(route: str, reason: str = "circuit_open") -> Degradation:
    return Degradation(route, reason, "")


@pytest.mark.parametrize(
    ("k", "caps"),
    [
        (10, {"fts": 30, "structured": 20, "vector": 40}),
        (25, {"fts": 30, "structured": 25, "vector": 40}),
        (200, {"fts": 200, "structured": 200, "vector": 200}),  # every route hands fusion k at least
    ],
)
def test_each_route_is_asked_for_its_cap_and_at_least_k(k: int, caps: dict[str, int]) -> None:
    assert POLICY.caps(k) == caps


@pytest.mark.parametrize(
    ("configured", "requested", "floors"),
    [
        ({}, None, {}),
        ({"vector": 0.3}, None, {"vector": 0.3}),
        ({"vector": 0.3}, {"vector": 0.5}, {"vector": 0.5}),  # the request's own floor wins
        ({"vector": 0.3}, {"vector": -1.0}, {"vector": -1.0}),  # -1: a configured floor turned off
        ({}, {"vector": 0.2}, {"vector": 0.2}),
    ],
)
def test_floors_are_the_configs_overridden_by_the_requests(
    configured: dict[str, float], requested: dict[str, float] | None, floors: dict[str, float]
) -> None:
    assert replace(POLICY, thresholds=configured).floors(requested) == floors


@pytest.mark.parametrize(
    ("floor", "kept"),
    [
        (None, ["a", "b", "c"]),
        (0.5, ["a", "b"]),  # inclusive: 0.5 reaches a floor of 0.5
        (0.51, ["a"]),
        (0.95, []),
        (-1.0, ["a", "b", "c"]),
    ],
)
def test_the_vector_floor_keeps_the_head_that_reaches_it(floor: float | None, kept: list[str]) -> None:
    found = [Hit("a", 0.9), Hit("b", 0.5), Hit("c", 0.2)]
    assert [h.id for h in above_floor(found, floor)] == kept


def test_several_chunks_of_a_record_count_once_at_its_best_position() -> None:
    found = [Hit("a", 0.9), Hit("b", 0.8), Hit("a", 0.7), Hit("c", 0.6), Hit("b", 0.5)]
    assert one_per_record(found) == [Hit("a", 0.9), Hit("b", 0.8), Hit("c", 0.6)]


@pytest.mark.parametrize(
    ("routes", "found", "up_front", "after"),
    [
        # without the vector route, any-word matches are fetched in the first pass, never again
        (["fts"], {"fts": ["x"]}, True, False),
        (["fts", "structured"], {"fts": []}, True, False),
        # next to the vector route: only once it failed or found nothing
        (["fts", "vector"], {"fts": ["x"], "vector": ["y"]}, False, False),
        (["fts", "vector"], {"fts": ["x"], "vector": []}, False, True),  # nothing above its floor
        (["fts", "vector"], {"fts": []}, False, True),  # the vector route failed
        (["fts", "vector"], {"vector": []}, False, False),  # full text itself failed
        (["vector"], {"vector": []}, False, False),  # full text was not asked for
    ],
)
def test_the_loose_full_text_step_runs_only_when_its_matches_are_the_answer(
    routes: list[str], found: dict[str, list[str]], up_front: bool, after: bool
) -> None:
    assert loose_up_front(routes) is up_front
    assert loose_after(routes, found) is after


@pytest.mark.parametrize(
    ("setting", "in_process", "waits"),
    [
        ("auto", True, True),  # the local model takes every core while it runs
        ("auto", False, False),  # a remote provider's wait costs this machine nothing
        ("always", False, True),
        ("always", True, True),
        ("never", True, False),
        ("never", False, False),
    ],
)
def test_full_text_waits_for_the_embedding_when_that_runs_on_our_cores(
    setting: str, in_process: bool, waits: bool
) -> None:
    assert fts_waits_for_embedding(setting, embedded_in_process=in_process) is waits


@pytest.mark.parametrize(("pending", "named"), [(0, False), (-1, False), (1, True), (9000, True)])
def test_the_vector_route_is_named_while_its_namespace_is_indexed(pending: int, named: bool) -> None:
    degraded = still_indexing(pending)
    if not named:
        assert degraded is None
        return
    assert degraded is not None
    assert (degraded.route, degraded.reason, degraded.pending) == ("vector", DegradedReason.VECTOR_INDEXING, pending)
    assert str(pending) in degraded.message


@pytest.mark.parametrize("method", ["rrf", "weighted"])
def test_a_partial_vector_route_does_not_crowd_out_full_text(method: str) -> None:
    # The trial: half indexed, the vector route's best were wrong files and full text's
    # every-word matches (weighed 0.03 next to a complete vector route) were right.
    scored = {
        "fts": [("right", banded_score(Evidence.ALL_TERMS, 0.9)), ("also", banded_score(Evidence.ALL_TERMS, 0.8))],
        "vector": [(f"wrong {i}", 0.8 - i / 100) for i in range(10)],
    }
    complete = POLICY.fuse(method, scored)
    partial = POLICY.fuse(method, scored, partial={"vector"})
    assert complete[0].key == "wrong 0"  # a complete vector route leads, as before
    assert partial[0].key == "right"
    if method == "rrf":  # every full-text match ahead of a half-built route's first
        assert [f.key for f in partial[:2]] == ["right", "also"]
    # its candidates still count: the weights only scale
    assert {f.key for f in partial} == {f.key for f in complete}


def test_full_text_weighs_by_what_it_matched() -> None:
    # one record per evidence level, full text's order weakest first: the weights reorder them
    scored = {
        "fts": [
            ("some", banded_score(Evidence.SOME_TERMS, 0.9)),
            ("all", banded_score(Evidence.ALL_TERMS, 0.5)),
            ("exact", banded_score(Evidence.EXACT, 0.1)),
        ]
    }
    scored["fts"].sort(key=lambda pair: pair[1])  # weakest first, against the banded order
    for method in ("rrf", "weighted"):
        fused = POLICY.fuse(method, scored)
        assert fused[0].key == "exact", method


@pytest.mark.parametrize(
    ("method", "exact_score"),
    [
        ("rrf", 2.0 / 31),  # weight 1 * factor 2 / (rrf_k 30 + rank 1): above the vector's first, 1 / 31
        ("weighted", 2.0),  # normalised to 1, times factor 2: above the vector's first, 1
    ],
)
def test_an_exact_full_text_match_outranks_the_vector_routes_first(method: str, exact_score: float) -> None:
    scored = {
        "fts": [("exact", banded_score(Evidence.EXACT, 0.2))],
        "vector": [("v1", 0.8), ("v2", 0.7)],
    }
    fused = POLICY.fuse(method, scored)
    assert [f.key for f in fused] == ["exact", "v1", "v2"]
    assert fused[0].score == pytest.approx(exact_score)


@pytest.mark.parametrize(
    ("method", "words_score"),
    [("rrf", 0.03 / 31), ("weighted", 0.03)],
)
def test_plain_words_cannot_lift_a_record_above_the_vector_routes_first(method: str, words_score: float) -> None:
    scored = {
        "fts": [("words", banded_score(Evidence.ALL_TERMS, 0.9))],
        "vector": [("v1", 0.8), ("v2", 0.7)],
    }
    fused = POLICY.fuse(method, scored)
    assert fused[0].key == "v1"
    assert {f.key: f.score for f in fused}["words"] == pytest.approx(words_score)


@pytest.mark.parametrize(("method", "structured_score"), [("rrf", 0.5 / 31), ("weighted", 0.5)])
def test_each_route_counts_with_its_weight(method: str, structured_score: float) -> None:
    fused = POLICY.fuse(method, {"structured": [("s", 1.0)], "vector": [("v", 0.9)]})
    assert [f.key for f in fused] == ["v", "s"]
    assert fused[1].score == pytest.approx(structured_score)


def test_an_evidence_level_not_configured_weighs_one() -> None:
    policy = replace(POLICY, fts_evidence_weights={})
    scored = {"fts": [("a", banded_score(Evidence.SOME_TERMS, 0.5))], "vector": [("b", 0.9)]}
    fused = policy.fuse("rrf", scored)
    assert {f.key: f.score for f in fused} == pytest.approx({"a": 1 / 31, "b": 1 / 31})


@pytest.mark.parametrize(
    ("max_records", "cap", "beyond_namespace", "limit"),
    [
        (1000, 30, True, 1000),
        (10, 30, True, 30),  # at least the route's cap
        (0, 30, True, None),  # 0: never
        (1000, 30, False, None),  # the index applies a namespace by itself
    ],
)
def test_the_vector_route_scores_filtered_records_exactly_when_few_pass(
    max_records: int, cap: int, beyond_namespace: bool, limit: int | None
) -> None:
    policy = replace(POLICY, exact_filter_max_records=max_records)
    assert policy.exact_filter_limit(cap, beyond_namespace=beyond_namespace) == limit


@pytest.mark.parametrize(
    ("found", "asked", "full"),
    [(30, 30, True), (29, 30, False), (0, 30, False), (120, 120, True)],
)
def test_a_route_may_have_more_only_when_it_filled_its_cap(found: int, asked: int, full: bool) -> None:
    assert filled(found, asked) is full


@pytest.mark.parametrize(
    ("found", "k", "vector_full", "rounds_done", "rounds", "step"),
    [
        (10, 10, True, 0, 3, Overfetch.DONE),  # k results
        (12, 10, True, 0, 3, Overfetch.DONE),
        (4, 10, False, 0, 3, Overfetch.DONE),  # the vector route gave all it had: truly fewer than k
        (4, 10, True, 0, 3, Overfetch.DEEPER),
        (4, 10, True, 2, 3, Overfetch.DEEPER),
        (4, 10, True, 3, 3, Overfetch.SHORT),  # no round left
        (4, 10, True, 0, 0, Overfetch.SHORT),  # over-fetch turned off
        (4, 10, False, 3, 3, Overfetch.DONE),
    ],
)
def test_the_over_fetch_searches_deeper_while_short_and_rounds_remain(
    found: int, k: int, vector_full: bool, rounds_done: int, rounds: int, step: Overfetch
) -> None:
    policy = replace(POLICY, overfetch_rounds=rounds)
    assert policy.overfetch(found=found, k=k, vector_full=vector_full, rounds_done=rounds_done) is step


@pytest.mark.parametrize(
    ("filtered_afterwards", "out_of_time", "reason", "says"),
    [
        (False, True, DegradedReason.DEADLINE_EXCEEDED, "no time to search deeper"),
        (True, True, DegradedReason.DEADLINE_EXCEEDED, "no time to search deeper"),
        (
            True,
            False,
            DegradedReason.OVERFETCH_EXHAUSTED,
            "raise [recall] exact_filter_max_records or overfetch_rounds",
        ),
        (False, False, DegradedReason.OVERFETCH_EXHAUSTED, "rehydration dropped the rest (changed or forgotten"),
    ],
)
def test_a_short_answer_names_the_vector_route_and_why(
    filtered_afterwards: bool, out_of_time: bool, reason: DegradedReason, says: str
) -> None:
    named = POLICY.shortfall(k=10, searched=480, filtered_afterwards=filtered_afterwards, out_of_time=out_of_time)
    assert (named.route, named.reason) == ("vector", reason)
    assert named.message.startswith("fewer than 10 results after the vector route's search for 480 records")
    assert says in named.message
    if not out_of_time:
        assert "(over-fetch rounds: 3)" in named.message


def test_the_reason_codes_clients_see_are_unchanged() -> None:
    assert {r.value for r in DegradedReason} == {
        "deadline_exceeded",
        "store_unavailable",
        "overfetch_exhausted",
        "vector_indexing",
    }


@pytest.mark.parametrize(
    ("limit", "deadline", "named"),
    [
        (1.0, 5.0, True),  # the route's own limit came first: named with it
        (5.0, 5.0, False),  # the request's deadline cut it: `unanswered` names it
        (6.0, 5.0, False),
    ],
)
def test_a_route_cut_off_by_its_own_limit_is_named_with_it(limit: float, deadline: float, named: bool) -> None:
    missed = route_limit_missed("fts", 250, limit=limit, deadline=deadline)
    if named:
        assert missed == Degradation("fts", LATE, "no answer within its 250 ms route limit")
    else:
        assert missed is None


def test_routes_without_an_answer_are_named_late_in_request_order() -> None:
    assert unanswered(["vector", "fts", "structured"], {"fts": []}, 300) == [
        Degradation("vector", LATE, "no answer within 300 ms"),
        Degradation("structured", LATE, "no answer within 300 ms"),
    ]


@pytest.mark.parametrize(
    ("found", "degraded", "client_time_up", "refused"),
    [
        # a route answered (even with nothing): an answer, whatever the others did
        ({"fts": []}, [down("vector")], False, False),
        ({"vector": []}, [late("fts")], True, False),
        # nothing answered: refused, unless the client's own deadline is all that cut the routes
        ({}, [down("vector")], False, True),
        ({}, [late("fts"), late("vector")], True, False),
        ({}, [late("fts"), late("vector")], False, True),  # the daemon's own limits: its fault
        ({}, [late("fts"), down("vector", "no_provider")], True, True),  # one route is down
        ({}, [down("vector", "store_unavailable")], True, True),
    ],
)
def test_nothing_answered_is_refused_unless_the_client_ran_out_of_its_own_time(
    found: dict[str, list[str]], degraded: list[Degradation], client_time_up: bool, refused: bool
) -> None:
    verdict = nothing_answered(found, degraded, client_time_up=client_time_up)
    assert (verdict is not None) is refused
    if verdict is not None:
        assert verdict.routes == tuple(degraded)


def test_the_refusal_names_every_route_and_its_reason() -> None:
    refusal = NothingAnswered([down("vector", "circuit_open"), late("fts")])
    assert refusal.message == "no requested route could answer (vector: circuit_open, fts: deadline_exceeded)"
    assert str(refusal) == refusal.message
