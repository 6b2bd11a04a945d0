"""Writing records: the store's write, its refusals as the API's errors, the counters, the word
to the vector route that a namespace changed, and the duplicate check of the titles written.

The record routes and the batch route call this after they have decoded and checked the input
and the caller's rights; what is written is the same whichever route a record came by. The
duplicate check runs after the write and only warns: the record exists whatever it says.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Literal

from recalld.actors.embedding.pace import Foreground
from recalld.config import Config
from recalld.metrics import Metrics
from recalld.services.duplicates import Checked, DuplicateChecker
from recalld.services.duplicates_ahead import Ahead
from recalld.services.recall_indexing import IndexingStatus
from recalld.store.records import ExactDuplicate, IdTaken, RecordFields, RecordRepository, SourcePathTaken
from recalld.wire.duplicates import DuplicateCheck, DuplicateSkipReason
from recalld.wire.errors import ApiError, ErrorCode, not_found
from recalld.wire.records import ItemResult, RecordCreated, RecordIn, RecordUpdate, RecordUpdated

log = logging.getLogger("recalld.records")

UPSERT_TRIES = 3
"""How often an upsert item is written again after losing a race for its path: each loss means
another writer got in between the look-up and the write, so a few tries settle it."""

Written = tuple[ItemResult, Checked | None]
"""A batch item's result, and its title to check when the record is new or retitled."""


def _fields(record: RecordIn | RecordUpdate) -> RecordFields:
    return RecordFields(
        namespace=record.namespace,
        kind=record.kind,
        title=record.title,
        body=record.body,
        attributes=record.attributes,
        source_path=record.source_path,
    )


def _duplicate(exc: ExactDuplicate | SourcePathTaken) -> ApiError:
    if isinstance(exc, SourcePathTaken):
        code, message = ErrorCode.SOURCE_PATH_TAKEN, "a live record of this namespace already has this source_path"
    else:
        code, message = ErrorCode.EXACT_DUPLICATE, "a live record of this namespace and kind already has this title"
    return ApiError(409, code, message, existing_id=str(exc.existing_id))


class RecordWrites:
    """Creates, revises and forgets records; refusals are `ApiError`s with nothing written.
    `revise` lets the store's `NamespaceChange` through: what the caller may learn of the
    record's namespace is the route's to decide."""

    def __init__(
        self,
        records: RecordRepository,
        config: Config,
        metrics: Metrics,
        duplicates: DuplicateChecker | None,
        indexing: IndexingStatus | None,
        foreground: Foreground | None = None,
    ) -> None:
        """`foreground`: held while a write or its check is in progress, so that indexing makes
        room for it (None: never held)."""
        self._foreground = foreground
        self._records = records
        self._config = config
        self._metrics = metrics
        self._duplicates = duplicates
        self._indexing = indexing

    async def create(self, record: RecordIn) -> RecordCreated:
        """Write one new record, then run its duplicate check."""
        with self._held():
            async with self._ahead(record) as ahead:  # the title to the model during the write
                record_id, revision = await self.write_new(record)
                check = await self.duplicate_check(record, record_id, ahead)
        return RecordCreated(id=record_id, revision=revision, duplicate_check=check)

    async def write_new(self, record: RecordIn) -> tuple[uuid.UUID, int]:
        """Write one new record, no duplicate check: (id, revision)."""
        try:
            record_id, revision = await self._records.create(_fields(record), record.id)
        except (ExactDuplicate, SourcePathTaken) as exc:
            refusal = _duplicate(exc)
            self._metrics.write_rejections.labels(code=refusal.code).inc()
            raise refusal from None
        except IdTaken:
            # Ids are unique across namespaces, so a taken id cannot be hidden from a create that
            # picks it; the answer is the same wherever it is taken, live or forgotten, and names
            # nothing: the caller learns only that the id it sent is not free.
            self._metrics.write_rejections.labels(code=ErrorCode.ID_CONFLICT).inc()
            raise ApiError(409, ErrorCode.ID_CONFLICT, f"id {record.id} is already taken") from None
        self._metrics.records_written.labels(operation="create").inc()
        self._written(record.namespace)
        return record_id, revision

    async def revise(self, record_id: uuid.UUID, update: RecordUpdate) -> RecordUpdated:
        """Write a record's new fields (a new revision when anything changed), and check its
        title when the title or the kind changed."""
        with self._held():
            revision, changed, recheck = await self.write_revision(record_id, update)
            if not recheck:
                return RecordUpdated(id=record_id, revision=revision, changed=changed)
            check = await self.duplicate_check(update, record_id)
        return RecordUpdated(id=record_id, revision=revision, changed=changed, duplicate_check=check)

    async def write_revision(self, record_id: uuid.UUID, update: RecordUpdate) -> tuple[int, bool, bool]:
        """`revise` without the duplicate check: (revision, changed, whether its title is to be
        checked again). A title is compared with the titles of its kind, so a new kind is a new
        comparison even for the same title."""
        before = await self._records.get(record_id)
        try:
            done = await self._records.update(record_id, _fields(update))
        except (ExactDuplicate, SourcePathTaken) as exc:
            raise _duplicate(exc) from None
        if done is None:
            raise not_found("record")
        revision, changed = done
        recheck = changed and (before is None or (before["title"], before["kind"]) != (update.title, update.kind))
        if changed:
            self._metrics.records_written.labels(operation="update").inc()
            self._written(update.namespace)
        return revision, changed, recheck

    async def forget(self, record_id: uuid.UUID) -> bool:
        """Forget a live record; False when there was none to forget."""
        if not await self._records.forget(record_id):
            return False
        self._metrics.records_written.labels(operation="forget").inc()
        return True

    async def write_item(self, record: RecordIn, *, upsert: bool) -> Written:
        """Write one item of a batch (no duplicate check), as a create would, or with `upsert`
        and a `source_path` as `upsert` does."""
        with self._held():
            if upsert and record.source_path:
                return await self._upsert(record, record.source_path)
            return await self._create_item(record)

    async def _create_item(self, record: RecordIn) -> Written:
        record_id, revision = await self.write_new(record)
        result = ItemResult(index=0, status=201, outcome="created", id=record_id, revision=revision)
        return result, Checked(record.namespace, record.kind, record.title, record_id)

    async def _revise_item(self, record_id: uuid.UUID, record: RecordIn) -> Written:
        fields = {name: getattr(record, name) for name in RecordUpdate.__struct_fields__}
        revision, changed, retitled = await self.write_revision(record_id, RecordUpdate(**fields))
        outcome: Literal["updated", "unchanged"] = "updated" if changed else "unchanged"
        result = ItemResult(index=0, status=200, outcome=outcome, id=record_id, revision=revision)
        return result, Checked(record.namespace, record.kind, record.title, record_id) if retitled else None

    async def _upsert(self, record: RecordIn, source_path: str) -> Written:
        """Revise the live record of the item's `source_path`, or create it when there is none.

        Another writer may create (or forget) the path's record between the look-up and the
        write. The database keeps one live record per path (`records_live_source_path`), so such
        a create is refused rather than made a second copy, and the item is written again as
        what it now is: a revision of the winner's record (`unchanged` when the text is the
        same), or a create when the record it revised was forgotten. A title refused as an
        exact duplicate is tried again only when its path has a record now (the winner's, with
        this title); otherwise another path's record holds it, and the refusal stands."""
        found = await self._records.by_source(record.namespace, source_path)
        for tries_left in reversed(range(UPSERT_TRIES)):
            try:
                if found:
                    return await self._revise_item(found[0]["id"], record)
                return await self._create_item(record)
            except ApiError as refusal:
                races = (ErrorCode.NOT_FOUND,) if found else (ErrorCode.SOURCE_PATH_TAKEN, ErrorCode.EXACT_DUPLICATE)
                if refusal.code not in races or not tries_left:
                    raise
                found = await self._records.by_source(record.namespace, source_path)
                if refusal.code is ErrorCode.EXACT_DUPLICATE and not found:
                    raise
        raise AssertionError("unreachable: the last try returns or raises")

    def check_unavailable(self) -> DuplicateCheck:
        """The answer of a check that cannot run here: turned off by configuration, or no
        duplicate checker was assembled."""
        settings = self._config.duplicates
        reason = DuplicateSkipReason.UNAVAILABLE if settings.enabled else DuplicateSkipReason.DISABLED
        return DuplicateCheck(status="skipped", reason=reason, threshold=settings.threshold, compared=0, of=0)

    async def duplicate_check(
        self, record: RecordIn | RecordUpdate, record_id: uuid.UUID, ahead: Ahead | None = None
    ) -> DuplicateCheck:
        if self._duplicates is None:
            return self.check_unavailable()
        checker = self._duplicates
        return await checker.check(record.namespace, record.kind, record.title, record_id=record_id, ahead=ahead)

    def _ahead(self, record: RecordIn) -> contextlib.AbstractAsyncContextManager[Ahead | None]:
        """Its title embedded while the block runs, for its check (`DuplicateChecker.ahead`)."""
        if self._duplicates is None:
            return contextlib.nullcontext(None)
        return self._duplicates.ahead(record.namespace, record.kind, record.title)

    def batch_ahead(self, records: Sequence[RecordIn]) -> contextlib.AbstractAsyncContextManager[Mapping[str, Ahead]]:
        """The titles of a batch's `records` embedded while the block runs (they are being
        written), for `check_titles` (`DuplicateChecker.ahead_batch`)."""
        if self._duplicates is None:
            return contextlib.nullcontext({})
        return self._duplicates.ahead_batch([(r.namespace, r.kind, r.title) for r in records])

    async def check_titles(
        self, written: list[Checked], ahead: Mapping[str, Ahead] | None = None
    ) -> list[DuplicateCheck]:
        """The duplicate checks of the titles a batch wrote, all at once after the writes: one
        embedding call and one comparison for the batch instead of one each (one after the
        other, they held a batch's writes to about 9 records/s). A failure of the checks is a
        skipped check for each: the records are written whatever the checks say."""
        if not written:
            return []
        if self._duplicates is None:
            return [self.check_unavailable() for _ in written]
        try:
            with self._held():
                return await self._duplicates.check_batch(written, ahead)
        except Exception:
            log.exception("the duplicate checks of a batch failed")
            return [self.check_unavailable() for _ in written]

    def _held(self) -> contextlib.AbstractContextManager[None]:
        """Foreground work while the block runs: a caller waits for it."""
        return self._foreground.hold() if self._foreground is not None else contextlib.nullcontext()

    def _written(self, namespace: str) -> None:
        """After a create or a changed revision: the record waits to be indexed, so the vector
        route's count of what it cannot find yet in the namespace may be out of date (a forget
        only lowers that count)."""
        if self._indexing is not None:
            self._indexing.written(namespace)
