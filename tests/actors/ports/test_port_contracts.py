"""The index ports' contract: each case runs against the in-memory fakes (`kernel.fakes`) and
against PostgreSQL (`PgVectorStore`, `PgBuilderLock` over a migrated fresh database), so every
behaviour a fake has is one PostgreSQL has too."""

from __future__ import annotations

import datetime as dt
import hashlib
import inspect
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import asyncpg
import msgspec
import numpy as np
import numpy.typing as npt
import pytest

from recalld.actors.ports.embedding import VectorSpace
from recalld.actors.ports.index import (
    BuilderLock,
    GenerationCopy,
    GenerationRow,
    Holds,
    Pointer,
    RecordToIndex,
    VectorStore,
)
from recalld.store.builder_lock import PgBuilderLock
from recalld.store.records import RecordFields, RecordRepository
from recalld.store.vectors import PgVectorStore
from tests.support.fakes import FakeBuilderLock, FakeDatabase, FakeLockServer, FakeRecords, FakeVectorStore

pytestmark = pytest.mark.anyio

DIM = 4
SPACE = VectorSpace(provider="test", model="a", dimension=DIM, normalized=True, template_version=1)
OTHER = VectorSpace(provider="test", model="b", dimension=DIM, normalized=True, template_version=1)
CHUNKER = "c1:1000:150"


class Records(Protocol):
    async def create(self, namespace: str, title: str, body: str) -> uuid.UUID: ...
    async def update(self, record_id: uuid.UUID, title: str, body: str) -> int | None: ...
    async def forget(self, record_id: uuid.UUID) -> bool: ...


class PgRecords:
    """`RecordRepository` behind the fake's small record-writing surface."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._repo = RecordRepository(pool)
        self._namespaces: dict[uuid.UUID, str] = {}

    async def create(self, namespace: str, title: str, body: str) -> uuid.UUID:
        record_id, _ = await self._repo.create(RecordFields(namespace, "doc", title, body, {}, None))
        self._namespaces[record_id] = namespace
        return record_id

    async def update(self, record_id: uuid.UUID, title: str, body: str) -> int | None:
        done = await self._repo.update(
            record_id, RecordFields(self._namespaces[record_id], "doc", title, body, {}, None)
        )
        return None if done is None else done[0]

    async def forget(self, record_id: uuid.UUID) -> bool:
        return await self._repo.forget(record_id)


@dataclass
class World:
    store: VectorStore
    records: Records
    lock: Callable[[], BuilderLock]


@pytest.fixture(params=["fake", "postgres"])
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    # A plain fixture, so that only the PostgreSQL case asks for the database (`pool`).
    if request.param == "fake":
        db = FakeDatabase()
        server = FakeLockServer()
        yield World(FakeVectorStore(db), FakeRecords(db), server.lock)
        return
    pool: asyncpg.Pool = request.getfixturevalue("pool")
    dsn: str = request.getfixturevalue("fresh_dsn")
    yield World(PgVectorStore(pool), PgRecords(pool), lambda: PgBuilderLock(dsn))


def chunks(
    record: RecordToIndex, count: int = 1
) -> tuple[RecordToIndex, list[str], list[str], npt.NDArray[np.float32]]:
    """`count` chunks of the record, each with a distinct unit vector."""
    texts = [f"{record.title} part {i}" for i in range(count)]
    hashes = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
    seed = int(hashlib.sha256(f"{record.id}{record.revision}".encode()).hexdigest()[:8], 16)
    vectors = np.random.default_rng(seed).standard_normal((count, DIM)).astype(np.float32)
    return record, texts, hashes, vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


async def due(world: World, space: VectorSpace = SPACE, **kw: Any) -> list[tuple[str, int]]:
    return [(r.title, r.revision) for r in await world.store.records_to_index(space.key, CHUNKER, 100, **kw)]


async def index_all(world: World, space: VectorSpace = SPACE, count: int = 1) -> int:
    items = [chunks(r, count) for r in await world.store.records_to_index(space.key, CHUNKER, 100)]
    return await world.store.store_batch(space.key, CHUNKER, items)


# -- SpaceCatalogue


async def test_a_space_is_registered_once_with_its_spec(world: World) -> None:
    assert await world.store.spaces() == {}
    await world.store.ensure_space(SPACE)
    await world.store.ensure_space(SPACE)
    await world.store.ensure_space(OTHER)
    assert await world.store.spaces() == {SPACE.key: msgspec.to_builtins(SPACE), OTHER.key: msgspec.to_builtins(OTHER)}


# -- IndexBacklog


async def test_records_to_index_come_in_change_order_behind_a_cursor(world: World) -> None:
    await world.store.ensure_space(SPACE)
    assert await world.store.change_mark() == 0
    first = await world.records.create("ns", "First", "one")
    await world.records.create("other", "Second", "two")
    third = await world.records.create("ns", "Third", "three")
    assert await world.records.update(first, "First, again", "one more") == 2
    assert await world.records.update(third, "Third", "three") == 1, "an unchanged write keeps the revision"

    listed = await world.store.records_to_index(SPACE.key, CHUNKER, 100)
    assert [(r.title, r.revision, r.namespace) for r in listed] == [
        ("Second", 1, "other"),
        ("Third", 1, "ns"),
        ("First, again", 2, "ns"),
    ]
    assert [r.change_seq for r in listed] == sorted(r.change_seq for r in listed)
    assert listed[0].body == "two" and listed[0].id != first
    assert await world.store.change_mark() == listed[-1].change_seq
    assert await due(world, after=listed[0].change_seq) == [("Third", 1), ("First, again", 2)]
    assert [r.title for r in await world.store.records_to_index(SPACE.key, CHUNKER, 1)] == ["Second"]
    assert await world.store.count_to_index(SPACE.key, CHUNKER) == 3
    assert await world.store.count_to_index(SPACE.key, CHUNKER, after=listed[1].change_seq) == 1
    assert await world.store.count_to_index(SPACE.key, CHUNKER, namespaces=["ns"]) == 2
    assert await world.store.count_to_index(SPACE.key, CHUNKER, namespaces=["other", "elsewhere"]) == 1
    assert await world.store.count_to_index(SPACE.key, CHUNKER, namespaces=[]) == 0

    assert await world.records.forget(third)
    assert await due(world) == [("Second", 1), ("First, again", 2)]
    assert await world.store.change_mark() == listed[-1].change_seq + 1, "a forget is a change"


async def test_bodies_to_index_are_those_counted_the_known_ones_without_their_body(world: World) -> None:
    """What `count_to_index` counts, record by record (for counting their chunks): a revision
    the caller already knows comes without its body."""
    store = world.store
    await store.ensure_space(SPACE)
    done = await world.records.create("ns", "Done", "indexed already")
    assert await index_all(world) == 1
    first = await world.records.create("ns", "First", "one")
    changed = await world.records.create("ns", "Changed", "old")
    assert await world.records.update(changed, "Changed", "new") == 2
    held = await world.records.create("ns", "Held", "bad")
    await world.records.create("other", "Elsewhere", "not asked about")
    await store.hold(SPACE.key, [(held, 1, "input_rejected")], first_s=600, longest_s=86_400)

    listed = await store.bodies_to_index(SPACE.key, CHUNKER, namespaces=["ns"])
    assert sorted((b.id, b.revision, b.namespace, b.body) for b in listed) == sorted(
        [(first, 1, "ns", "one"), (changed, 2, "ns", "new")]
    )
    assert done not in {b.id for b in listed} and held not in {b.id for b in listed}
    assert len(listed) == await store.count_to_index(SPACE.key, CHUNKER, namespaces=["ns"])

    known = await store.bodies_to_index(SPACE.key, CHUNKER, namespaces=["ns"], known=[(first, 1), (changed, 1)])
    assert sorted((b.id, b.body) for b in known) == sorted([(first, None), (changed, "new")]), "revision 1 is old"
    mark = await store.change_mark()
    assert mark is not None
    assert await store.bodies_to_index(SPACE.key, CHUNKER, namespaces=["ns"], after=mark) == []
    assert [b.body for b in await store.bodies_to_index(SPACE.key, CHUNKER, namespaces=["other", "x"])] == [
        "not asked about"
    ]
    assert await store.bodies_to_index(SPACE.key, CHUNKER, namespaces=[]) == []


async def test_stored_records_are_done_per_space_revision_and_chunker(world: World) -> None:
    await world.store.ensure_space(SPACE)
    await world.store.ensure_space(OTHER)
    kept = await world.records.create("ns", "Kept", "body")
    changed = await world.records.create("ns", "Changed", "body")
    assert await index_all(world, count=2) == 4
    assert await due(world) == []
    assert await world.store.count_to_index(SPACE.key, CHUNKER) == 0
    assert await world.store.count_to_index(SPACE.key, "another-chunker") == 2
    assert sorted(await due(world, OTHER)) == [("Changed", 1), ("Kept", 1)]

    assert await world.records.update(changed, "Changed", "new body") == 2
    assert await due(world) == [("Changed", 2)]
    stale = RecordToIndex(kept, 7, "ns", "Kept", "body")
    assert await world.store.store_batch(SPACE.key, CHUNKER, [chunks(stale)]) == 0, "not the live revision"
    assert await world.store.store_batch(SPACE.key, CHUNKER, []) == 0
    assert await world.store.newest_live_surrogate(OTHER.key) == 0


async def test_the_same_chunk_in_another_space_keeps_its_surrogate(world: World) -> None:
    await world.store.ensure_space(SPACE)
    await world.store.ensure_space(OTHER)
    await world.records.create("ns", "Shared", "body")
    await index_all(world, SPACE, count=2)
    await index_all(world, OTHER, count=2)
    here = await world.store.vectors_after(SPACE.key, DIM, 0, 100)
    there = await world.store.vectors_after(OTHER.key, DIM, 0, 100)
    assert here.surrogates.tolist() == there.surrogates.tolist() and len(here) == 2
    # storing the same record again keeps the vectors stored first (and their surrogates)
    [record] = await world.store.records_to_index(SPACE.key, "c2", 10)
    assert await world.store.store_batch(SPACE.key, CHUNKER, [chunks(record, 2)]) == 2
    again = await world.store.vectors_after(SPACE.key, DIM, 0, 100)
    assert again.surrogates.tolist() == here.surrogates.tolist()
    np.testing.assert_array_equal(again.vectors, here.vectors)


# -- IndexHolds


async def test_a_held_revision_is_neither_returned_nor_counted_until_it_changes(world: World) -> None:
    store = world.store
    await store.ensure_space(SPACE)
    poisoned = await world.records.create("ns", "Poisoned", "bad")
    await world.records.create("ns", "Fine", "good")
    assert await store.held(SPACE.key) == Holds(by_reason={}, next_end_s=None)

    await store.hold(SPACE.key, [(poisoned, 1, "input_rejected")], first_s=600, longest_s=86_400)
    assert await due(world) == [("Fine", 1)]
    assert await store.count_to_index(SPACE.key, CHUNKER) == 1
    held = await store.held(SPACE.key)
    assert held.by_reason == {"input_rejected": 1}
    assert held.next_end_s is not None and 590 < held.next_end_s <= 600
    assert (await store.held(SPACE.key, namespaces=["ns"])).by_reason == {"input_rejected": 1}
    assert await store.held(SPACE.key, namespaces=["other"]) == Holds(by_reason={}, next_end_s=None)

    await world.records.update(poisoned, "Poisoned, mended", "better")  # a new revision is tried at once
    assert await due(world) == [("Fine", 1), ("Poisoned, mended", 2)]
    assert await store.held(SPACE.key) == Holds(by_reason={}, next_end_s=None)


async def test_the_wait_doubles_per_attempt_on_a_revision_up_to_the_longest(world: World) -> None:
    store = world.store
    await store.ensure_space(SPACE)
    record_id = await world.records.create("ns", "Stubborn", "body")
    windows = []
    for _ in range(4):
        await store.hold(SPACE.key, [(record_id, 1, "embedding_not_finite")], first_s=600, longest_s=3000)
        ends = (await store.held(SPACE.key)).next_end_s
        assert ends is not None
        windows.append(round(ends))
    assert windows == [600, 1200, 2400, 3000]
    await world.records.update(record_id, "Stubborn, rewritten", "body")
    await store.hold(SPACE.key, [(record_id, 2, "embedding_not_finite")], first_s=600, longest_s=3000)
    assert round((await store.held(SPACE.key)).next_end_s or 0) == 600, "a new revision starts over"


async def test_an_ended_hold_returns_the_record_and_storing_it_ends_the_hold(world: World) -> None:
    store = world.store
    await store.ensure_space(SPACE)
    retried = await world.records.create("ns", "Retried", "body")
    other = await world.records.create("ns", "Other", "body")
    await store.hold(SPACE.key, [(retried, 1, "input_rejected")], first_s=0, longest_s=86_400)
    assert await due(world) == [("Retried", 1), ("Other", 1)], "a hold of no time ends at once"
    assert await store.held(SPACE.key) == Holds(by_reason={}, next_end_s=None)

    await store.hold(SPACE.key, [(retried, 1, "input_rejected"), (other, 1, "x")], first_s=60, longest_s=60)
    assert (await store.held(SPACE.key)).by_reason == {"input_rejected": 1, "x": 1}
    record = RecordToIndex(retried, 1, "ns", "Retried", "body")
    await store.store_batch(SPACE.key, CHUNKER, [chunks(record)])
    assert (await store.held(SPACE.key)).by_reason == {"x": 1}
    assert await store.delete_stale_holds() == 0, "the stored record's hold is gone already"


async def test_the_holds_of_revisions_no_longer_live_are_stale(world: World) -> None:
    store = world.store
    await store.ensure_space(SPACE)
    kept = await world.records.create("ns", "Still refused", "a")
    forgotten = await world.records.create("ns", "Forgotten", "b")
    rewritten = await world.records.create("ns", "Rewritten", "c")
    holds = [(kept, 1, "input_rejected"), (forgotten, 1, "input_rejected"), (rewritten, 1, "input_rejected")]
    await store.hold(SPACE.key, holds, first_s=600, longest_s=86_400)
    assert await world.records.forget(forgotten)
    await world.records.update(rewritten, "Rewritten, shorter", "c")
    assert (await store.held(SPACE.key)).by_reason == {"input_rejected": 1}
    assert await store.delete_stale_holds() == 2
    assert await store.delete_stale_holds() == 0
    assert (await store.held(SPACE.key)).by_reason == {"input_rejected": 1}


# -- DeltaSource, BuildSource


async def test_vectors_after_a_watermark_skip_retired_chunks_which_become_tombstones(world: World) -> None:
    store = world.store
    await store.ensure_space(SPACE)
    a = await world.records.create("ns", "A", "a")
    b = await world.records.create("other", "B", "b")
    await index_all(world, count=2)
    rows = await store.vectors_after(SPACE.key, DIM, 0, 100)
    assert len(rows) == 4 and rows.surrogates.tolist() == sorted(rows.surrogates.tolist())
    assert rows.record_ids == [a, a, b, b] and rows.namespaces == ["ns", "ns", "other", "other"]
    assert rows.revisions.tolist() == [1, 1, 1, 1] and rows.vectors.shape == (4, DIM)
    assert rows.vectors.dtype == np.float32
    first, last = int(rows.surrogates[0]), int(rows.surrogates[-1])
    assert await store.newest_live_surrogate(SPACE.key) == last
    assert await store.newest_live_surrogate(SPACE.key, namespaces=["ns"]) == int(rows.surrogates[1])
    assert await store.newest_live_surrogate(SPACE.key, namespaces=["other"]) == last
    assert await store.newest_live_surrogate(SPACE.key, namespaces=["nowhere"]) == 0
    paged = await store.vectors_after(SPACE.key, DIM, first, 2)
    assert paged.surrogates.tolist() == rows.surrogates[1:3].tolist()
    assert len(await store.vectors_after(SPACE.key, DIM, last, 100)) == 0
    assert len(await store.retired_surrogates(last)) == 0

    await world.records.forget(b)
    assert await store.newest_live_surrogate(SPACE.key) == int(rows.surrogates[1])
    assert sorted((await store.retired_surrogates(last)).tolist()) == rows.surrogates[2:].tolist()
    assert (await store.retired_surrogates(last - 1)).tolist() == [int(rows.surrogates[2])]
    assert (await store.vectors_after(SPACE.key, DIM, 0, 100)).record_ids == [a, a]

    await world.records.update(a, "A", "a, again")
    await index_all(world)
    now = await store.vectors_after(SPACE.key, DIM, 0, 100)
    assert now.record_ids == [a] and now.revisions.tolist() == [2] and int(now.surrogates[0]) > last


async def test_a_build_snapshot_holds_the_live_chunks_of_its_chunker_and_the_watermarks(world: World) -> None:
    store = world.store
    await store.ensure_space(SPACE)
    empty, source, tombstone, missing = await store.build_snapshot(SPACE.key, CHUNKER, DIM)
    assert (len(empty), empty.vectors.shape, source, tombstone, missing) == (0, (0, DIM), 0, 0, 0)
    a = await world.records.create("ns", "A", "a")
    b = await world.records.create("ns", "B", "b")
    await world.records.create("ns", "C", "c")
    items = [chunks(r, 2) for r in await store.records_to_index(SPACE.key, CHUNKER, 2)]
    await store.store_batch(SPACE.key, CHUNKER, items)
    await world.records.forget(b)
    mark = await store.change_mark()
    rows, source, tombstone, missing = await store.build_snapshot(SPACE.key, CHUNKER, DIM)
    assert rows.record_ids == [a, a] and missing == 1 and tombstone == mark
    assert source == int(rows.surrogates[-1]), "forgotten chunks leave no vectors behind"
    np.testing.assert_array_equal(rows.vectors, items[0][3])
    other, *_, missing_other = await store.build_snapshot(SPACE.key, "another-chunker", DIM)
    assert len(other) == 0 and missing_other == 2


async def test_a_copy_snapshot_holds_the_live_chunks_stored_up_to_a_watermark(world: World) -> None:
    store = world.store
    await store.ensure_space(SPACE)
    a = await world.records.create("ns", "A", "a")
    b = await world.records.create("ns", "B", "b")
    await index_all(world, count=2)
    built, source, *_ = await store.build_snapshot(SPACE.key, CHUNKER, DIM)
    assert await store.count_vectors_after(SPACE.key, source) == 0
    await world.records.create("ns", "C", "c")
    await index_all(world)
    assert await store.count_vectors_after(SPACE.key, source) == 1, "stored after the watermark"
    assert await store.count_vectors_after(SPACE.key, 0) == 5
    copy = await store.copy_snapshot(SPACE.key, CHUNKER, DIM, source)
    assert copy.surrogates.tolist() == built.surrogates.tolist() and copy.record_ids == [a, a, b, b]
    np.testing.assert_array_equal(copy.vectors, built.vectors)
    assert copy.revisions.tolist() == [1, 1, 1, 1] and copy.namespaces == ["ns"] * 4

    await world.records.forget(b)
    assert (await store.copy_snapshot(SPACE.key, CHUNKER, DIM, source)).record_ids == [a, a], (
        "a chunk retired since the generation's snapshot is not in a copy"
    )
    assert await store.count_vectors_after(SPACE.key, 0) == 3, "a retired chunk leaves no vector"
    assert len(await store.copy_snapshot(SPACE.key, "another-chunker", DIM, source)) == 0
    assert len(await store.copy_snapshot(OTHER.key, CHUNKER, DIM, source)) == 0
    empty = await store.copy_snapshot(SPACE.key, CHUNKER, DIM, 0)
    assert (len(empty), empty.vectors.shape) == (0, (0, DIM))


# -- GenerationCatalogue


def generation_row(generation_id: str, minutes: int) -> GenerationRow:
    return GenerationRow(
        id=generation_id,
        space_id=SPACE.key,
        directory=f"/generations/{generation_id}",
        manifest_sha256="0" * 64,
        index_type="Flat",
        count=3,
        source_watermark=3,
        tombstone_watermark=2,
        built_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(minutes=minutes),
    )


async def test_the_pointer_moves_by_compare_and_swap_and_remembers_the_previous(world: World) -> None:
    store = world.store
    await store.ensure_space(SPACE)
    assert await store.pointer() == Pointer(current=None, previous=None, version=0)
    assert await store.generations() == []
    for number, minutes in ((1, 0), (2, 5), (3, 5)):
        await store.add_generation(generation_row(f"g{number}", minutes))
    assert [g.id for g in await store.generations()] == ["g2", "g3", "g1"], "newest build first"
    assert await store.generation("g1") == generation_row("g1", 0)
    assert await store.generation("nope") is None

    assert await store.move_pointer("g1", 0)
    assert not await store.move_pointer("g2", 0), "the pointer moved since version 0"
    assert await store.move_pointer("g2", 1)
    pointer = await store.pointer()
    assert pointer.current is not None and pointer.current.id == "g2"
    assert (pointer.previous, pointer.version) == ("g1", 2)
    assert pointer.current.activated_at is not None and pointer.current.deactivated_at is None
    g1 = await store.generation("g1")
    assert g1 is not None and g1.activated_at is not None and g1.deactivated_at is not None
    g3 = await store.generation("g3")
    assert g3 is not None and g3.activated_at is None and g3.deactivated_at is None

    assert await store.move_pointer("g2", 2), "moving to the current one keeps the previous"
    assert (await store.pointer()).previous == "g1"
    assert await store.move_pointer("g1", 3)  # a rollback
    rolled = await store.pointer()
    assert rolled.current is not None and rolled.current.id == "g1" and rolled.current.deactivated_at is None
    assert (rolled.previous, rolled.version) == ("g2", 4)


async def test_the_copies_of_a_generation_are_recorded_by_their_digest(world: World) -> None:
    store = world.store
    await store.ensure_space(SPACE)
    for number in (1, 2):
        await store.add_generation(generation_row(f"g{number}", number))
    assert await store.copies("g1") == []
    at = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
    later = GenerationCopy(
        generation_id="g1", manifest_sha256="b" * 64, count=2, member="host-b:/srv/b", built_at=at + dt.timedelta(1)
    )
    earlier = GenerationCopy(generation_id="g1", manifest_sha256="a" * 64, count=3, member="host-a:/srv/a", built_at=at)
    await store.add_copy(later)
    await store.add_copy(earlier)
    assert await store.copies("g1") == [earlier, later], "oldest first"
    assert await store.copies("g2") == []


async def test_retiring_a_generation_is_fenced(world: World) -> None:
    store = world.store
    await store.ensure_space(SPACE)
    for number in (1, 2, 3):
        await store.add_generation(generation_row(f"g{number}", number))
    await store.move_pointer("g1", 0)
    await store.move_pointer("g2", 1)
    seen: list[tuple[str, str | None, str | None]] = []

    def fence(row: GenerationRow, current: str | None, previous: str | None) -> bool:
        seen.append((row.id, current, previous))
        return row.id != "g1"

    assert not await store.retire_generation("g2", fence), "never the current one"
    assert not await store.retire_generation("g1", fence), "the fence said no"
    assert not await store.retire_generation("nope", fence)
    assert await store.retire_generation("g3", fence)
    assert seen == [("g1", "g2", "g1"), ("g3", "g2", "g1")]
    assert [(g.id, g.state) for g in await store.generations()] == [
        ("g3", "deleted"),
        ("g2", "verified"),
        ("g1", "verified"),
    ]
    assert not await store.retire_generation("g3", fence), "only a verified one"


# -- RetiredChunks


async def test_retired_chunks_are_listed_and_deleted_once_retired_long_enough(world: World) -> None:
    store = world.store
    await store.ensure_space(SPACE)
    a = await world.records.create("ns", "A", "a")
    await world.records.create("ns", "B", "b")
    await index_all(world, count=2)
    live = (await store.vectors_after(SPACE.key, DIM, 0, 100)).surrogates.tolist()
    await world.records.forget(a)
    later = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5)
    earlier = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    assert (await store.retired_chunks(later, after=0, limit=10)).tolist() == live[:2]
    assert (await store.retired_chunks(later, after=live[0], limit=10)).tolist() == live[1:2]
    assert (await store.retired_chunks(later, after=0, limit=1)).tolist() == live[:1]
    assert len(await store.retired_chunks(earlier, after=0, limit=10)) == 0
    assert await store.delete_retired_chunks(live, earlier) == 0
    assert await store.delete_retired_chunks([], later) == 0
    assert await store.delete_retired_chunks(live, later) == 2, "a live chunk is never deleted"
    assert len(await store.retired_chunks(later, after=0, limit=10)) == 0
    assert len(await store.retired_surrogates(live[-1])) == 0
    assert (await store.vectors_after(SPACE.key, DIM, 0, 100)).surrogates.tolist() == live[2:]


# -- BuilderLock


async def test_one_builder_lock_holder_at_a_time(world: World) -> None:
    first, second = world.lock(), world.lock()
    assert not first.held
    assert await first.try_acquire() and first.held
    assert await first.try_acquire(), "acquiring a held lock again keeps it"
    assert not await second.try_acquire() and not second.held
    await first.release()
    assert not first.held
    await first.release()
    assert await second.try_acquire() and second.held
    assert not await first.try_acquire()
    await second.release()


# -- the shape of the ports


def port_methods(protocol: type) -> dict[str, inspect.Signature]:
    names = {name for klass in protocol.__mro__ if klass not in (object, Protocol) for name in vars(klass)}
    return {
        name: inspect.signature(getattr(protocol, name))
        for name in sorted(names)
        if not name.startswith("_") and callable(getattr(protocol, name))
    }


@pytest.mark.parametrize(
    ("protocol", "implementations"),
    [(VectorStore, (FakeVectorStore, PgVectorStore)), (BuilderLock, (FakeBuilderLock, PgBuilderLock))],
)
def test_the_fake_and_postgresql_take_every_method_of_the_port_as_it_declares_it(
    protocol: type, implementations: tuple[type, ...]
) -> None:
    declared = port_methods(protocol)
    assert declared, "the port declares methods"
    for implementation in implementations:
        for name, signature in declared.items():
            method = getattr(implementation, name, None)
            assert method is not None, f"{implementation.__name__} lacks {name}"
            mine = inspect.signature(method)
            assert [(p.name, p.kind) for p in mine.parameters.values()] == [
                (p.name, p.kind) for p in signature.parameters.values()
            ], f"{implementation.__name__}.{name}"
            assert inspect.iscoroutinefunction(method) == inspect.iscoroutinefunction(getattr(protocol, name)), name
        if protocol is BuilderLock:
            assert isinstance(vars(implementation).get("held"), property)
