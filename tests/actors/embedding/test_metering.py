from __future__ import annotations

import pytest

from recalld.actors.embedding.metering import apportion, estimate_tokens


@pytest.mark.parametrize(
    ("total", "weights", "expected"),
    [
        (10, {"a": 3}, {"a": 10}),  # one group: the reported total as it is
        (10, {"a": 1, "b": 1}, {"a": 5, "b": 5}),
        (10, {"a": 2, "b": 1}, {"a": 7, "b": 3}),  # 6.67 / 3.33: the larger remainder gets the unit
        (7, {"a": 1, "b": 1}, {"a": 4, "b": 3}),  # a tie goes to the earlier group
        (100, {"a": 1, "b": 1, "c": 1}, {"a": 34, "b": 33, "c": 33}),
        (5, {"a": 0, "b": 0}, {"a": 3, "b": 2}),  # no weights: split evenly
        (0, {"a": 4, "b": 9}, {"a": 0, "b": 0}),
    ],
)
def test_apportion_adds_up_to_the_reported_total(total: int, weights: dict[str, int], expected: dict[str, int]) -> None:
    shares = apportion(total, weights)
    assert shares == expected
    assert sum(shares.values()) == total


def test_estimate_is_about_four_characters_per_token_plus_specials() -> None:
    assert estimate_tokens(["", "abcd", "a" * 400]) == [2, 3, 102]
