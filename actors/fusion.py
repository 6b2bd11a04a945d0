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


def reciprocal_rank(
    rankings: Mapping[str, Sequence[Key]], *, k: float, weights: Mapping[str, float] | None = None
) -> list[Fused[Key]]:
    """Reciprocal-rank fusion: score = sum over routes of weight / (k + rank) (weights default to 1).

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
            entry.score += (weights or {}).get(route, 1.0) / (k + position)
    return sorted(fused.values(), key=lambda f: (-f.score, min(f.ranks.values()), str(f.key)))


WEIGHTED_NAME = "weighted"
WEIGHTED_VERSION = 1


def weighted_score(
    scored: Mapping[str, Sequence[tuple[Key, float]]], *, weights: Mapping[str, float]
) -> list[Fused[Key]]:
    """Weighted score fusion: each route's scores min-max normalised to [0, 1], then summed by weight.

    Normalising per route makes a ts_rank of 0.1 and a cosine of 0.8 comparable; a route whose
    candidates all scored alike contributes its full weight to each. Lists are best-first and
    de-duplicated by key, as for `reciprocal_rank`.
    """
    fused: dict[Key, Fused[Key]] = {}
    for route, pairs in scored.items():
        if not pairs:
            continue
        values = [score for _, score in pairs]
        low, high = min(values), max(values)
        span = high - low
        weight = weights.get(route, 1.0)
        for position, (key, score) in enumerate(pairs, start=1):
            entry = fused.setdefault(key, Fused(key, 0.0))
            if route in entry.ranks:
                raise ValueError(f"route {route!r} lists {key!r} twice")
            entry.ranks[route] = position
            entry.score += weight * ((score - low) / span if span > 0 else 1.0)
    return sorted(fused.values(), key=lambda f: (-f.score, min(f.ranks.values()), str(f.key)))
