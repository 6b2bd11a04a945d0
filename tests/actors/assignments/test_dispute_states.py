"""Dispute states (actors/assignments/disputes.py): every event from every prior state, the hash, tiers."""

from __future__ import annotations

import datetime as dt
import hashlib
import math

import pytest

from recalld.actors.assignments.disputes import (
    DisputeState,
    Event,
    Tier,
    actionable,
    candidates_hash,
    tier,
    transition,
    value_set_hash,
)
from recalld.actors.assignments.strategy import Vote, candidates

S = DisputeState
ALL: list[DisputeState | None] = [None, *S]

# The ticker's upsert guard: prior -> (state on the same value set, state on a changed one)
TIED = {
    None: (S.PENDING, S.PENDING),
    S.PENDING: (S.PENDING, S.PENDING),
    S.IN_PROGRESS: (None, None),
    S.MANUAL_REVIEW: (None, None),
    S.RESOLVED: (None, S.PENDING),
    S.SUPERSEDED: (None, S.PENDING),
    S.SKIPPED_UNCHANGED: (None, S.PENDING),
}


@pytest.mark.parametrize("prior", ALL)
def test_the_upsert_guard(prior: DisputeState | None) -> None:
    same, changed = TIED[prior]
    assert transition(prior, Event.TIED, same_hash=True) is same
    assert transition(prior, Event.TIED, same_hash=False) is changed


# Every other event: prior -> state after, for the priors it applies to (None elsewhere).
TABLE: dict[Event, dict[DisputeState | None, DisputeState]] = {
    Event.SETTLED: {S.PENDING: S.SUPERSEDED},
    Event.CLAIMED: {S.PENDING: S.IN_PROGRESS},
    Event.FORCED: {S.PENDING: S.IN_PROGRESS, S.MANUAL_REVIEW: S.IN_PROGRESS},
    Event.RESOLVED: {S.IN_PROGRESS: S.RESOLVED},
    Event.TO_MODERATION: {S.IN_PROGRESS: S.MANUAL_REVIEW},
    Event.NOT_ACTIONABLE: {S.IN_PROGRESS: S.SUPERSEDED},
    Event.UNCHANGED: {S.IN_PROGRESS: S.SKIPPED_UNCHANGED},
    Event.RELEASED: {S.IN_PROGRESS: S.PENDING},
    Event.SUPERSEDED: {S.PENDING: S.SUPERSEDED, S.MANUAL_REVIEW: S.SUPERSEDED, S.SKIPPED_UNCHANGED: S.SUPERSEDED},
    Event.DECIDED: {S.PENDING: S.RESOLVED, S.MANUAL_REVIEW: S.RESOLVED},
    Event.APPROVED: {S.PENDING: S.RESOLVED, S.MANUAL_REVIEW: S.RESOLVED},
    Event.ESCALATED: {S.PENDING: S.MANUAL_REVIEW, S.MANUAL_REVIEW: S.MANUAL_REVIEW},
}


@pytest.mark.parametrize("event", list(TABLE))
@pytest.mark.parametrize("prior", ALL)
def test_every_event_from_every_state(event: Event, prior: DisputeState | None) -> None:
    assert transition(prior, event) is TABLE[event].get(prior)


def test_every_event_is_in_the_table() -> None:
    assert set(TABLE) | {Event.TIED} == set(Event)


# The same events once the observations no longer hold the dispute's value set: an answer to the
# old set (the resolver's outcomes, a moderator's approve) supersedes the dispute instead of
# applying; a human's own value, a reject, an escalation and a withdrawal apply as before.
STALE: dict[Event, dict[DisputeState | None, DisputeState]] = {
    **TABLE,
    Event.RESOLVED: {S.IN_PROGRESS: S.SUPERSEDED},
    Event.TO_MODERATION: {S.IN_PROGRESS: S.SUPERSEDED},
    Event.UNCHANGED: {S.IN_PROGRESS: S.SUPERSEDED},
    Event.RELEASED: {S.IN_PROGRESS: S.SUPERSEDED},
    Event.APPROVED: {S.PENDING: S.SUPERSEDED, S.MANUAL_REVIEW: S.SUPERSEDED},
}


@pytest.mark.parametrize("event", list(STALE))
@pytest.mark.parametrize("prior", ALL)
def test_every_event_from_every_state_on_a_stale_value_set(event: Event, prior: DisputeState | None) -> None:
    assert transition(prior, event, stale=True) is STALE[event].get(prior)


def test_the_hash_of_candidates_is_the_hash_of_their_values() -> None:
    at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    found = candidates([Vote("acme", "230 V", "230", 0.5, at), Vote("globex", "220 V", "220 V", 0.5, at)])
    assert candidates_hash(found) == value_set_hash(["220 V", "230 V"])


def test_value_set_hash_is_sha256_of_the_sorted_distinct_values() -> None:
    expected = hashlib.sha256(b"220\x00230").hexdigest()
    assert value_set_hash(["230", "220", "230"]) == expected
    assert value_set_hash(["220", "230"]) == expected
    assert value_set_hash(["a,b"]) != value_set_hash(["a", "b"])


@pytest.mark.parametrize(
    ("confidence", "level"),
    [
        (1.0, Tier.HIGH),
        (0.8, Tier.HIGH),
        (0.7999, Tier.MEDIUM),
        (0.5, Tier.MEDIUM),
        (0.4999, Tier.LOW),
        (0.0, Tier.LOW),
        (math.nan, Tier.LOW),
    ],
)
def test_tiers(confidence: float, level: Tier) -> None:
    assert tier(confidence) is level


@pytest.mark.parametrize(
    ("suppliers", "values", "expected"),
    [
        (["a", "b"], ["x", "y"], True),
        (["a", "a"], ["x", "y"], False),  # one supplier contradicting itself
        (["a", "b"], ["x", "x"], False),
        (["a", "b", "c"], ["x", "y", "x"], True),
    ],
)
def test_actionable(suppliers: list[str], values: list[str], expected: bool) -> None:
    assert actionable(suppliers, values) is expected
