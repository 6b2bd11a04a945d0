"""In-memory fakes of the index ports, for unit tests that need no PostgreSQL.

Plain Python and honest: every behaviour a fake has is the PostgreSQL implementation's
(`daemon/store/vectors.py`, `daemon/store/records.py`), and `tests/actors/ports/test_port_contracts.py`
runs the same cases against both, so a fake cannot drift into a lie. What a fake does not model
it does not have (no transactions: `change_mark` is always settled).

Time: holds end on `clock()` (anyio's clock by default, so trio's MockClock drives them);
the timestamps a row carries (`retired_at`, `activated_at`) are wall-clock UTC, as in PostgreSQL.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import anyio
import msgspec
import numpy as np
import numpy.typing as npt

from recalld.actors.ports.embedding import VectorSpace
from recalld.actors.ports.index import (
    BodyToIndex,
    GenerationCopy,
    GenerationRow,
    Holds,
    Pointer,
    RecordToIndex,
    VectorRows,
)


def _wall() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass
class _Record:
    id: uuid.UUID
    revision: int
    namespace: str
    title: str
    body: str
    change_seq: int
    deleted: bool = False


@dataclass
class _Chunk:
    surrogate: int
    record_id: uuid.UUID
    revision: int
    chunker: str
    chunk_no: int
    namespace: str
    text: str
    text_sha256: str
    retired_at: dt.datetime | None = None


@dataclass
class _Hold:
    revision: int
    reason: str
    held_at: float
    retry_at: float
    attempts: int = 1


class FakeDatabase:
    """The tables the ports read: records, chunks, vectors, holds, generations, the pointer."""

    def __init__(self, clock: Callable[[], float] = anyio.current_time) -> None:
        self.clock = clock
        self.records: dict[uuid.UUID, _Record] = {}
        self.change_seq = 0
        self.chunks: dict[int, _Chunk] = {}
        self.last_surrogate = 0
        self.vectors: dict[tuple[str, int], npt.NDArray[np.float32]] = {}
        self.indexed: dict[tuple[str, uuid.UUID], tuple[int, str]] = {}
        self.holds: dict[tuple[str, uuid.UUID], _Hold] = {}
        self.spaces: dict[str, object] = {}
        self.generations: dict[str, GenerationRow] = {}
        self.copies: dict[tuple[str, str], GenerationCopy] = {}
        self.current: str | None = None
        self.previous: str | None = None
        self.version = 0

    def next_change(self) -> int:
        self.change_seq += 1
        return self.change_seq

    def retire_chunks(self, record_id: uuid.UUID) -> None:
        """As the writing transaction of an update or forget does: retire, clear, drop vectors."""
        now = _wall()
        for chunk in self.chunks.values():
            if chunk.record_id == record_id and chunk.retired_at is None:
                chunk.retired_at, chunk.text, chunk.text_sha256 = now, "", ""
                for key in [k for k in self.vectors if k[1] == chunk.surrogate]:
                    del self.vectors[key]

    def live(self, record_id: uuid.UUID, revision: int) -> bool:
        record = self.records.get(record_id)
        return record is not None and not record.deleted and record.revision == revision


class FakeRecords:
    """The record writes the index reacts to, as `RecordRepository` makes them."""

    def __init__(self, db: FakeDatabase) -> None:
        self._db = db

    async def create(self, namespace: str, title: str, body: str) -> uuid.UUID:
        record_id = uuid.uuid4()
        self._db.records[record_id] = _Record(record_id, 1, namespace, title, body, self._db.next_change())
        return record_id

    async def update(self, record_id: uuid.UUID, title: str, body: str) -> int | None:
        """The new revision (the same one when nothing changed); None for no live record."""
        record = self._db.records.get(record_id)
        if record is None or record.deleted:
            return None
        if (record.title, record.body) == (title, body):
            return record.revision
        record.title, record.body = title, body
        record.revision += 1
        record.change_seq = self._db.next_change()
        self._db.retire_chunks(record_id)
        return record.revision

    async def forget(self, record_id: uuid.UUID) -> bool:
        record = self._db.records.get(record_id)
        if record is None or record.deleted:
            return False
        record.deleted, record.title, record.body = True, "", ""
        record.change_seq = self._db.next_change()
        self._db.retire_chunks(record_id)
        return True


class FakeVectorStore:
    """Every role of `recalld.actors.ports.index.VectorStore`, in memory."""

    def __init__(self, db: FakeDatabase | None = None) -> None:
        self.db = db or FakeDatabase()

    # -- SpaceCatalogue

    async def ensure_space(self, space: VectorSpace) -> None:
        self.db.spaces.setdefault(space.key, msgspec.to_builtins(space))

    async def spaces(self) -> dict[str, object]:
        return dict(self.db.spaces)

    # -- IndexBacklog

    def _to_index(
        self, space_id: str, chunker: str, after: int, namespaces: Collection[str] | None = None
    ) -> list[_Record]:
        now = self.db.clock()
        due = []
        for record in self.db.records.values():
            if record.deleted or record.change_seq <= after:
                continue
            if namespaces is not None and record.namespace not in namespaces:
                continue
            if self.db.indexed.get((space_id, record.id)) == (record.revision, chunker):
                continue
            hold = self.db.holds.get((space_id, record.id))
            if hold is not None and hold.revision == record.revision and hold.retry_at > now:
                continue
            due.append(record)
        return sorted(due, key=lambda r: r.change_seq)

    async def records_to_index(self, space_id: str, chunker: str, limit: int, *, after: int = 0) -> list[RecordToIndex]:
        return [
            RecordToIndex(r.id, r.revision, r.namespace, r.title, r.body, r.change_seq)
            for r in self._to_index(space_id, chunker, after)[:limit]
        ]

    async def count_to_index(
        self, space_id: str, chunker: str, *, after: int = 0, namespaces: Collection[str] | None = None
    ) -> int:
        return len(self._to_index(space_id, chunker, after, namespaces))

    async def bodies_to_index(
        self,
        space_id: str,
        chunker: str,
        *,
        namespaces: Collection[str],
        after: int = 0,
        known: Collection[tuple[uuid.UUID, int]] = (),
    ) -> list[BodyToIndex]:
        skip = set(known)
        return [
            BodyToIndex(r.id, r.revision, r.namespace, None if (r.id, r.revision) in skip else r.body)
            for r in self._to_index(space_id, chunker, after, namespaces)
        ]

    async def change_mark(self) -> int | None:
        # No transactions here: every change is committed the moment it is made.
        return max((r.change_seq for r in self.db.records.values()), default=0)

    async def refresh_statistics(self) -> None:
        pass  # no planner

    async def store_batch(
        self,
        space_id: str,
        chunker: str,
        items: Sequence[tuple[RecordToIndex, list[str], list[str], npt.NDArray[np.float32]]],
    ) -> int:
        db = self.db
        kept = [item for item in items if db.live(item[0].id, item[0].revision)]
        stored = 0
        for record, texts, hashes, vectors in kept:
            existing = {
                c.chunk_no: c
                for c in db.chunks.values()
                if (c.record_id, c.revision, c.chunker) == (record.id, record.revision, chunker)
            }
            matrix = np.asarray(vectors, dtype=np.float32)
            for number, (text, digest) in enumerate(zip(texts, hashes, strict=True)):
                chunk = existing.get(number)
                if chunk is None or chunk.text_sha256 != digest:
                    # PostgreSQL's unique (record, revision, chunker, chunk_no) refuses this too
                    assert chunk is None, "another text for an existing chunk"
                    db.last_surrogate += 1
                    chunk = _Chunk(
                        db.last_surrogate, record.id, record.revision, chunker, number, record.namespace, text, digest
                    )
                    db.chunks[chunk.surrogate] = chunk
                db.vectors.setdefault((space_id, chunk.surrogate), matrix[number].copy())
                stored += 1
            db.holds.pop((space_id, record.id), None)
            db.indexed[(space_id, record.id)] = (record.revision, chunker)
        return stored

    # -- IndexHolds

    async def hold(
        self, space_id: str, holds: Sequence[tuple[uuid.UUID, int, str]], *, first_s: float, longest_s: float
    ) -> None:
        now = self.db.clock()
        for record_id, revision, reason in holds:
            earlier = self.db.holds.get((space_id, record_id))
            attempts = earlier.attempts if earlier is not None and earlier.revision == revision else 0
            wait = min(longest_s, first_s * 2**attempts)
            self.db.holds[(space_id, record_id)] = _Hold(revision, reason, now, now + wait, attempts + 1)

    async def held(self, space_id: str, *, namespaces: Collection[str] | None = None) -> Holds:
        now = self.db.clock()
        by_reason: dict[str, int] = {}
        first_end: float | None = None
        for (space, record_id), hold in self.db.holds.items():
            if space != space_id or hold.retry_at <= now or not self.db.live(record_id, hold.revision):
                continue
            if namespaces is not None and self.db.records[record_id].namespace not in namespaces:
                continue
            by_reason[hold.reason] = by_reason.get(hold.reason, 0) + 1
            first_end = hold.retry_at if first_end is None else min(first_end, hold.retry_at)
        return Holds(
            by_reason=dict(sorted(by_reason.items())), next_end_s=None if first_end is None else first_end - now
        )

    async def delete_stale_holds(self) -> int:
        stale = [key for key, hold in self.db.holds.items() if not self.db.live(key[1], hold.revision)]
        for key in stale:
            del self.db.holds[key]
        return len(stale)

    # -- DeltaSource

    def _live_vectors(self, space_id: str, chunker: str | None = None) -> list[tuple[int, _Chunk]]:
        return sorted(
            (surrogate, self.db.chunks[surrogate])
            for (space, surrogate) in self.db.vectors
            if space == space_id
            and self.db.chunks[surrogate].retired_at is None
            and (chunker is None or self.db.chunks[surrogate].chunker == chunker)
        )

    def _rows(self, space_id: str, chosen: list[tuple[int, _Chunk]], dimension: int) -> VectorRows:
        if not chosen:
            return VectorRows.empty(dimension)
        return VectorRows(
            surrogates=np.array([s for s, _ in chosen], dtype=np.int64),
            record_ids=[c.record_id for _, c in chosen],
            revisions=np.array([c.revision for _, c in chosen], dtype=np.int32),
            namespaces=[c.namespace for _, c in chosen],
            vectors=np.stack([self.db.vectors[(space_id, s)] for s, _ in chosen]).astype(np.float32),
        )

    async def vectors_after(self, space_id: str, dimension: int, after: int, limit: int) -> VectorRows:
        chosen = [(s, c) for s, c in self._live_vectors(space_id) if s > after][:limit]
        return self._rows(space_id, chosen, dimension)

    async def newest_live_surrogate(self, space_id: str, *, namespaces: Collection[str] | None = None) -> int:
        return max(
            (s for s, c in self._live_vectors(space_id) if namespaces is None or c.namespace in namespaces), default=0
        )

    async def retired_surrogates(self, up_to: int) -> npt.NDArray[np.int64]:
        found = sorted(s for s, c in self.db.chunks.items() if c.retired_at is not None and s <= up_to)
        return np.array(found, dtype=np.int64)

    async def count_vectors_after(self, space_id: str, after: int) -> int:
        return sum(1 for space, s in self.db.vectors if space == space_id and s > after)

    # -- BuildSource

    async def build_snapshot(self, space_id: str, chunker: str, dimension: int) -> tuple[VectorRows, int, int, int]:
        rows = self._rows(space_id, self._live_vectors(space_id, chunker), dimension)
        source = max((s for space, s in self.db.vectors if space == space_id), default=0)
        tombstone = max((r.change_seq for r in self.db.records.values()), default=0)
        return rows, source, tombstone, len(self._to_index(space_id, chunker, 0))

    # -- CopySource

    async def copy_snapshot(self, space_id: str, chunker: str, dimension: int, up_to: int) -> VectorRows:
        chosen = [(s, c) for s, c in self._live_vectors(space_id, chunker) if s <= up_to]
        return self._rows(space_id, chosen, dimension)

    async def add_copy(self, copy: GenerationCopy) -> None:
        assert copy.generation_id in self.db.generations, "a copy names a generation row"  # a foreign key
        key = (copy.generation_id, copy.manifest_sha256)
        assert key not in self.db.copies, "the copy is recorded already"  # the primary key
        self.db.copies[key] = copy

    async def copies(self, generation_id: str) -> list[GenerationCopy]:
        found = [c for (g, _), c in self.db.copies.items() if g == generation_id]
        return sorted(found, key=lambda c: (c.built_at, c.manifest_sha256))

    # -- GenerationCatalogue

    async def pointer(self) -> Pointer:
        current = self.db.generations[self.db.current] if self.db.current is not None else None
        return Pointer(current=current, previous=self.db.previous, version=self.db.version)

    async def generation(self, generation_id: str) -> GenerationRow | None:
        return self.db.generations.get(generation_id)

    async def generations(self) -> list[GenerationRow]:
        return sorted(self.db.generations.values(), key=lambda g: (-g.built_at.timestamp(), g.id))

    async def add_generation(self, row: GenerationRow) -> None:
        assert row.id not in self.db.generations, "the generation id is taken"  # a primary key in PostgreSQL
        self.db.generations[row.id] = row

    async def move_pointer(self, generation_id: str, expected_version: int) -> bool:
        db = self.db
        assert generation_id in db.generations, "the pointer names a generation row"  # a foreign key in PostgreSQL
        if db.version != expected_version:
            return False
        if db.current != generation_id:
            db.previous = db.current
        db.current, db.version = generation_id, db.version + 1
        now = _wall()
        for row in list(db.generations.values()):
            if row.id != generation_id and row.deactivated_at is None and row.activated_at is not None:
                db.generations[row.id] = msgspec.structs.replace(row, deactivated_at=now)
        db.generations[generation_id] = msgspec.structs.replace(
            db.generations[generation_id], activated_at=now, deactivated_at=None
        )
        return True

    async def retire_generation(
        self, generation_id: str, fence: Callable[[GenerationRow, str | None, str | None], bool]
    ) -> bool:
        if generation_id == self.db.current:
            return False
        row = self.db.generations.get(generation_id)
        if row is None or row.state != "verified" or not fence(row, self.db.current, self.db.previous):
            return False
        self.db.generations[generation_id] = msgspec.structs.replace(row, state="deleted")
        return True

    # -- RetiredChunks

    async def retired_chunks(self, retired_before: dt.datetime, *, after: int, limit: int) -> npt.NDArray[np.int64]:
        found = sorted(
            s
            for s, c in self.db.chunks.items()
            if c.retired_at is not None and c.retired_at < retired_before and s > after
        )
        return np.array(found[:limit], dtype=np.int64)

    async def delete_retired_chunks(self, surrogates: Sequence[int], retired_before: dt.datetime) -> int:
        deleted = 0
        for surrogate in {int(s) for s in surrogates}:
            chunk = self.db.chunks.get(surrogate)
            if chunk is not None and chunk.retired_at is not None and chunk.retired_at < retired_before:
                del self.db.chunks[surrogate]
                deleted += 1
        return deleted


class FakeLockServer:
    """Where the builder lock lives: one holder at a time among the locks made from it."""

    def __init__(self) -> None:
        self.holder: FakeBuilderLock | None = None

    def lock(self) -> FakeBuilderLock:
        return FakeBuilderLock(self)


class FakeBuilderLock:
    """`recalld.actors.ports.index.BuilderLock` in memory; `drop()` is the lock's connection dying."""

    def __init__(self, server: FakeLockServer) -> None:
        self._server = server

    @property
    def held(self) -> bool:
        return self._server.holder is self

    async def try_acquire(self) -> bool:
        if self._server.holder is None:
            self._server.holder = self
        return self.held

    async def release(self) -> None:
        if self.held:
            self._server.holder = None

    def drop(self) -> None:
        self._server.holder = None if self.held else self._server.holder
