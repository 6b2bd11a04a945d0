"""Canonical assignments and disputes: what `POST /v1/observations`, `/v1/assignments/...` and
the `/admin/disputes` and `/admin/moderation` routes take and answer."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Literal

import msgspec

from recalld.wire.base import Request

MAX_OBSERVATIONS = 1000
"""Observations in one `POST /v1/observations` (a client sends more in several)."""

# -- requests


class ObservationIn(Request):
    entity: str
    characteristic: str
    supplier: str
    value: str
    trust: float
    observed_at: dt.datetime | None = None


class ObservationsIn(Request):
    observations: list[ObservationIn]


class ManualIn(Request):
    value: str


class ForceIn(Request):
    value: str | None = None


Action = Literal["approve", "override", "reject", "escalate"]


class DecisionIn(Request):
    action: Action
    value: str | None = None


# -- answers


class Observed(msgspec.Struct, kw_only=True):
    """`POST /v1/observations` (202): all of the batch was accepted, in one transaction; an
    observation older than the supplier's stored one of the same characteristic is accepted
    but not stored."""

    accepted: int
    stored: int


class Candidate(msgspec.Struct, kw_only=True):
    """A distinct value (after normalisation) and who backs it."""

    value: str
    """The normalised value the suppliers agree on."""
    trust: float
    """The sum of its suppliers' trust."""
    suppliers: list[str]
    raws: list[str]
    """The value as the suppliers wrote it."""


class DisputeRef(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The dispute of an assignment, unless superseded (`GET /admin/disputes/{id}` shows it whole)."""

    id: uuid.UUID
    state: str
    tier: str | None = None


class Assignment(msgspec.Struct, kw_only=True, omit_defaults=True):
    characteristic: str
    value: str
    source: str
    """auto:trust_weighted, auto:mode, auto:latest, auto:llm_resolved or manual."""
    candidates: list[Candidate]
    dispute: DisputeRef | None = None


class Unassigned(msgspec.Struct, kw_only=True):
    """A characteristic observed and not assigned yet: the next assignment tick assigns it."""

    characteristic: str
    candidates: list[Candidate]


class AssignmentsOut(msgspec.Struct, kw_only=True):
    """`GET /v1/assignments/{entity}`: each canonical value, each characteristic still waiting
    for its first, and when this daemon's assignment ticker runs next."""

    entity: str
    assignments: list[Assignment]
    unassigned: list[Unassigned]
    next_tick_in_s: float | None
    """Seconds until this daemon's next assignment tick (0 while one is under way); null while its
    ticker is not running. Where daemons share a database, whichever takes the tick's lock runs it."""


class ManualAssignment(msgspec.Struct, kw_only=True):
    """`PUT /v1/assignments/{entity}/{characteristic}`: the value set by hand."""

    entity: str
    characteristic: str
    value: str
    source: str


class ManualRemoved(msgspec.Struct, kw_only=True):
    """`DELETE /v1/assignments/{entity}/{characteristic}`."""

    entity: str
    characteristic: str
    deleted: bool


class Dispute(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A dispute whole: the tie, the resolver's last answer and the decision taken (fields the
    dispute has no value for are left out)."""

    id: uuid.UUID
    entity: str
    characteristic: str
    state: str
    """pending, in_progress, resolved, manual_review, superseded or skipped_unchanged."""
    tier: str | None = None
    """Of the resolver's confidence: high, medium or low."""
    confidence: float | None = None
    confidence_source: str | None = None
    """model or logprobs."""
    model_confidence: float | None = None
    """What the model wrote, beside a confidence derived from logprobs."""
    value_set_hash: str
    candidates: list[Candidate]
    tied: list[str]
    """The strategies that tied, in chain order."""
    winning_value: str
    """The canonical value now."""
    selected_value: str | None = None
    """The resolver's answer."""
    reason: str | None = None
    """Why it went to moderation."""
    attempts: int
    resolved_hash: str | None = None
    resolved_value: str | None = None
    decision: str | None = None
    """approve, override, reject, escalate or force."""
    created_at: dt.datetime
    updated_at: dt.datetime


class DisputePage(msgspec.Struct, kw_only=True):
    """`GET /admin/disputes`: disputes in id order; `next` is the `after` of the following page
    (null on the last)."""

    disputes: list[Dispute]
    next: uuid.UUID | None
