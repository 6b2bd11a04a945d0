"""Observations, manual assignments and moderation: what `POST /v1/observations` and the
`/admin/disputes` routes take."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from daemon.wire.base import Request


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


class DecisionIn(Request):
    action: Literal["approve", "override", "reject", "escalate"]
    value: str | None = None
