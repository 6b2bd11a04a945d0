"""The hit criterion and the ranking metrics, on cases computed by hand."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from recalld.actors.recall.metrics import (
    ALL,
    first_rank,
    is_hit,
    ndcg_at,
    recall_at,
    reciprocal_rank,
    score,
)

LOG3 = math.log2(3)  # the discount of rank 2


@pytest.mark.parametrize(
    ("files", "expected", "hit", "rr"),
    [
        # rank 1 is not required: the fifth distinct file is still a hit
        (["a", "b", "c", "d", "e", "f"], ["e"], True, 1 / 5),
        # the sixth is not, but still counts for MRR@10
        (["a", "b", "c", "d", "e", "f"], ["f"], False, 1 / 6),
        # several chunks of one file count once, at its first appearance: b is second
        (["a", "a", "a", "a", "a", "b"], ["b"], True, 1 / 2),
        # any expected file will do; the first one found decides the rank
        (["x", "y", "b", "a"], ["a", "b"], True, 1 / 3),
        # past the tenth distinct file nothing counts
        (list("abcdefghijk"), ["k"], False, 0.0),
        (list("abcdefghij"), ["j"], False, 1 / 10),
        ([], ["a"], False, 0.0),
        (["a"], [], False, 0.0),
    ],
)
def test_hit_at_5_and_reciprocal_rank_at_10(files: list[str], expected: list[str], hit: bool, rr: float) -> None:
    assert is_hit(files, expected) is hit
    assert reciprocal_rank(files, expected) == pytest.approx(rr)


def test_first_rank_names_the_position_or_none() -> None:
    assert first_rank(["a", "a", "b", "c"], ["c"]) == 3
    assert first_rank(["a", "b"], ["z"]) is None
    assert first_rank(["a", "b", "c"], ["c"], n=2) is None


@pytest.mark.parametrize(
    ("files", "expected", "recall"),
    [
        (["b", "a"], ["a", "z"], 1 / 2),
        (["c", "x", "a"], ["a", "b", "c"], 2 / 3),
        (["a", "a", "a"], ["a", "b"], 1 / 2),  # one file found is one file, however many chunks
        ([*"xxxxxxxxxyzwvutsrqp", "a"], ["a"], 0.0),  # a is the 12th distinct file
        ([*"bcdefghijk", "a"], ["a"], 0.0),  # the 11th
        ([], ["a"], 0.0),
        (["a"], [], 0.0),
    ],
)
def test_recall_at_10(files: list[str], expected: list[str], recall: float) -> None:
    assert recall_at(files, expected) == pytest.approx(recall)


@pytest.mark.parametrize(
    ("files", "expected", "ndcg"),
    [
        (["a", "b"], ["a", "b"], 1.0),
        (["b", "a"], ["a", "b"], 1.0),  # relevance is binary: the order of `expected` is not graded
        # found at ranks 2 and 3; the best answer had them at 1 and 2
        (["x", "a", "b"], ["a", "b"], (1 / LOG3 + 1 / 2) / (1 + 1 / LOG3)),
        (["a"], ["a", "b"], 1 / (1 + 1 / LOG3)),
        (["x", "a"], ["a"], 1 / LOG3),
        (["x", "x", "a"], ["a"], 1 / LOG3),  # x's second chunk takes no rank
        # twelve expected files, ten found: the ideal answer too has only ten places
        ([f"f{i}" for i in range(10)], [f"f{i}" for i in range(12)], 1.0),
        (["x"], ["a"], 0.0),
        (["a"], [], 0.0),
    ],
)
def test_ndcg_at_10(files: list[str], expected: list[str], ndcg: float) -> None:
    assert ndcg_at(files, expected) == pytest.approx(ndcg)


@dataclass(frozen=True)
class Q:
    id: str
    kind: str
    expected: tuple[str, ...]


def test_score_groups_by_kind_and_all() -> None:
    questions = [
        Q("n1", "natural", ("a",)),
        Q("n2", "natural", ("b", "c")),
        Q("i1", "identifier", ("d",)),
    ]
    answers = {
        "n1": ["x", "a"],  # hit, rr 1/2, recall 1, ndcg 1/log2(3)
        "n2": ["c", "y", "z"],  # hit, rr 1, recall 1/2, ndcg 1/(1 + 1/log2(3))
        # i1 got no answer at all: a miss everywhere
    }
    scores = score(answers, questions, kinds=("natural", "identifier", "other"))
    assert list(scores) == ["natural", "identifier", "other", ALL]
    natural = scores["natural"]
    assert (natural.hits, natural.of) == (2, 2)
    assert natural.mrr == pytest.approx((1 / 2 + 1) / 2)
    assert natural.recall_at_10 == pytest.approx((1 + 1 / 2) / 2)
    assert natural.ndcg_at_10 == pytest.approx((1 / LOG3 + 1 / (1 + 1 / LOG3)) / 2)
    assert (scores["identifier"].hits, scores["identifier"].of, scores["identifier"].mrr) == (0, 1, 0.0)
    assert scores["other"].of == 0 and scores["other"].mrr == 0.0
    assert (scores[ALL].hits, scores[ALL].of) == (2, 3)
    assert scores[ALL].mrr == pytest.approx(1.5 / 3)
    assert scores[ALL].cell() == "2/3 · 0.500"
    assert scores[ALL].figures() == {
        "hit_at_5": 2,
        "of": 3,
        "mrr_at_10": 0.5,
        "recall_at_10": 0.5,
        "ndcg_at_10": round((1 / LOG3 + 1 / (1 + 1 / LOG3)) / 3, 4),
    }
