"""Wire types of the control socket (SPEC Appendix A) and their decoding.

Decoding is strict (unknown fields refused, types exact) so that a typo in a client is a 400
that names the field, never a silently ignored option. Limits that come from config
(lengths, k, deadlines) are checked after decoding by `check_record` and `check_recall`.
"""

from __future__ import annotations

import datetime as dt
import uuid
from enum import StrEnum
from typing import Any, Literal, TypeVar

import msgspec

from daemon.config import Config
from daemon.control.errors import ApiError, ErrorCode, bad_value
from daemon.control.limits import check_attributes, check_query, over_limit

Route = Literal["fts", "vector", "structured"]
Fusion = Literal["rrf", "weighted"]
ROUTES: tuple[Route, ...] = ("fts", "vector", "structured")
T = TypeVar("T")


class _In(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    pass


class RecordIn(_In):
    namespace: str
    kind: str
    title: str
    body: str
    attributes: dict[str, Any] = {}
    source_path: str | None = None
    id: uuid.UUID | None = None


class RecordUpdate(_In):
    namespace: str
    kind: str
    title: str
    body: str
    attributes: dict[str, Any] = {}
    source_path: str | None = None


class RecallRequest(_In):
    namespace: str
    query: str
    k: int | None = None
    kinds: list[str] | None = None
    attributes: dict[str, Any] | None = None
    routes: list[Route] | None = None
    fusion: Fusion | None = None
    deadline_ms: int | None = None
    thresholds: dict[Literal["vector"], float] | None = None
    """Per route, the least score a candidate must reach (`[recall] thresholds`, which these
    take precedence over; -1 turns a configured vector floor off); `vector` is a cosine
    similarity in [-1, 1]. When no vector candidate reaches it, full text answers as it does alone."""


class Feedback(_In):
    search_id: uuid.UUID
    id: uuid.UUID
    useful: bool


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
    KIND_NOT_CHECKED = "kind_not_checked"
    """The record's kind is in `[duplicates] unchecked_kinds` (by default `doc`, what `recalld
    ingest` writes): its records are neither checked nor compared with."""


class DuplicateCheckRequest(_In):
    """`POST /v1/duplicates/check`: the check a create of this title would run, as a dry run."""

    namespace: str
    kind: str
    title: str


class DuplicateAuditRequest(_In):
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


class RecordCreated(msgspec.Struct, kw_only=True):
    id: uuid.UUID
    revision: int
    duplicate_check: DuplicateCheck


class RecordUpdated(msgspec.Struct, kw_only=True, omit_defaults=True):
    id: uuid.UUID
    revision: int
    changed: bool
    duplicate_check: DuplicateCheck | None = None
    """Present when the update changed the title: the new title's check, as on create."""


class RecallHit(msgspec.Struct, kw_only=True, omit_defaults=True):
    id: uuid.UUID
    title: str
    kind: str
    source_path: str | None
    score: float
    routes: dict[str, int]
    route_scores: dict[str, float] = {}
    """Each route's own score for the record: `vector` the cosine of its best chunk (what
    `thresholds.vector` compares), `fts` the evidence level plus ts_rank / (ts_rank + 1),
    `structured` the record's last change in seconds since the epoch (its order)."""
    revision: int
    snippet: str | None = None


class DegradedRoute(msgspec.Struct, kw_only=True, omit_defaults=True):
    # `pending` only where it means something (omit_defaults): Appendix A's shape stays as it was.
    route: str
    reason: str
    message: str = ""
    pending: int | None = None
    """`vector_indexing`: records of the namespace the vector route cannot find yet."""


class FusionInfo(msgspec.Struct, kw_only=True):
    name: str
    version: int
    weights: dict[str, float]
    k: float | None = None
    evidence: dict[str, float] = {}
    """The factor on a full-text candidate by what it matched (`[recall] fts_evidence_weights`)."""
    thresholds: dict[str, float] = {}
    """The least score each route's candidates had to reach (config and request together)."""


class RecallResponse(msgspec.Struct, kw_only=True):
    results: list[RecallHit]
    degraded_routes: list[DegradedRoute]
    fusion: FusionInfo
    generation: str | None
    timings_ms: dict[str, float]
    search_id: uuid.UUID


_encoder = msgspec.json.Encoder()


def encode(value: Any) -> bytes:
    return _encoder.encode(value)


def decode(payload: bytes, into: type[T]) -> T:
    """Decode a request body, turning every failure into a 400 with a stable code."""
    if not payload.strip():
        raise ApiError(400, ErrorCode.INVALID_JSON, "the request body is empty; a JSON object is expected")
    try:
        return msgspec.json.decode(payload, type=into)
    except msgspec.ValidationError as exc:
        raise ApiError(400, ErrorCode.INVALID_REQUEST, str(exc)) from exc
    except msgspec.DecodeError as exc:
        raise ApiError(400, ErrorCode.INVALID_JSON, f"the body is not valid JSON: {exc}") from exc
    except RecursionError:  # msgspec's own limit, near 1,000 levels
        raise ApiError(400, ErrorCode.INVALID_JSON, "the body nests JSON too deeply") from None


# PostgreSQL indexes (namespace, kind, normalised title) and (namespace, source_path) with btrees,
# whose entries hold at most 2,704 bytes: these leave room for the longest namespace and kind.
SOURCE_PATH_MAX_BYTES = 2000
TITLE_MAX_BYTES = 1800


def check_text(
    field: str,
    value: str,
    *,
    max_chars: int,
    max_bytes: int | None = None,
    required: bool = True,
    limit: str | None = None,
) -> None:
    """Not blank (when `required`), at most `max_chars` characters and `max_bytes` bytes of UTF-8
    (a limit of the index that holds it), no NUL. `limit`: the config key `max_chars` comes
    from, named in the refusal (daemon/control/limits.py)."""
    if required and not value.strip():
        raise bad_value(f"{field} must not be empty")
    if limit is not None and len(value) > max_chars:
        raise over_limit(f"characters in {field}", len(value), limit, max_chars)
    if len(value) > max_chars:
        raise bad_value(f"{field} is {len(value)} characters long; at most {max_chars} are allowed")
    if max_bytes is not None and (size := len(value.encode())) > max_bytes:
        raise bad_value(f"{field} is {size} bytes long in UTF-8; at most {max_bytes} are allowed")
    if "\x00" in value:
        raise bad_value(f"{field} contains a NUL character, which cannot be stored")


MAX_JSON_DEPTH = 64
"""How deeply attributes may nest. Deeper values got past decoding only to fail in the JSON
encoders behind it (Python's recursion limit, near 1,000 levels)."""


def _check_json_text(field: str, value: Any, depth: int = 0) -> None:
    """PostgreSQL's jsonb cannot hold NUL either, in keys or in string values."""
    if isinstance(value, str):
        if "\x00" in value:
            raise bad_value(f"{field} contains a NUL character, which cannot be stored")
    elif isinstance(value, dict | list) and depth == MAX_JSON_DEPTH:
        raise bad_value(f"{field} nests deeper than {MAX_JSON_DEPTH} levels")
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_json_text(f"{field}.{key}", key, depth + 1)
            _check_json_text(f"{field}.{key}", item, depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_json_text(f"{field}[{index}]", item, depth + 1)


def check_record(record: RecordIn | RecordUpdate, config: Config) -> None:
    limits = config.records
    check_text("namespace", record.namespace, max_chars=limits.max_namespace_chars, limit="records.max_namespace_chars")
    check_text("kind", record.kind, max_chars=limits.max_kind_chars, limit="records.max_kind_chars")
    check_text(
        "title",
        record.title,
        max_chars=limits.max_title_chars,
        max_bytes=TITLE_MAX_BYTES,
        limit="records.max_title_chars",
    )
    check_text("body", record.body, max_chars=limits.max_body_chars, required=False, limit="records.max_body_chars")
    if record.source_path is not None:
        check_text("source_path", record.source_path, max_chars=SOURCE_PATH_MAX_BYTES, max_bytes=SOURCE_PATH_MAX_BYTES)
    check_attributes("attributes", record.attributes, config)
    _check_json_text("attributes", record.attributes)


def check_recall(request: RecallRequest, config: Config) -> None:
    limits = config.recall
    namespace_chars = config.records.max_namespace_chars
    check_text("namespace", request.namespace, max_chars=namespace_chars, limit="records.max_namespace_chars")
    check_query(request.query, request.kinds, config)
    check_text("query", request.query, max_chars=limits.max_query_chars)
    if request.k is not None and request.k > limits.max_k:
        raise over_limit("k", request.k, "recall.max_k", limits.max_k)
    if request.k is not None and request.k < 1:
        raise bad_value(f"k must be between 1 and {limits.max_k}, got {request.k}")
    if request.deadline_ms is not None and request.deadline_ms > limits.max_deadline_ms:
        raise over_limit("deadline_ms", request.deadline_ms, "recall.max_deadline_ms", limits.max_deadline_ms)
    if request.deadline_ms is not None and request.deadline_ms < 1:
        raise bad_value(f"deadline_ms must be between 1 and {limits.max_deadline_ms}, got {request.deadline_ms}")
    if request.routes is not None and not request.routes:
        raise bad_value("routes must name at least one route")
    for route, floor in (request.thresholds or {}).items():
        if not -1 <= floor <= 1:
            raise bad_value(f"thresholds.{route} is a cosine similarity, between -1 and 1; got {floor}")
    for kind in request.kinds or []:
        check_text("kinds[]", kind, max_chars=config.records.max_kind_chars, limit="records.max_kind_chars")
    if request.attributes is not None:
        check_attributes("attributes", request.attributes, config)
        _check_json_text("attributes", request.attributes)
