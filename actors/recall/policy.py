"""What a recall asks of its routes and what it makes of their answers. Pure: no I/O, no clock.

`daemon/services/recall.py` runs the routes, rehydrates and records; every decision it applies is made
here, so each can be tried in a table without a daemon:

- how many candidates each route hands fusion (`RecallPolicy.caps`, at least k);
- when full text's costly any-word step runs (`loose_up_front`, `loose_after`);
- which vector candidates are close enough (`RecallPolicy.floors`, `above_floor`), and that
  several chunks of a record count once (`one_per_record`);
- how the routes' lists fuse, a full-text candidate weighed by what it matched
  (`RecallPolicy.fuse`);
- when the vector route scores the filtered records exactly (`RecallPolicy.exact_filter_limit`),
  and when it searches again, deeper (`RecallPolicy.overfetch`);
- which routes are named degraded, and why (`DegradedReason`, `unanswered`, `route_limit_missed`,
  `RecallPolicy.shortfall`, `still_indexing`);
- when a recall has no answer to give at all (`nothing_answered`): a `NothingAnswered` the
  control layer answers with a 503 `route_unavailable`.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Final, Protocol, TypeVar

from recalld.actors.recall.fusion import WEIGHTED_NAME, Fused, Key, reciprocal_rank, weighted_score
from recalld.actors.recall.query import evidence_of

FTS: Final = "fts"
VECTOR: Final = "vector"
STRUCTURED: Final = "structured"

OVERFETCH_FACTOR = 4
"""Each over-fetch round asks the vector route for this many times the records of the last."""


class DegradedReason(StrEnum):
    """Why recall itself names a route in `degraded_routes` (stable codes: clients, the
    `searches` rows and the `recalld_recall_degraded_total` metric see them). A route that
    failed on its own carries its own code: the embedding path's `Reason`, the index's
    `IndexReason` and the index manager's problems."""

    DEADLINE_EXCEEDED = "deadline_exceeded"
    """The route gave no answer in time (the request's deadline or its own route limit), or the
    over-fetch had no time left to search deeper."""
    STORE_UNAVAILABLE = "store_unavailable"
    """PostgreSQL did not answer the route's query."""
    OVERFETCH_EXHAUSTED = "overfetch_exhausted"
    """The vector route searched as deep as `overfetch_rounds` allows, and the filters or
    rehydration dropped so many of its records that fewer than k are left."""
    VECTOR_INDEXING = "vector_indexing"
    """The vector route answered, but records of the namespace are not searchable by it yet
    (`pending` says how many): its answer is partial, and fusion weighs it so (`partial`)."""


@dataclass(frozen=True, slots=True)
class Degradation:
    """A route named in `degraded_routes`: `reason` is a stable code, `message` is for people."""

    route: str
    reason: str
    message: str = ""
    pending: int | None = None
    """`vector_indexing`: records of the namespace the route cannot find yet."""


class NothingAnswered(Exception):
    """No requested route answered, and not only because the client's own deadline ran out:
    the recall has no answer to give. `routes` names each route and why (the control layer
    answers 503 `route_unavailable` with them)."""

    def __init__(self, routes: Sequence[Degradation]) -> None:
        self.routes = tuple(routes)
        reasons = ", ".join(f"{d.route}: {d.reason}" for d in self.routes)
        self.message = f"no requested route could answer ({reasons})"
        super().__init__(self.message)


class Overfetch(Enum):
    """What the vector route does once the answer is fused and rehydrated."""

    DONE = "done"
    """k results, or the vector route gave all it had: the answer is complete."""
    DEEPER = "deeper"
    """Short of k while the vector route had more to give: search again, deeper."""
    SHORT = "short"
    """Short of k while the vector route had more to give, and no round is left: the answer
    goes out short, the vector route named (`RecallPolicy.shortfall`)."""


class _Scored(Protocol):
    @property
    def score(self) -> float: ...


class _OfRecord(Protocol):
    @property
    def id(self) -> Hashable: ...


Scored = TypeVar("Scored", bound=_Scored)
OfRecord = TypeVar("OfRecord", bound=_OfRecord)


@dataclass(frozen=True)
class RecallPolicy:
    """`[recall]`'s numbers as the decisions read them; daemon/config.py holds their defaults and
    what each means, `daemon/services/recall.py` builds this once from the config."""

    fts_candidates: int
    structured_candidates: int
    vector_candidates: int
    rrf_k: float
    weights: Mapping[str, float]
    """Route -> its weight in fusion (1 for a route not named)."""
    fts_evidence_weights: Mapping[str, float]
    """Evidence level (`Evidence.key`) -> factor on a full-text candidate (1 for one not named)."""
    thresholds: Mapping[str, float]
    """Route -> the least score its candidates must reach, unless a request says otherwise."""
    overfetch_rounds: int
    exact_filter_max_records: int
    partial_weight: float
    """Factor on the weight of a route whose answer is partial (the vector route while the
    namespace is still being indexed)."""

    def caps(self, k: int) -> dict[str, int]:
        """Route -> how many candidates it is asked for: its configured cap, and at least k,
        so fusion has k to choose from whichever route answers."""
        return {
            FTS: max(self.fts_candidates, k),
            STRUCTURED: max(self.structured_candidates, k),
            VECTOR: max(self.vector_candidates, k),
        }

    def floors(self, requested: Mapping[str, float] | None) -> dict[str, float]:
        """Route -> the least score its candidates must reach: the config's, each overridden by
        the request's own."""
        return dict(self.thresholds) | dict(requested or {})

    def fuse(
        self, method: str, scored: Mapping[str, Sequence[tuple[Key, float]]], *, partial: Collection[str] = ()
    ) -> list[Fused[Key]]:
        """Fuse the routes' best-first, one-per-record lists with `method` (`weighted`, else
        reciprocal rank). A full-text candidate weighs by its evidence level, read from its
        banded score (exact, every word, some words: `fts_evidence_weights`).

        A route in `partial` answered from part of the namespace (the vector route while it is
        still indexed): its weight is multiplied by `partial_weight`, and full-text evidence is
        never weighed below 1, since the evidence weights assume a vector route that saw every
        record. So a half-built vector route cannot crowd out what full text found."""
        evidence = [self.fts_evidence_weights.get(evidence_of(score).key, 1.0) for _, score in scored.get(FTS, [])]
        if partial:
            evidence = [max(factor, 1.0) for factor in evidence]
        factors = {FTS: evidence}
        weights = {route: self.weights.get(route, 1.0) for route in scored}
        for route in partial:
            if route in weights:
                weights[route] *= self.partial_weight
        if method == WEIGHTED_NAME:
            return weighted_score(scored, weights=weights, factors=factors)
        return reciprocal_rank(scored, k=self.rrf_k, weights=weights, factors=factors)

    def exact_filter_limit(self, cap: int, *, beyond_namespace: bool) -> int | None:
        """How many records the filters may let through for the vector route to score just
        those, exactly (at least its cap); None: search the index walk as usual. The index knows
        namespaces only, and its walk reaches the query's neighbours: records a kind or attribute
        filter selects may all lie beyond them."""
        if self.exact_filter_max_records == 0 or not beyond_namespace:
            return None
        return max(self.exact_filter_max_records, cap)

    def overfetch(self, *, found: int, k: int, vector_full: bool, rounds_done: int) -> Overfetch:
        """After `rounds_done` deeper searches, with `found` results rehydrated: what next.
        `vector_full`: the vector route's latest answer filled its cap (`filled`), so records
        the filters or rehydration dropped may have hidden more behind them."""
        if found >= k or not vector_full:
            return Overfetch.DONE
        return Overfetch.DEEPER if rounds_done < self.overfetch_rounds else Overfetch.SHORT

    def shortfall(self, *, k: int, searched: int, filtered_afterwards: bool, out_of_time: bool) -> Degradation:
        """The vector route, named for an answer left short of k while it had more to give: a
        short answer must not pass for "fewer than k records match" (pgvector#259: filtered
        searches silently answering short). `searched`: the records its last search asked for;
        `filtered_afterwards`: kind or attribute filters were applied after the index walk
        (the records they select were too many to score exactly)."""
        searched_for = f"fewer than {k} results after the vector route's search for {searched} records"
        if out_of_time:
            return Degradation(VECTOR, DegradedReason.DEADLINE_EXCEEDED, f"{searched_for}: no time to search deeper")
        if filtered_afterwards:
            dropped = "the filters or rehydration dropped the rest"
            advice = "raise [recall] exact_filter_max_records or overfetch_rounds, or narrow the filters"
        else:
            dropped = "rehydration dropped the rest (changed or forgotten since they were indexed)"
            advice = "raise [recall] overfetch_rounds"
        message = f"{searched_for} (over-fetch rounds: {self.overfetch_rounds}): {dropped}; {advice}"
        return Degradation(VECTOR, DegradedReason.OVERFETCH_EXHAUSTED, message)


def loose_up_front(routes: Collection[str]) -> bool:
    """Whether full text runs its loose (any-word) query in the first pass. Any-word matches only
    break ties next to an answering vector route, and they are full text's costly step: up front
    only when the vector route was not asked for."""
    return VECTOR not in routes


def fts_waits_for_embedding(setting: str, *, embedded_in_process: bool) -> bool:
    """Whether full text waits for the vector route's query vector before it starts
    (`[recall] fts_waits_for_embedding`: `auto`, `always` or `never`)."""
    return setting == "always" or (setting == "auto" and embedded_in_process)


def loose_after(routes: Collection[str], found: Mapping[str, Sequence[object]]) -> bool:
    """Whether full text runs again, loose, after the first pass: the vector route was asked for
    but failed or found nothing (nothing indexed yet, nothing above its floor), so any-word
    matches are the answer now. Not when full text itself failed. (Not for a vector route that
    answered from part of the namespace either: a second full-text query on every recall during
    an ingest cost more than its any-word matches added; fusion weighs that route down instead.)"""
    return not loose_up_front(routes) and FTS in found and not found.get(VECTOR)


def above_floor(found: Sequence[Scored], floor: float | None) -> list[Scored]:
    """The candidates scoring at least `floor` (all, without one). Best first in, so what is left
    is the head: a list it shortens no longer fills its cap, which tells the over-fetch that
    searching deeper cannot find more above the floor."""
    if floor is None:
        return list(found)
    return [c for c in found if c.score >= floor]


def one_per_record(found: Iterable[OfRecord]) -> list[OfRecord]:
    """One entry per record, at its best position (several chunks of a record count once)."""
    seen: set[Hashable] = set()
    unique = []
    for candidate in found:
        if candidate.id not in seen:
            seen.add(candidate.id)
            unique.append(candidate)
    return unique


def filled(found: int, asked: int) -> bool:
    """Whether a route's answer filled the cap it was asked for: searching deeper may find more."""
    return found >= asked


def still_indexing(pending: int) -> Degradation | None:
    """The vector route, named when `pending` records of the namespace are not searchable by it
    yet: its answer stands, but is partial (None when nothing is pending)."""
    if pending <= 0:
        return None
    message = f"{pending} records of the namespace are not searchable by the vector route yet (indexing)"
    return Degradation(VECTOR, DegradedReason.VECTOR_INDEXING, message, pending=pending)


def route_limit_missed(route: str, own_ms: int, *, limit: float, deadline: float) -> Degradation | None:
    """A route cut off without an answer: named here when its own `route_deadline_ms` (`limit`)
    ran out before the request's deadline; None when the request's deadline cut it (then
    `unanswered` names it, with the request's time)."""
    if limit >= deadline:
        return None
    return Degradation(route, DegradedReason.DEADLINE_EXCEEDED, f"no answer within its {own_ms} ms route limit")


def unanswered(routes: Iterable[str], found: Collection[str], deadline_ms: int) -> list[Degradation]:
    """The requested routes that gave no answer within the request's `deadline_ms`."""
    return [
        Degradation(route, DegradedReason.DEADLINE_EXCEEDED, f"no answer within {deadline_ms} ms")
        for route in routes
        if route not in found
    ]


def nothing_answered(
    found: Collection[str], degraded: Sequence[Degradation], *, client_time_up: bool
) -> NothingAnswered | None:
    """The verdict when no route answered: a `NothingAnswered` naming them, unless they all just
    ran out of the time the client gave (its own `deadline_ms` passed). That is no fault of the
    daemon's, and the answer is what finished, here nothing, with every late route named (a 200).
    Routes that are down, or cut off by the daemon's own limits, are its fault. None: answer."""
    only_late = all(d.reason == DegradedReason.DEADLINE_EXCEEDED for d in degraded)
    if found or (client_time_up and only_late):
        return None
    return NothingAnswered(degraded)
