"""Duplicate warnings: the `duplicate_check` of a write, `POST /v1/duplicates/check` and `/audit`."""

from __future__ import annotations

import uuid
from enum import StrEnum
from typing import Any, Literal

import msgspec

from recalld.wire.base import Request


class DuplicateSkipReason(StrEnum):
    """Why a create's duplicate check was skipped (`duplicate_check.reason`)."""

    UNAVAILABLE = "duplicate_check_unavailable"
    """The titles to compare could not be read (PostgreSQL failed during the check)."""
    NO_PROVIDER = "no_provider"
    """No embedding provider is configured (`[embedding] provider = "none"`)."""
    PROVIDER_DOWN = "provider_down"
    """The provider failed, timed out, or has not answered its start-up probe yet."""
    CIRCUIT_OPEN = "circuit_open"
    """The embedder's circuit breaker is open after provider failures: no call was made."""
    TIME_CAP = "time_cap_exceeded"
    """The check did not finish within `[duplicates] time_cap_s`."""
    DISABLED = "disabled"
    """`[duplicates] enabled = false`: the operator turned the check off."""
    KIND_NOT_CHECKED = "kind_not_checked"
    """The record's kind is in `[duplicates] unchecked_kinds` (by default `doc`, what `recalld
    ingest` writes): its records are neither checked nor compared with."""


class DuplicateCheckRequest(Request):
    """`POST /v1/duplicates/check`: the check a create of this title would run, as a dry run."""

    namespace: str
    kind: str
    title: str


class DuplicateAuditRequest(Request):
    """`POST /v1/duplicates/audit`: near-duplicate pairs among a namespace's records, a page of
    records (in id order, after `after`) compared with all their kind's records at a time."""

    namespace: str
    kind: str | None = None
    after: uuid.UUID | None = None
    limit: int = 1000


class DuplicateCheck(msgspec.Struct, kw_only=True, omit_defaults=True):
    status: Literal["clear", "warned", "skipped"]
    threshold: float
    compared: int
    of: int
    similar: list[dict[str, Any]] = []
    reason: str | None = None


class TitledRecord(msgspec.Struct, kw_only=True):
    id: uuid.UUID
    title: str


class DuplicatePair(msgspec.Struct, kw_only=True):
    """Two live records of one kind whose titles score at or above the threshold."""

    a: TitledRecord
    """The record of the page."""
    b: TitledRecord
    """The record of its kind it resembles (each pair is listed once over all pages)."""
    kind: str
    score: float


class DuplicateAudit(msgspec.Struct, kw_only=True):
    """`POST /v1/duplicates/audit`: one page's near-duplicate pairs, the highest score first."""

    pairs: list[DuplicatePair]
    threshold: float
    scanned: int
    """Records of this page."""
    of: int
    """Live records of the namespace (of `kind` when asked) of checked kinds."""
    compared: int
    """Those with a title vector to compare: `compared` < `of` while titles wait to be embedded."""
    not_checked: int
    """Live records of unchecked kinds, left out."""
    unchecked_kinds: list[str]
    next: uuid.UUID | None
    """The `after` of the next page; None after the last."""
