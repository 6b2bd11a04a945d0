"""Disputes: their states, the transition table, the value-set hash and confidence tiers.

Pure. A dispute is one row per (entity, characteristic). The assignment ticker enqueues one when
the strategy chain ties (`Event.TIED`) and withdraws it when the tie is gone (`Event.SETTLED`);
the resolver claims pending ones and finishes them; administrators supersede or decide them.
`transition` is the only place that says which of those may happen in which state, including
the prior-state guard of the ticker's upsert: `in_progress` and `manual_review` rows are never
touched by re-runs, and a finished dispute reopens only when its value set changed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from enum import StrEnum


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
    """A moderator approved, overrode or rejected it."""
    ESCALATED = "escalated"
    """A moderator left it for someone else: it stays in the moderation queue."""
    FORCED = "forced"
    """An administrator sends it to the resolver now (`force-resolve` without a value)."""


FINISHED = frozenset({DisputeState.RESOLVED, DisputeState.SUPERSEDED, DisputeState.SKIPPED_UNCHANGED})
"""States a new value set reopens (to `pending`) and the same one leaves alone."""


def transition(prior: DisputeState | None, event: Event, *, same_hash: bool = True) -> DisputeState | None:
    """The state after `event` in state `prior` (None: no row), or None when the event does not
    apply and the row must stay exactly as it is (for the ticker's upsert: not written at all).

    `same_hash` says, for `Event.TIED`, whether the tie is on the value set the row already has.
    """
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
        case Event.DECIDED:
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
