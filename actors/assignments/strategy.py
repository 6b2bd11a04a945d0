"""The strategy chain `trust_weighted → mode → latest` that picks a canonical value.

Pure. Each supplier's latest observation of a characteristic is one vote for its normalised
value. `trust_weighted` sums the voters' trust per value; a unique top wins. On a tie, `mode`
counts voters among the tied values; a unique top wins. On a tie again, `latest` takes the tied
value observed most recently, and the answer says which strategies tied, so the caller enqueues
a dispute. `latest` itself can tie (equal timestamps): the smallest value then wins, so that the
choice is the same in every daemon and on every re-run.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


class Source(StrEnum):
    """Where a canonical value came from (`source` in `GET /v1/assignments/{entity}`)."""

    TRUST_WEIGHTED = "auto:trust_weighted"
    MODE = "auto:mode"
    LATEST = "auto:latest"
    LLM_RESOLVED = "auto:llm_resolved"
    MANUAL = "manual"


class Strategy(StrEnum):
    """A step of the chain; the ones that tied are recorded on the dispute."""

    TRUST_WEIGHTED = "trust_weighted"
    MODE = "mode"
    LATEST = "latest"


@dataclass(frozen=True, slots=True)
class Vote:
    """One supplier's latest observation of one characteristic of one entity."""

    supplier: str
    value: str
    """The normalised value (`recalld.actors.assignments.values.normalise`)."""
    raw: str
    trust: float
    observed_at: dt.datetime


@dataclass(frozen=True, slots=True)
class Candidate:
    """A distinct normalised value and who backs it."""

    value: str
    trust: float
    """The sum of its suppliers' trust."""
    suppliers: tuple[str, ...]
    raws: tuple[str, ...]
    latest: dt.datetime


@dataclass(frozen=True, slots=True)
class Choice:
    value: str
    source: Source
    candidates: tuple[Candidate, ...]
    """Every distinct value, highest trust first (then value), for the answer and the dispute."""
    tied: tuple[Strategy, ...]
    """The strategies that tied before the winner was found; non-empty means a dispute."""

    @property
    def disputed(self) -> bool:
        return bool(self.tied)


# Trust sums are compared after rounding, so that 0.1 + 0.2 ties with 0.3.
_TRUST_DIGITS = 9


def candidates(votes: Sequence[Vote]) -> tuple[Candidate, ...]:
    grouped: dict[str, list[Vote]] = {}
    for vote in votes:
        grouped.setdefault(vote.value, []).append(vote)
    found = [
        Candidate(
            value=value,
            trust=round(sum(v.trust for v in group), _TRUST_DIGITS),
            suppliers=tuple(sorted({v.supplier for v in group})),
            raws=tuple(sorted({v.raw for v in group})),
            latest=max(v.observed_at for v in group),
        )
        for value, group in grouped.items()
    ]
    return tuple(sorted(found, key=lambda c: (-c.trust, c.value)))


def _top(pool: Sequence[Candidate], score: dict[str, float]) -> list[Candidate]:
    best = max(score[c.value] for c in pool)
    return [c for c in pool if score[c.value] == best]


def choose(votes: Sequence[Vote]) -> Choice:
    """The canonical value of one characteristic from its votes (at least one)."""
    if not votes:
        raise ValueError("a canonical value needs at least one vote")
    every = candidates(votes)
    tied: list[Strategy] = []
    contenders = _top(every, {c.value: c.trust for c in every})
    if len(contenders) == 1:
        return Choice(contenders[0].value, Source.TRUST_WEIGHTED, every, ())
    tied.append(Strategy.TRUST_WEIGHTED)
    contenders = _top(contenders, {c.value: float(len(c.suppliers)) for c in contenders})
    if len(contenders) == 1:
        return Choice(contenders[0].value, Source.MODE, every, ())
    tied.append(Strategy.MODE)
    newest = max(c.latest for c in contenders)
    contenders = [c for c in contenders if c.latest == newest]
    if len(contenders) > 1:
        tied.append(Strategy.LATEST)
    winner = min(contenders, key=lambda c: c.value)
    return Choice(winner.value, Source.LATEST, every, tuple(tied))
