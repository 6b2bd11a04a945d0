"""The server's refusals, made: each a stable code (`recalld.wire.errors.ErrorCode`), an HTTP status
and a human message."""

from __future__ import annotations

from recalld.actors.recall.policy import NothingAnswered
from recalld.wire.errors import ApiError, ErrorCode


def not_indexable(exc: BaseException) -> ApiError:
    """413 for a value beyond one of PostgreSQL's fixed limits (`STORE_LIMIT_ERRORS`, e.g. a body
    whose tsvector passes 1 MB): the client's input does not fit, and nothing of it was written."""
    reason = getattr(exc, "message", None) or str(exc).splitlines()[0]  # not the DETAIL lines
    message = f"PostgreSQL cannot index this: {reason}; split the text into smaller records"
    return ApiError(413, ErrorCode.NOT_INDEXABLE, message)


def route_unavailable(refusal: NothingAnswered) -> ApiError:
    """A recall no route answered: 503, naming each route and its reason."""
    degraded = [{"route": d.route, "reason": d.reason} for d in refusal.routes]
    return ApiError(503, ErrorCode.ROUTE_UNAVAILABLE, refusal.message, degraded_routes=degraded)
