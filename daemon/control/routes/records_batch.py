"""`POST /v1/records:batch`: many writes in one request, each on its own (issue 22 item 3).

Every item is decoded, checked and written as a `POST /v1/records` (or, with `upsert`, a `PUT`
of the live record with the same `source_path`) would be, in its own transaction: a bad item in
the middle is reported in its place and the others land. The duplicate checks of the titles
written run after the writes, together (`DuplicateChecker.check_batch`). The answer is 200 with one result per
item, in order, and it says what the store holds: whatever fails an item (its input, a limit of
PostgreSQL's, the store lost, a fault of ours) fails it in its slot, and the items after it are
still tried. Only a body that is not a batch at all (not JSON, no `records` list, more items
than `[records] max_batch`) is refused as a whole.
"""

from __future__ import annotations

import logging
import uuid
from typing import Literal

import msgspec
from aiohttp import web

from recalld.control.access import Peer
from recalld.control.context import SERVICES, Services, ok, peer, read_body
from recalld.control.decoding import check_record, decode
from recalld.control.errors import not_indexable
from recalld.control.routes.records import check_unavailable, write_new, write_revision
from recalld.services.duplicates import Checked
from recalld.store.db import STORE_DOWN_ERRORS, STORE_LIMIT_ERRORS
from recalld.wire.errors import ApiError, ErrorCode
from recalld.wire.records import BatchResult, ItemError, ItemResult, RecordIn, RecordsBatch, RecordUpdate

log = logging.getLogger("recalld.control")


UPSERT_TRIES = 3
"""How often an upsert item is written again after losing a race for its path: each loss means
another writer got in between the look-up and the write, so a few tries settle it."""


async def _write(services: Services, caller: Peer, raw: msgspec.Raw, upsert: bool) -> tuple[ItemResult, Checked | None]:
    """Write one item (no duplicate check): its result, and its title to check when it is new
    or changed."""
    record = decode(bytes(raw), RecordIn)
    if upsert and record.source_path:
        return await _upsert(services, caller, record, record.source_path)
    return await _create(services, caller, record)


async def _create(services: Services, caller: Peer, record: RecordIn) -> tuple[ItemResult, Checked | None]:
    record_id, revision = await write_new(services, caller, record)
    result = ItemResult(index=0, status=201, outcome="created", id=record_id, revision=revision)
    return result, Checked(record.namespace, record.kind, record.title, record_id)


async def _revise(
    services: Services, caller: Peer, record_id: uuid.UUID, record: RecordIn
) -> tuple[ItemResult, Checked | None]:
    fields = {name: getattr(record, name) for name in RecordUpdate.__struct_fields__}
    revision, changed, retitled = await write_revision(services, caller, record_id, RecordUpdate(**fields))
    outcome: Literal["updated", "unchanged"] = "updated" if changed else "unchanged"
    result = ItemResult(index=0, status=200, outcome=outcome, id=record_id, revision=revision)
    return result, Checked(record.namespace, record.kind, record.title, record_id) if retitled else None


async def _upsert(
    services: Services, caller: Peer, record: RecordIn, source_path: str
) -> tuple[ItemResult, Checked | None]:
    """Revise the live record of the item's `source_path`, or create it when there is none.

    Another writer may create (or forget) the path's record between the look-up and the write.
    The database keeps one live record per path (`records_live_source_path`), so such a create
    is refused rather than made a second copy, and the item is written again as what it now
    is: a revision of the winner's record (`unchanged` when the text is the same), or a create
    when the record it revised was forgotten. A title refused as an exact duplicate is tried
    again only when its path has a record now (the winner's, with this title); otherwise
    another path's record holds it, and the refusal stands."""
    check_record(record, services.config)
    services.access.require_write(caller, record.namespace)
    found = await services.records.by_source(record.namespace, source_path)
    for tries_left in reversed(range(UPSERT_TRIES)):
        try:
            if found:
                return await _revise(services, caller, found[0]["id"], record)
            return await _create(services, caller, record)
        except ApiError as refusal:
            races = (ErrorCode.NOT_FOUND,) if found else (ErrorCode.SOURCE_PATH_TAKEN, ErrorCode.EXACT_DUPLICATE)
            if refusal.code not in races or not tries_left:
                raise
            found = await services.records.by_source(record.namespace, source_path)
            if refusal.code is ErrorCode.EXACT_DUPLICATE and not found:
                raise
    raise AssertionError("unreachable: the last try returns or raises")


async def _check(services: Services, written: list[tuple[ItemResult, Checked]]) -> None:
    """The duplicate checks of the titles written, all at once, after the writes (SPEC §5: the
    records exist whatever the checks say): one embedding call and one comparison for the batch
    instead of one each (issue 22: one after the other they held writes to about 9 records/s)."""
    if not written:
        return
    if services.duplicates is None:
        for result, _ in written:
            result.duplicate_check = check_unavailable(services)
        return
    try:
        checks = await services.duplicates.check_batch([checked for _, checked in written])
    except Exception:
        # the records are written whatever the checks say: a failed check is a skipped one
        log.exception("the duplicate checks of a batch failed")
        checks = [check_unavailable(services) for _ in written]
    for (result, _), check in zip(written, checks, strict=True):
        result.duplicate_check = check


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
    await _check(services, written)
    counts = {
        outcome: sum(1 for r in results if r.outcome == outcome) for outcome in ("created", "updated", "unchanged")
    }
    failed = sum(1 for r in results if r.outcome == "failed")
    return ok(BatchResult(results=results, failed=failed, **counts))


def install(app: web.Application) -> None:
    app.router.add_post("/v1/records:batch", write_batch)
