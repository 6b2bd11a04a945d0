"""Records: what `POST|PUT /v1/records`, `GET /v1/records/{id}` and `POST /v1/records:batch` take and answer."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any, Literal

import msgspec

from recalld.wire.base import Request
from recalld.wire.duplicates import DuplicateCheck


class RecordIn(Request):
    namespace: str
    kind: str
    title: str
    body: str
    attributes: dict[str, Any] = {}
    source_path: str | None = None
    id: uuid.UUID | None = None


class RecordUpdate(Request):
    namespace: str
    kind: str
    title: str
    body: str
    attributes: dict[str, Any] = {}
    source_path: str | None = None


class RecordOut(msgspec.Struct, kw_only=True):
    id: uuid.UUID
    namespace: str
    kind: str
    title: str
    body: str
    attributes: dict[str, Any]
    source_path: str | None
    revision: int
    content_hash: str
    created_at: dt.datetime
    updated_at: dt.datetime


class RecordCreated(msgspec.Struct, kw_only=True):
    id: uuid.UUID
    revision: int
    duplicate_check: DuplicateCheck


class RecordUpdated(msgspec.Struct, kw_only=True, omit_defaults=True):
    id: uuid.UUID
    revision: int
    changed: bool
    duplicate_check: DuplicateCheck | None = None
    """Present when the update changed the title or the kind: the title's check among its
    kind's, as on create."""


class RecordsBatch(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The request: `records` as `POST /v1/records` takes each. `upsert`: an item whose
    `source_path` a live record of its namespace already has revises that record instead (no
    new revision when nothing changed), as `recalld ingest` does with a file seen before."""

    records: list[msgspec.Raw]
    upsert: bool = False


class ItemError(msgspec.Struct, kw_only=True):
    code: str
    message: str


class ItemResult(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One item's outcome: `status` is what its own request would have answered."""

    index: int
    status: int
    outcome: Literal["created", "updated", "unchanged", "failed"]
    id: uuid.UUID | None = None
    revision: int | None = None
    duplicate_check: DuplicateCheck | None = None
    error: ItemError | None = None
    existing_id: uuid.UUID | None = None
    """On a 409 `exact_duplicate` or `source_path_taken`: the live record with this title or path."""


class BatchResult(msgspec.Struct, kw_only=True):
    results: list[ItemResult]
    created: int
    updated: int
    unchanged: int
    failed: int


class RecordPage(msgspec.Struct, kw_only=True):
    """`GET /v1/records`: a page of a namespace's live records, in id order."""

    records: list[RecordOut]
    next: uuid.UUID | None
    """The page's last id when more may follow: pass it as `after` for the next page; null at the end."""


class RecordForgotten(msgspec.Struct, kw_only=True):
    """`DELETE /v1/records/{id}`: the record is forgotten."""

    id: uuid.UUID
    deleted: bool
