"""Disputes: their states, the transition table, the value-set hash and confidence tiers.

Pure. A dispute is one row per (entity, characteristic). The assignment ticker enqueues one when
the strategy chain ties (`Event.TIED`) and withdraws it when the tie is gone (`Event.SETTLED`);
the resolver claims pending ones and finishes them; administrators supersede or decide them.
`transition` is the only place that says which of those may happen in which state, including
the prior-state guard of the ticker's upsert: `in_progress` and `manual_review` rows are never
touched by re-runs, and a finished dispute reopens only when its value set changed.

An answer belongs to the value set it was asked about. While a dispute is `in_progress` or in
moderation the guard keeps the ticker from updating it, so its value set can go stale: the
observations may have changed since. `transition(..., stale=True)` then turns every event that
would carry the old set's answer (`ANSWERS`: the resolver's outcomes and a moderator's
approve) into `superseded`: recorded, never applied. A moderator's own value (override, a
force-resolve with a value) and a reject still apply.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from enum import StrEnum

from recalld.actors.assignments.strategy import Candidate


class DisputeState(StrEnum):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    RESOLVED = "resolved"
    MANUAL_REVIEW = "manual_review"
    SUPERSEDED = "superseded"
    SKIPPED_UNCHANGED = "skipped_unchanged"


class Tier(StrEnum):
    """The resolver's confidence, as a bounded label: high and medium are applied, low is not."""

    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


class Event(StrEnum):
    TIED = "tied"
    """The chain tied on this value set (the ticker's upsert)."""
    SETTLED = "settled"
    """The chain no longer ties (a supplier changed its value)."""
    CLAIMED = "claimed"
    """The resolver takes a pending dispute."""
    RESOLVED = "resolved"
    """The resolver applied an answer, or an administrator resolved it."""
    TO_MODERATION = "to_moderation"
    """Low confidence, an unusable answer or exhausted attempts."""
    NOT_ACTIONABLE = "not_actionable"
    """Fewer than two distinct suppliers or values: nothing for an LLM to decide."""
    UNCHANGED = "unchanged"
    """The value set is one already resolved: the earlier answer stands."""
    RELEASED = "released"
    """The resolver gave a claimed dispute back (circuit open, its own shutdown)."""
    SUPERSEDED = "superseded"
    """An administrator withdrew it (`DELETE /admin/disputes/{id}`)."""
    DECIDED = "decided"
    """A moderator overrode or rejected it, or an administrator force-resolved it with a value."""
    APPROVED = "approved"
    """A moderator approved the resolver's answer."""
    ESCALATED = "escalated"
    """A moderator left it for someone else: it stays in the moderation queue."""
    FORCED = "forced"
    """An administrator sends it to the resolver now (`force-resolve` without a value)."""


FINISHED = frozenset({DisputeState.RESOLVED, DisputeState.SUPERSEDED, DisputeState.SKIPPED_UNCHANGED})
"""States a new value set reopens (to `pending`) and the same one leaves alone."""


ANSWERS = frozenset({Event.RESOLVED, Event.TO_MODERATION, Event.UNCHANGED, Event.RELEASED, Event.APPROVED})
"""Events that carry the work done on the dispute's value set (an answer, its moderation, the
earlier answer of an unchanged set, the claim given back): void once the observations changed."""

GUARDED = frozenset({DisputeState.IN_PROGRESS, DisputeState.MANUAL_REVIEW})
"""States the ticker's upsert leaves alone: their value set can go stale."""


def transition(
    prior: DisputeState | None, event: Event, *, same_hash: bool = True, stale: bool = False
) -> DisputeState | None:
    """The state after `event` in state `prior` (None: no row), or None when the event does not
    apply and the row must stay exactly as it is (for the ticker's upsert: not written at all).

    `same_hash` says, for `Event.TIED`, whether the tie is on the value set the row already has.
    `stale` says the observations no longer hold the dispute's value set: an event of `ANSWERS`
    that applies then supersedes the dispute instead.
    """
    after = _transition(prior, event, same_hash=same_hash)
    if stale and after is not None and event in ANSWERS:
        return DisputeState.SUPERSEDED
    return after


def _transition(prior: DisputeState | None, event: Event, *, same_hash: bool) -> DisputeState | None:
    match event:
        case Event.TIED:
            if prior is None or prior is DisputeState.PENDING:
                return DisputeState.PENDING  # a pending row takes the newer candidates and winner
            if prior in FINISHED:
                return None if same_hash else DisputeState.PENDING
            return None  # in_progress, manual_review: the guard
        case Event.SETTLED:
            return DisputeState.SUPERSEDED if prior is DisputeState.PENDING else None
        case Event.CLAIMED:
            return DisputeState.IN_PROGRESS if prior is DisputeState.PENDING else None
        case Event.RESOLVED | Event.TO_MODERATION | Event.NOT_ACTIONABLE | Event.UNCHANGED | Event.RELEASED:
            if prior is not DisputeState.IN_PROGRESS:
                return None
            return {
                Event.RESOLVED: DisputeState.RESOLVED,
                Event.TO_MODERATION: DisputeState.MANUAL_REVIEW,
                Event.NOT_ACTIONABLE: DisputeState.SUPERSEDED,
                Event.UNCHANGED: DisputeState.SKIPPED_UNCHANGED,
                Event.RELEASED: DisputeState.PENDING,
            }[event]
        case Event.SUPERSEDED:
            return (
                DisputeState.SUPERSEDED
                if prior in (DisputeState.PENDING, DisputeState.MANUAL_REVIEW, DisputeState.SKIPPED_UNCHANGED)
                else None
            )
        case Event.DECIDED | Event.APPROVED:
            return DisputeState.RESOLVED if prior in (DisputeState.PENDING, DisputeState.MANUAL_REVIEW) else None
        case Event.FORCED:
            return DisputeState.IN_PROGRESS if prior in (DisputeState.PENDING, DisputeState.MANUAL_REVIEW) else None
        case Event.ESCALATED:
            return DisputeState.MANUAL_REVIEW if prior in (DisputeState.PENDING, DisputeState.MANUAL_REVIEW) else None
    return None


def value_set_hash(values: Iterable[str]) -> str:
    """sha256 of the sorted distinct values (normalised), hex. Joined with a NUL, which no
    value holds, so that ("a,b",) and ("a", "b") differ."""
    return hashlib.sha256("\0".join(sorted(set(values))).encode()).hexdigest()


def candidates_hash(found: Iterable[Candidate]) -> str:
    """The value set hash of the chain's candidates: what a dispute records when it is queued
    and what the single writer compares it with, computed from the observations, before an
    answer applies."""
    return value_set_hash(c.value for c in found)


HIGH_AT = 0.8
MEDIUM_AT = 0.5


def tier(confidence: float) -> Tier:
    """high ≥ 0.8, medium ≥ 0.5, else low (NaN is low)."""
    if confidence >= HIGH_AT:
        return Tier.HIGH
    if confidence >= MEDIUM_AT:
        return Tier.MEDIUM
    return Tier.LOW


def applied(level: Tier) -> bool:
    """Whether an answer of this tier is applied without a moderator."""
    return level in (Tier.HIGH, Tier.MEDIUM)


def actionable(suppliers: Iterable[str], values: Iterable[str]) -> bool:
    """At least two distinct suppliers and two distinct values: something an LLM can decide."""
    return len(set(suppliers)) >= 2 and len(set(values)) >= 2
