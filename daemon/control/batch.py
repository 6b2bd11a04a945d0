"""`POST /v1/records:batch`: many writes in one request, each on its own (issue 22 item 3).

Every item is decoded, checked and written as a `POST /v1/records` (or, with `upsert`, a `PUT`
of the live record with the same `source_path`) would be, in its own transaction: a bad item in
the middle is reported in its place and the others land. The answer is 200 with one result per
item, in order; only a body that is not a batch at all (not JSON, no `records` list, more items
than `[records] max_batch`) is refused as a whole.
"""

from __future__ import annotations

import uuid
from typing import Literal

import msgspec
from aiohttp import web

from daemon.control.access import Peer
from daemon.control.context import SERVICES, Services, peer
from daemon.control.errors import ApiError, ErrorCode
from daemon.control.routes import _body, create, ok, revise
from daemon.control.wire import DuplicateCheck, RecordIn, RecordUpdate, check_record, decode
from daemon.store.db import STORE_DOWN_ERRORS


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
    """On a 409 `exact_duplicate`: the live record with this title."""


class BatchResult(msgspec.Struct, kw_only=True):
    results: list[ItemResult]
    created: int
    updated: int
    unchanged: int
    failed: int


async def _write(services: Services, caller: Peer, raw: msgspec.Raw, upsert: bool) -> ItemResult:
    record = decode(bytes(raw), RecordIn)
    if upsert and record.source_path:
        check_record(record, services.config)
        services.access.require_write(caller, record.namespace)
        found = await services.records.by_source(record.namespace, record.source_path)
        if found:
            fields = {name: getattr(record, name) for name in RecordUpdate.__struct_fields__}
            updated = await revise(services, caller, found[0]["id"], RecordUpdate(**fields))
            outcome: Literal["updated", "unchanged"] = "updated" if updated.changed else "unchanged"
            return ItemResult(
                index=0,
                status=200,
                outcome=outcome,
                id=updated.id,
                revision=updated.revision,
                duplicate_check=updated.duplicate_check,
            )
    created = await create(services, caller, record)
    return ItemResult(
        index=0,
        status=201,
        outcome="created",
        id=created.id,
        revision=created.revision,
        duplicate_check=created.duplicate_check,
    )


def _refused(error: ApiError) -> ItemResult:
    existing = error.extra.get("existing_id")
    return ItemResult(
        index=0,
        status=error.status,
        outcome="failed",
        error=ItemError(code=str(error.code), message=error.message),
        existing_id=uuid.UUID(str(existing)) if existing else None,
    )


async def write_batch(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    batch = decode(await _body(request), RecordsBatch)
    limit = services.config.records.max_batch
    if len(batch.records) > limit:
        raise ApiError(
            413,
            ErrorCode.PAYLOAD_TOO_LARGE,
            f"{len(batch.records)} records in one batch; at most {limit} ([records] max_batch)",
        )
    caller = peer(request)
    results: list[ItemResult] = []
    for index, raw in enumerate(batch.records):
        try:
            result = await _write(services, caller, raw, batch.upsert)
        except ApiError as error:
            result = _refused(error)
        except STORE_DOWN_ERRORS as exc:
            # this item is not written; those before it are, and the rest are tried (and will
            # most likely say the same)
            down = ApiError(503, ErrorCode.STORE_UNAVAILABLE, f"PostgreSQL did not answer ({type(exc).__name__})")
            result = _refused(down)
        result.index = index
        results.append(result)
    counts = {
        outcome: sum(1 for r in results if r.outcome == outcome) for outcome in ("created", "updated", "unchanged")
    }
    failed = sum(1 for r in results if r.outcome == "failed")
    return ok(BatchResult(results=results, failed=failed, **counts))


def install(app: web.Application) -> None:
    app.router.add_post("/v1/records:batch", write_batch)
