from __future__ import annotations

import pytest

from recalld.actors.embedding.pricing import Priced, price

PRICES = {"text-embedding-3-small": 20.0, "all-minilm": 0.0, "pricey": 130.5}


@pytest.mark.parametrize(
    ("model", "tokens", "expected"),
    [
        ("text-embedding-3-small", 1000, Priced("text-embedding-3-small", 20)),
        ("text-embedding-3-small", 12_345, Priced("text-embedding-3-small", 247)),  # 246.9 -> 247
        ("text-embedding-3-small", 25, Priced("text-embedding-3-small", 1)),  # 0.5 rounds half up
        ("text-embedding-3-small", 24, Priced("text-embedding-3-small", 0)),
        ("text-embedding-3-small", 0, Priced("text-embedding-3-small", 0)),
        ("pricey", 2000, Priced("pricey", 261)),
        ("all-minilm", 5000, Priced("all-minilm", 0)),  # listed as free: keeps its model id
        ("not-in-catalogue", 5000, Priced(None, 0)),
    ],
)
def test_price(model: str, tokens: int, expected: Priced) -> None:
    assert price(model, tokens, PRICES) == expected


def test_negative_tokens_are_a_bug() -> None:
    with pytest.raises(ValueError):
        price("pricey", -1, PRICES)
