"""Request bodies in, answers out: decoding into the wire types (`recalld.wire`) and checking
them against the configured limits.

Decoding is strict (unknown fields refused, types exact) so that a typo in a client is a 400
that names the field, never a silently ignored option. Limits that come from config
(lengths, k, deadlines) are checked after decoding by `check_record` and `check_recall`.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from recalld.config import Config
from recalld.control.limits import check_attributes, check_query, over_limit
from recalld.wire.errors import ApiError, ErrorCode, bad_value
from recalld.wire.recall import RecallRequest
from recalld.wire.records import RecordIn, RecordUpdate

T = TypeVar("T")

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
