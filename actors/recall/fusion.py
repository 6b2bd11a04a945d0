"""Fusion of ranked candidate lists from several recall routes. Pure: no I/O.

Every fused answer names its method and version, so telemetry and clients can tell which rule
produced an order. Ties are broken deterministically (best single-route rank, then key), so
equal scores always come back in the same order; `settle_ties` then orders what only the key
decided by a label the caller holds stable across re-indexing (recall: the source path).

Both methods take, besides a weight per route, an optional factor per candidate (`factors`):
a route whose candidates are not all equally good evidence says so there. Recall uses it for
full-text matches, whose evidence level (every identifier of the query, every word, some words)
differs far more than their rank shows; see docs/RETRIEVAL.md for why and how it was measured.

Both also take each route's scores, not only its order: candidates a route scored exactly
alike share a rank (SQL's RANK(): 1, 2, 2, 4), because the order the route happened to list
them in says nothing. Full text scores every page holding an identifier alike more often than
not (ts_rank saturates), and without shared ranks fusion ranked those pages by their random
record ids before the vector route could tell them apart.

Versions (bump when the same inputs can give a different order):
- rrf v1, weighted v1: one weight per route.
- rrf v2, weighted v2: per-candidate factors; rrf `depth`.
- rrf v3, weighted v3: candidates a route scored alike share a rank.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar


class _SortableKey(Hashable, Protocol):
    def __lt__(self, other: Any, /) -> bool: ...


Key = TypeVar("Key", bound=_SortableKey)
"""A candidate's identity: hashable, and ordered for the final tie-break (record UUIDs order by
their value, which is also their text's order)."""

RRF_NAME = "rrf"
RRF_VERSION = 3
WEIGHTED_NAME = "weighted"
WEIGHTED_VERSION = 3


@dataclass
class Fused(Generic[Key]):
    key: Key
    score: float
    ranks: dict[str, int] = field(default_factory=dict)
    """Route name -> 1-based rank of this key in that route's list (keys scored alike share one)."""


def shared_ranks(scores: Sequence[float]) -> list[int]:
    """1-based ranks of a best-first list in which a score equal to the one before it shares that
    one's rank, as SQL's RANK() numbers them: [0.9, 0.5, 0.5, 0.1] -> [1, 2, 2, 4]."""
    ranks: list[int] = []
    for position, score in enumerate(scores, start=1):
        ranks.append(ranks[-1] if ranks and score == scores[position - 2] else position)
    return ranks


def _factors_of(route: str, count: int, factors: Mapping[str, Sequence[float]] | None) -> Sequence[float]:
    given = (factors or {}).get(route)
    if given is None:
        return [1.0] * count
    if len(given) != count:
        raise ValueError(f"route {route!r} lists {count} keys but {len(given)} factors")
    if any(not 0 <= f < float("inf") for f in given):
        raise ValueError(f"route {route!r} has a factor that is negative or not finite")
    return given


def _entry(fused: dict[Key, Fused[Key]], key: Key, route: str, rank: int) -> Fused[Key]:
    """`key`'s entry, its rank in `route` recorded (a route that lists a key twice is a bug)."""
    entry = fused.get(key) or fused.setdefault(key, Fused(key, 0.0))
    if route in entry.ranks:
        raise ValueError(f"route {route!r} lists {key!r} twice")
    entry.ranks[route] = rank
    return entry


def _ordered(fused: dict[Key, Fused[Key]]) -> list[Fused[Key]]:
    return sorted(fused.values(), key=lambda f: (-f.score, min(f.ranks.values()), f.key))


def tied(a: Fused[Key], b: Fused[Key]) -> bool:
    """Whether fusion told `a` and `b` apart only by their keys: same score, same best rank."""
    return a.score == b.score and min(a.ranks.values(), default=0) == min(b.ranks.values(), default=0)


def tie_end(fused: Sequence[Fused[Key]], end: int) -> int:
    """`end` moved past the run of tied entries it would cut, so `fused[start:end]` holds each run
    whole and `settle_ties` can order it: a page boundary must not decide a tie."""
    end = max(0, min(end, len(fused)))
    while 0 < end < len(fused) and tied(fused[end - 1], fused[end]):
        end += 1
    return end


def settle_ties(fused: Sequence[Fused[Key]], labels: Mapping[Key, str | None]) -> list[Fused[Key]]:
    """`fused` with each run of tied entries ordered by its label, entries with none after those
    with one, then by key; everything else keeps its place.

    Keys are record ids, random at ingest, so a tie they break is broken differently each time
    the same files are indexed again (an eval's fresh namespace moved one question a run). The
    label is what the caller knows to be stable across re-indexing: recall passes the source path.
    """
    settled: list[Fused[Key]] = []
    start = 0
    while start < len(fused):
        end = start + 1
        while end < len(fused) and tied(fused[start], fused[end]):
            end += 1
        run = fused[start:end]
        if len(run) > 1:
            run = sorted(run, key=lambda f: (labels.get(f.key) is None, labels.get(f.key) or "", f.key))
        settled.extend(run)
        start = end
    return settled


def reciprocal_rank(
    scored: Mapping[str, Sequence[tuple[Key, float]]],
    *,
    k: float,
    weights: Mapping[str, float] | None = None,
    factors: Mapping[str, Sequence[float]] | None = None,
    depth: int | None = None,
) -> list[Fused[Key]]:
    """Reciprocal-rank fusion: score = sum over routes of weight * factor / (k + rank).

    Each route's list is best-first and de-duplicated by key, with its scores; the scores only
    decide which candidates share a rank (`shared_ranks`). Weights default to 1 per route,
    factors to 1 per candidate (`factors[route]` is parallel to `scored[route]`). A key found by
    one route only keeps that route's contribution, so a single-route answer keeps its order when
    its factors are equal. With `depth`, only keys ranked `depth` or better score; the rest follow
    every scored key (they keep `ranks`, score 0).
    """
    if k <= 0:
        raise ValueError("k must be positive")
    fused: dict[Key, Fused[Key]] = {}
    for route, pairs in scored.items():
        weight = (weights or {}).get(route, 1.0)
        route_factors = _factors_of(route, len(pairs), factors)
        ranks = shared_ranks([score for _, score in pairs])
        for (key, _), rank, factor in zip(pairs, ranks, route_factors, strict=True):
            entry = _entry(fused, key, route, rank)
            if depth is None or rank <= depth:
                entry.score += weight * factor / (k + rank)
    return _ordered(fused)


def weighted_score(
    scored: Mapping[str, Sequence[tuple[Key, float]]],
    *,
    weights: Mapping[str, float],
    factors: Mapping[str, Sequence[float]] | None = None,
) -> list[Fused[Key]]:
    """Weighted score fusion: each route's scores min-max normalised to [0, 1], times the route's
    weight and the candidate's factor, summed over routes.

    Normalising per route makes a ts_rank of 0.1 and a cosine of 0.8 comparable; a route whose
    candidates all scored alike gives each its full weight. Lists are best-first and
    de-duplicated by key, and `factors` parallel to them, as for `reciprocal_rank`.
    """
    fused: dict[Key, Fused[Key]] = {}
    for route, pairs in scored.items():
        if not pairs:
            continue
        values = [score for _, score in pairs]
        low, high = min(values), max(values)
        span = high - low
        weight = weights.get(route, 1.0)
        route_factors = _factors_of(route, len(pairs), factors)
        for (key, score), rank, factor in zip(pairs, shared_ranks(values), route_factors, strict=True):
            entry = _entry(fused, key, route, rank)
            entry.score += weight * factor * ((score - low) / span if span > 0 else 1.0)
    return _ordered(fused)
