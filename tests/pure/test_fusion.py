"""Fusion rules, table-driven: order, ties, weights, and single-route answers keep their order."""

from __future__ import annotations

import pytest

from actors.fusion import reciprocal_rank, weighted_score


def keys(fused: list) -> list[str]:
    return [f.key for f in fused]


def test_rrf_rewards_agreement_between_routes() -> None:
    fused = reciprocal_rank({"fts": ["a", "b", "c"], "vector": ["c", "a", "d"]}, k=60)
    assert keys(fused) == ["a", "c", "b", "d"]
    assert fused[0].ranks == {"fts": 1, "vector": 2}
    assert fused[0].score == pytest.approx(1 / 61 + 1 / 62)


def test_a_single_route_keeps_its_order() -> None:
    assert keys(reciprocal_rank({"fts": ["x", "y", "z"]}, k=60)) == ["x", "y", "z"]
    assert keys(weighted_score({"vector": [("x", 0.9), ("y", 0.5), ("z", 0.1)]}, weights={})) == ["x", "y", "z"]


def test_equal_scores_come_back_in_a_stable_order() -> None:
    # b and a tie on score and on best rank: the key decides, whatever the input order
    one = reciprocal_rank({"fts": ["b"], "vector": ["a"]}, k=60)
    two = reciprocal_rank({"vector": ["a"], "fts": ["b"]}, k=60)
    assert keys(one) == keys(two) == ["a", "b"]


def test_rrf_weights_scale_a_route() -> None:
    fused = reciprocal_rank({"fts": ["a"], "vector": ["b"]}, k=60, weights={"fts": 0.5, "vector": 1.0})
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
        reciprocal_rank({"fts": ["a", "a"]}, k=60)
