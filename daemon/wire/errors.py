"""Errors a client can see: a stable snake_case code, an HTTP status and a human message, sent as
`{"error": {"code", "message"}, ...}`. The codes are part of the wire contract: a client may act
on them, and a code, once published, is never renamed."""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class ErrorCode(StrEnum):
    INVALID_JSON = "invalid_json"
    INVALID_REQUEST = "invalid_request"
    INVALID_VALUE = "invalid_value"
    INVALID_ID = "invalid_id"
    NOT_FOUND = "not_found"
    UNKNOWN_ROUTE = "unknown_route"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    BODY_TIMEOUT = "body_timeout"
    NOT_INDEXABLE = "not_indexable"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    EXACT_DUPLICATE = "exact_duplicate"
    SOURCE_PATH_TAKEN = "source_path_taken"
    """409: a live record of the namespace already has this `source_path` (`existing_id` names it)."""
    ID_CONFLICT = "id_conflict"
    FORBIDDEN = "forbidden"
    ROUTE_UNAVAILABLE = "route_unavailable"
    VECTOR_INDEX_CORRUPT = "vector_index_corrupt"
    SPACE_MISMATCH = "vector_space_mismatch"
    CONFLICT = "conflict"
    STORE_UNAVAILABLE = "store_unavailable"
    SHUTTING_DOWN = "shutting_down"
    INTERNAL_ERROR = "internal_error"
    BACKUP_FAILED = "backup_failed"
    DISPUTE_CLOSED = "dispute_closed"
    """409: the dispute is resolved, superseded or skipped: nothing is left to decide."""
    DISPUTE_IN_PROGRESS = "dispute_in_progress"
    """409: the resolver is answering the dispute now."""
    NO_ANSWER_TO_APPROVE = "no_answer_to_approve"
    """409: approve, but the resolver gave the dispute no usable answer."""
    STALE_ANSWER = "stale_answer"
    """409: approve, but the observations changed since the answer: it was not applied."""


class ApiError(Exception):
    """Raised by handlers and services; the error middleware turns it into the JSON error body."""

    def __init__(self, status: int, code: ErrorCode, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.extra = extra

    def body(self) -> dict[str, Any]:
        return {"error": {"code": str(self.code), "message": self.message}, **self.extra}


def bad_value(message: str) -> ApiError:
    return ApiError(400, ErrorCode.INVALID_VALUE, message)


def not_found(what: str) -> ApiError:
    return ApiError(404, ErrorCode.NOT_FOUND, f"{what} not found")
