"""Every reason code a client or an operator can see, in one registry.

A reason code is a stable snake_case string naming why something failed or is degraded: an
error body's `error.code`, a route in `degraded_routes`, a failed check in /readyz, a metric's
label. Each code is defined once, by the enum of the part that decides it; `REASON_ENUMS` lists
those enums, so this module is where a reader finds them all. A code is user-visible exactly
when it is a member of one of them (tests/control/test_reasons.py holds every enum of `actors/`
and `daemon/` to being listed here or declared not a reason code).

Nothing here is new vocabulary: renaming a code breaks clients, the `searches` rows and
dashboards, so a code, once here, stays.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Final

from recalld.actors.assignments.disputes import DisputeState, Tier
from recalld.actors.assignments.strategy import Strategy
from recalld.actors.assignments.verdict import ConfidenceSource, ResolverReason
from recalld.actors.embedding.errors import Reason
from recalld.actors.index.manifest import IndexReason
from recalld.actors.recall.policy import DegradedReason
from recalld.control.health import ReadinessReason
from recalld.wire.duplicates import DuplicateSkipReason
from recalld.wire.errors import ErrorCode

REASON_ENUMS: Final[tuple[type[StrEnum], ...]] = (
    ErrorCode,  # error bodies of the control socket
    DegradedReason,  # recall's own reasons for a route in `degraded_routes`
    Reason,  # the embedding path: degraded routes, skipped work, the embedding check
    IndexReason,  # the vector index: /readyz, degraded routes, error bodies
    ReadinessReason,  # /readyz checks of the store and the supervised actors
    DuplicateSkipReason,  # a create's `duplicate_check.reason` when the check did not run
    DisputeState,  # a dispute's `state`: wire, CLI, metric labels
    Tier,  # a dispute's confidence `tier`: wire, metric labels
    Strategy,  # the chain's strategies that tied, on a dispute
    ResolverReason,  # why the resolver did not apply an answer: the dispute's `reason`, metrics
    ConfidenceSource,  # where a dispute's `confidence` came from
)
"""The enums whose members reach clients or operators."""

SHARED_CODES: Final[Mapping[str, str]] = {
    "store_unavailable": "PostgreSQL did not answer: an error code, a degraded route, a failed check",
    "deadline_exceeded": "no answer in time: the embedding path's failure and recall's degraded route",
    "vector_index_corrupt": "a generation failed verification: the index's problem and an error code",
    "no_provider": "no embedding provider is configured: the embedding path's failure and a skipped duplicate check",
    "circuit_open": "the embedder's breaker is open: the embedding path's failure and a skipped duplicate check",
    "stale_answer": "an answer to a dispute's value set the observations no longer hold: recorded, never applied"
    " (the dispute's reason, and the error of a refused approve)",
}
"""Codes defined by more than one enum, each time with the meaning given here. Another code
shared by two enums is a second meaning for one code until someone decides it is not."""


def reason_codes() -> dict[str, tuple[type[StrEnum], ...]]:
    """Every user-visible code -> the enums that define it, in `REASON_ENUMS` order."""
    codes: dict[str, tuple[type[StrEnum], ...]] = {}
    for enum in REASON_ENUMS:
        for member in enum:
            codes[member.value] = (*codes.get(member.value, ()), enum)
    return codes
