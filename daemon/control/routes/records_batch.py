"""`POST /v1/records:batch`: many writes in one request, each on its own.

Every item is decoded, checked and written as a `POST /v1/records` (or, with `upsert`, a `PUT`
of the live record with the same `source_path`) would be, in its own transaction: a bad item in
the middle is reported in its place and the others land. The duplicate checks of the titles
written run after the writes, together (`RecordWrites.check_titles`), their titles embedded while the items
are written (`RecordWrites.batch_ahead`). The answer is 200 with one result per
item, in order, and it says what the store holds: whatever fails an item (its input, a limit of
PostgreSQL's, the store lost, a fault of ours) fails it in its slot, and the items after it are
still tried. Only a body that is not a batch at all (not JSON, no `records` list, more items
than `[records] max_batch`) is refused as a whole.
"""

from __future__ import annotations

import logging
import uuid

import msgspec
from aiohttp import web

from recalld.control.access import Peer
from recalld.control.context import SERVICES, Services, ok, peer, read_body
from recalld.control.decoding import check_record, decode
from recalld.control.errors import not_indexable
from recalld.services.duplicates import Checked
from recalld.services.records import Written
from recalld.store.db import STORE_DOWN_ERRORS, STORE_LIMIT_ERRORS
from recalld.wire.errors import ApiError, ErrorCode
from recalld.wire.records import BatchResult, ItemError, ItemResult, RecordIn, RecordsBatch

log = logging.getLogger("recalld.control")


async def _write(services: Services, caller: Peer, raw: msgspec.Raw, upsert: bool) -> Written:
    """Decode, check and write one item (no duplicate check)."""
    record = decode(bytes(raw), RecordIn)
    check_record(record, services.config)
    services.access.require_write(caller, record.namespace)
    return await services.writes.write_item(record, upsert=upsert)


def _writable(services: Services, caller: Peer, batch: RecordsBatch) -> list[RecordIn]:
    """The items that decode and that the caller may write: their titles are embedded while the
    batch is written (each is decoded and checked again in its turn, where a refusal is answered).
    None of an upsert's: mostly revisions of unchanged titles, which are not checked."""
    records: list[RecordIn] = []
    for raw in [] if batch.upsert else batch.records:
        try:
            record = decode(bytes(raw), RecordIn)
            check_record(record, services.config)
            services.access.require_write(caller, record.namespace)
        except Exception:  # answered in its turn
            continue
        records.append(record)
    return records


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
    batch = decode(await read_body(request), RecordsBatch)
    limit = services.config.records.max_batch
    if len(batch.records) > limit:
        raise ApiError(
            413,
            ErrorCode.PAYLOAD_TOO_LARGE,
            f"{len(batch.records)} records in one batch; at most {limit} ([records] max_batch)",
        )
    caller = peer(request)
    async with services.writes.batch_ahead(_writable(services, caller, batch)) as ahead:
        results, written = await _write_all(services, caller, batch)
        checks = await services.writes.check_titles([checked for _, checked in written], ahead)
    for (result, _), check in zip(written, checks, strict=True):
        result.duplicate_check = check
    counts = {
        outcome: sum(1 for r in results if r.outcome == outcome) for outcome in ("created", "updated", "unchanged")
    }
    failed = sum(1 for r in results if r.outcome == "failed")
    return ok(BatchResult(results=results, failed=failed, **counts))


async def _write_all(
    services: Services, caller: Peer, batch: RecordsBatch
) -> tuple[list[ItemResult], list[tuple[ItemResult, Checked]]]:
    """Every item written in its turn: its result, and the written ones with their titles to check."""
    results: list[ItemResult] = []
    written: list[tuple[ItemResult, Checked]] = []
    for index, raw in enumerate(batch.records):
        try:
            result, checked = await _write(services, caller, raw, batch.upsert)
            if checked is not None:
                written.append((result, checked))
        except ApiError as error:
            result = _refused(error)
        except STORE_DOWN_ERRORS as exc:
            # this item is not known to be written; those before it are, and the rest are tried
            down = ApiError(503, ErrorCode.STORE_UNAVAILABLE, f"PostgreSQL did not answer ({type(exc).__name__})")
            result = _refused(down)
        except STORE_LIMIT_ERRORS as exc:  # its transaction wrote nothing
            result = _refused(not_indexable(exc))
        except Exception:
            # A fault of ours, in this item's write alone: answering the whole batch 500 would
            # hide the items before it, which are written.
            log.exception("item %d of a batch failed", index)
            result = _refused(ApiError(500, ErrorCode.INTERNAL_ERROR, "internal error; see the daemon log"))
        result.index = index
        results.append(result)
    return results, written


def install(app: web.Application) -> None:
    app.router.add_post("/v1/records:batch", write_batch)
