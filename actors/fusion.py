"""Fusion of ranked candidate lists from several recall routes. Pure: no I/O.

Every fused answer names its method and version, so telemetry and clients can tell which rule
produced an order. Ties are broken deterministically (best single-route rank, then id), so
equal scores always come back in the same order.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)

RRF_NAME = "rrf"
RRF_VERSION = 1


@dataclass
class Fused(Generic[Key]):
    key: Key
    score: float
    ranks: dict[str, int] = field(default_factory=dict)
    """Route name -> 1-based rank of this key in that route's list."""


def reciprocal_rank(rankings: Mapping[str, Sequence[Key]], *, k: float) -> list[Fused[Key]]:
    """Reciprocal-rank fusion: score = sum over routes of 1 / (k + rank).

    Each route's list must already be de-duplicated by key (best position kept). A key found by
    one route only keeps that route's contribution, so a single-route answer keeps its order.
    """
    fused: dict[Key, Fused[Key]] = {}
    for route, keys in rankings.items():
        for position, key in enumerate(keys, start=1):
            entry = fused.setdefault(key, Fused(key, 0.0))
            if route in entry.ranks:
                raise ValueError(f"route {route!r} lists {key!r} twice")
            entry.ranks[route] = position
            entry.score += 1.0 / (k + position)
    return sorted(fused.values(), key=lambda f: (-f.score, min(f.ranks.values()), str(f.key)))
