"""Token accounting for usage rows: apportioning a reported total, estimating a missing one."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def estimate_tokens(texts: Sequence[str]) -> list[int]:
    """A rough count when neither the provider nor a tokenizer can say: about four characters
    per token for English WordPiece/BPE, plus the two special tokens."""
    return [math.ceil(len(text) / 4) + 2 for text in texts]


def apportion(total: int, weights: dict[K, int]) -> dict[K, int]:
    """Split `total` in proportion to `weights` with whole numbers that add up to `total`
    (largest remainder, ties to the earlier group)."""
    if len(weights) == 1:
        return {key: total for key in weights}
    weight_sum = sum(weights.values())
    keys = list(weights)
    if weight_sum == 0:
        shares = [total / len(keys)] * len(keys)
    else:
        shares = [total * weights[k] / weight_sum for k in keys]
    floors = [math.floor(x) for x in shares]
    left = total - sum(floors)
    by_remainder = sorted(range(len(keys)), key=lambda i: (floors[i] - shares[i], i))
    for i in by_remainder[:left]:
        floors[i] += 1
    return dict(zip(keys, floors, strict=True))
