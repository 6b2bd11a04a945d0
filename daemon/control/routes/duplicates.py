"""The duplicate routes (docs/DUPLICATES.md): `POST /v1/duplicates/check`, the check a create
would run, as a dry run; `POST /v1/duplicates/audit`, a namespace's near-duplicate pairs a page
at a time (what `recalld dupes` prints)."""

from __future__ import annotations

from aiohttp import web

from recalld.actors.embedding.errors import EmbeddingError
from recalld.control.context import SERVICES, ok, peer, read_body
from recalld.control.decoding import TITLE_MAX_BYTES, check_text, decode
from recalld.services.duplicates import DuplicateChecker
from recalld.wire.duplicates import DuplicateAuditRequest, DuplicateCheckRequest
from recalld.wire.errors import ApiError, ErrorCode, bad_value

AUDIT_MAX_PAGE = 10_000


def _checker(request: web.Request) -> DuplicateChecker:
    services = request.app[SERVICES]
    if services.duplicates is None:
        why = "is turned off ([duplicates] enabled = false)" if not services.config.duplicates.enabled else "is missing"
        raise ApiError(503, ErrorCode.ROUTE_UNAVAILABLE, f"this daemon's duplicate check {why}")
    return services.duplicates


async def check(request: web.Request) -> web.Response:
    """Nothing is written and nothing metered as index work: one `dedupe` usage row at most."""
    services = request.app[SERVICES]
    asked = decode(await read_body(request), DuplicateCheckRequest)
    limits = services.config.records
    check_text("namespace", asked.namespace, max_chars=limits.max_namespace_chars)
    check_text("kind", asked.kind, max_chars=limits.max_kind_chars)
    check_text("title", asked.title, max_chars=limits.max_title_chars, max_bytes=TITLE_MAX_BYTES)
    services.access.require_read(peer(request), asked.namespace)
    if services.duplicates is None:  # the answer a create would get
        return ok(services.writes.check_unavailable())
    answer = await services.duplicates.check(asked.namespace, asked.kind, asked.title, dry_run=True)
    return ok(answer)


async def audit(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    asked = decode(await read_body(request), DuplicateAuditRequest)
    limits = services.config.records
    check_text("namespace", asked.namespace, max_chars=limits.max_namespace_chars)
    if asked.kind is not None:
        check_text("kind", asked.kind, max_chars=limits.max_kind_chars)
    if not 1 <= asked.limit <= AUDIT_MAX_PAGE:
        raise bad_value(f"limit must be between 1 and {AUDIT_MAX_PAGE}, got {asked.limit}")
    services.access.require_read(peer(request), asked.namespace)
    try:
        answer = await _checker(request).audit(asked.namespace, asked.kind, after=asked.after, limit=asked.limit)
    except EmbeddingError as error:
        raise ApiError(503, ErrorCode.ROUTE_UNAVAILABLE, f"no vector space to compare titles in: {error}") from None
    return ok(answer)


def install(app: web.Application) -> None:
    app.router.add_post("/v1/duplicates/check", check)
    app.router.add_post("/v1/duplicates/audit", audit)
