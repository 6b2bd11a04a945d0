"""Fusion rules, table-driven: order, ties, weights, and single-route answers keep their order."""

from __future__ import annotations

import random
import uuid

import pytest

from recalld.actors.recall.fusion import (
    RRF_NAME,
    RRF_VERSION,
    WEIGHTED_NAME,
    WEIGHTED_VERSION,
    reciprocal_rank,
    shared_ranks,
    weighted_score,
)


def keys(fused: list) -> list[str]:
    return [f.key for f in fused]


def best_first(*keys: str) -> list[tuple[str, float]]:
    """A route's list in this order, every score distinct."""
    return [(key, float(len(keys) - position)) for position, key in enumerate(keys)]


def test_rrf_rewards_agreement_between_routes() -> None:
    fused = reciprocal_rank({"fts": best_first("a", "b", "c"), "vector": best_first("c", "a", "d")}, k=60)
    assert keys(fused) == ["a", "c", "b", "d"]
    assert fused[0].ranks == {"fts": 1, "vector": 2}
    assert fused[0].score == pytest.approx(1 / 61 + 1 / 62)


def test_a_single_route_keeps_its_order() -> None:
    assert keys(reciprocal_rank({"fts": best_first("x", "y", "z")}, k=60)) == ["x", "y", "z"]
    assert keys(weighted_score({"vector": [("x", 0.9), ("y", 0.5), ("z", 0.1)]}, weights={})) == ["x", "y", "z"]


def test_equal_scores_come_back_in_a_stable_order() -> None:
    # b and a tie on score and on best rank: the key decides, whatever the input order
    one = reciprocal_rank({"fts": best_first("b"), "vector": best_first("a")}, k=60)
    two = reciprocal_rank({"vector": best_first("a"), "fts": best_first("b")}, k=60)
    assert keys(one) == keys(two) == ["a", "b"]


def test_tied_record_ids_order_as_their_text_does() -> None:
    # the tie-break compares UUIDs by value; rrf v2 defined it on their text, which orders alike
    ids = [uuid.UUID(int=random.Random(seed).getrandbits(128)) for seed in range(40)]
    fused = reciprocal_rank({f"route{i}": [(key, 1.0)] for i, key in enumerate(ids)}, k=60)
    assert keys(fused) == sorted(ids, key=str)


@pytest.mark.parametrize(
    ("scores", "ranks"),
    [
        ([0.9, 0.5, 0.5, 0.1], [1, 2, 2, 4]),
        ([2.5, 2.5, 2.5], [1, 1, 1]),
        ([3.0, 2.0, 1.0], [1, 2, 3]),
        ([], []),
    ],
)
def test_scores_alike_share_a_rank(scores: list[float], ranks: list[int]) -> None:
    assert shared_ranks(scores) == ranks


@pytest.mark.parametrize("fuse", ["rrf", "weighted"])
def test_candidates_a_route_scored_alike_are_ordered_by_the_other_route(fuse: str) -> None:
    # full text scores every page holding an identifier alike (2.5); its listing order among
    # them is arbitrary, so the vector route decides, whichever way full text listed them
    for fts in ([("a", 2.5), ("b", 2.5), ("c", 1.2)], [("b", 2.5), ("a", 2.5), ("c", 1.2)]):
        scored = {"fts": fts, "vector": [("b", 0.9), ("c", 0.8), ("a", 0.5)]}
        fused = reciprocal_rank(scored, k=30) if fuse == "rrf" else weighted_score(scored, weights={})
        assert keys(fused)[:2] == ["b", "a"]
        assert {f.key: f.ranks["fts"] for f in fused} == {"a": 1, "b": 1, "c": 3}


def test_rrf_depth_counts_shared_ranks() -> None:
    # a tie across the cut: both share rank 1, both score
    fused = reciprocal_rank({"fts": [("a", 2.0), ("b", 2.0), ("c", 1.0)]}, k=60, depth=1)
    assert {f.key: f.score for f in fused} == pytest.approx({"a": 1 / 61, "b": 1 / 61, "c": 0.0})


def test_rrf_weights_scale_a_route() -> None:
    fused = reciprocal_rank(
        {"fts": best_first("a"), "vector": best_first("b")}, k=60, weights={"fts": 0.5, "vector": 1.0}
    )
    assert keys(fused) == ["b", "a"]


def test_weighted_normalises_each_route() -> None:
    # ts_rank is tiny, cosine large: normalised, both routes' best count fully
    fused = weighted_score(
        {"fts": [("a", 0.09), ("b", 0.01)], "vector": [("b", 0.80), ("c", 0.40)]},
        weights={"fts": 1.0, "vector": 1.0},
    )
    assert keys(fused) == ["a", "b", "c"]  # a and b tie at 1.0 and at best rank 1: the key decides
    scores = {f.key: f.score for f in fused}
    assert scores["a"] == pytest.approx(1.0) and scores["b"] == pytest.approx(1.0) and scores["c"] == pytest.approx(0.0)


def test_a_route_listing_a_key_twice_is_a_bug() -> None:
    with pytest.raises(ValueError):
        reciprocal_rank({"fts": best_first("a", "a")}, k=60)


@pytest.mark.parametrize(
    ("depth", "expected"),
    [
        # without a depth every position scores: b (3rd and 3rd) beats a (1st, then 9th)
        (None, ["b", "a", "c"]),
        # only the first 2 of each route score: b's places no longer count, a's 1st still does
        (2, ["a", "b", "c"]),
    ],
)
def test_rrf_depth_limits_which_positions_score(depth: int | None, expected: list[str]) -> None:
    fts = best_first("a", "f1", "b", "f2", "f3", "f4", "f5", "f6", "c")
    vector = best_first("v1", "v2", "b", "v3", "v4", "v5", "v6", "v7", "a")
    fused = reciprocal_rank({"fts": fts, "vector": vector}, k=60, depth=depth)
    assert [key for key in keys(fused) if key in {"a", "b", "c"}] == expected


def test_rrf_depth_keeps_unscored_keys_after_scored_ones() -> None:
    fused = reciprocal_rank({"fts": best_first("a", "b", "c"), "vector": best_first("d")}, k=60, depth=1)
    assert keys(fused)[:2] == ["a", "d"]
    assert {f.key: f.score for f in fused}["c"] == 0.0
    assert fused[-1].ranks == {"fts": 3}


def test_factors_scale_single_candidates_of_a_route() -> None:
    # weak full-text evidence (factor 0.1) no longer outranks the vector route's own order
    rankings = {"fts": best_first("noise", "answer"), "vector": best_first("answer", "other")}
    plain = reciprocal_rank(rankings, k=30)
    assert keys(plain)[0] == "answer"
    weak = reciprocal_rank(rankings, k=30, factors={"fts": [0.1, 0.1]})
    assert keys(weak) == ["answer", "other", "noise"]
    # strong evidence (factor 2) puts a full-text-only hit above the vector route's first
    strong = reciprocal_rank(
        {"fts": best_first("exact"), "vector": best_first("near", "exact2")}, k=30, factors={"fts": [2.0]}
    )
    assert keys(strong)[0] == "exact"
    assert strong[0].score == pytest.approx(2 / 31)


def test_factors_apply_to_weighted_fusion_after_normalising() -> None:
    fused = weighted_score(
        {"fts": [("a", 2.5), ("b", 0.5)], "vector": [("b", 0.9), ("c", 0.3)]},
        weights={"fts": 1.0, "vector": 1.0},
        factors={"fts": [0.5, 0.5]},
    )
    scores = {f.key: f.score for f in fused}
    assert scores == pytest.approx({"a": 0.5, "b": 1.0, "c": 0.0})
    assert keys(fused) == ["b", "a", "c"]


@pytest.mark.parametrize(
    "factors",
    [
        {"fts": [1.0]},  # one factor for two keys
        {"fts": [1.0, -1.0]},
        {"fts": [1.0, float("nan")]},
        {"fts": [1.0, float("inf")]},
    ],
)
def test_factors_must_match_the_list_and_be_finite(factors: dict[str, list[float]]) -> None:
    with pytest.raises(ValueError):
        reciprocal_rank({"fts": best_first("a", "b")}, k=60, factors=factors)
    with pytest.raises(ValueError):
        weighted_score({"fts": [("a", 1.0), ("b", 0.5)]}, weights={}, factors=factors)


def test_methods_are_named_and_versioned() -> None:
    assert (RRF_NAME, WEIGHTED_NAME) == ("rrf", "weighted")
    # v2: per-candidate factors (the full-text evidence levels); v3: scores alike share a rank
    assert RRF_VERSION == 3 and WEIGHTED_VERSION == 3
