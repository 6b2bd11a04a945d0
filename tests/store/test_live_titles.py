"""The live titles a duplicate check compares with (daemon/services/duplicates_live.py over
daemon/store/duplicates.py), kept in step with real PostgreSQL by change marks: creates, retitles,
moves to another kind and forgets show at the next read, which reads only what changed, and the
title vectors are read only for the titles that have none in memory yet."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import asyncpg
import numpy as np
import pytest

from recalld.actors.duplicates.rules import title_key
from recalld.actors.ports.embedding import VectorSpace
from recalld.services.duplicates_live import LiveTitles
from recalld.services.duplicates_rows import KindTitles, comparable, top_hits
from recalld.store.duplicates import PgTitleStore
from recalld.store.records import RecordFields, RecordRepository

pytestmark = pytest.mark.anyio


def fields(title: str, kind: str = "story", namespace: str = "ns") -> RecordFields:
    return RecordFields(namespace=namespace, kind=kind, title=title, body="", attributes={}, source_path=None)


class CountingSource(PgTitleStore):
    """The real store, counting its full reads (a subclass, not a fake: every query runs)."""

    full_reads = 0

    async def kind_titles(self, namespace: str, kind: str) -> list[tuple[object, str]]:  # type: ignore[override]
        self.full_reads += 1
        return await super().kind_titles(namespace, kind)  # type: ignore[return-value]


async def test_changes_show_at_the_next_read_without_reading_everything_again(pool: asyncpg.Pool) -> None:
    records = RecordRepository(pool)
    source = CountingSource(pool)
    live = LiveTitles(source)
    first, _ = await records.create(fields("Export the sales report"))
    await records.create(fields("Export the sales report", kind="rule"))
    await records.create(fields("Export the sales report", namespace="other"))
    assert dict(await live.titles("ns", "story")) == {first: "export the sales report"}

    second, _ = await records.create(fields("Reset a password"))
    await records.update(first, fields("Export the stock report"))
    assert dict(await live.titles("ns", "story")) == {first: "export the stock report", second: "reset a password"}

    await records.update(second, fields("Reset a password", kind="rule"))  # leaves the kind
    third, _ = await records.create(fields("Print a label"))
    await records.forget(first)
    assert dict(await live.titles("ns", "story")) == {third: "print a label"}
    assert dict(await live.titles("ns", "rule")) == {
        rule_id: norm for rule_id, norm in await source.kind_titles("ns", "rule")
    }
    assert source.full_reads == 3  # one per (namespace, kind) first read, and the check's own above


async def test_a_write_that_commits_late_below_a_newer_one_is_not_missed(pool: asyncpg.Pool) -> None:
    records = RecordRepository(pool)
    live = LiveTitles(PgTitleStore(pool))
    await records.create(fields("One"))
    assert len(await live.titles("ns", "story")) == 1
    async with pool.acquire() as conn:
        late = conn.transaction()
        await late.start()
        # Takes its change_seq now, commits after a newer write: a read in between must not
        # move its mark past it.
        await conn.execute(
            """INSERT INTO records (id, namespace, kind, title, title_norm, body, content_hash)
               VALUES (gen_random_uuid(), 'ns', 'story', 'Late', 'late', '', 'x')"""
        )
        await records.create(fields("Two"))
        assert {norm for _, norm in await live.titles("ns", "story")} == {"one", "two"}
        await late.commit()
    assert {norm for _, norm in await live.titles("ns", "story")} == {"one", "two", "late"}


class VectorCountingSource(PgTitleStore):
    """The real store, counting the title vectors asked for (a subclass: every query runs)."""

    asked = 0

    async def vectors(self, space_id: str, keys: Sequence[str], dimension: int) -> dict[str, Any]:
        self.asked += len(keys)
        return await super().vectors(space_id, keys, dimension)


SPACE = VectorSpace(provider="local", model="titles", dimension=4, normalized=True, template_version=1)


async def with_vectors(live: LiveTitles, namespace: str, kind: str) -> KindTitles:
    """A kind's titles with the stored vectors of SPACE read for those that had none."""
    titles = await live.kind(namespace, kind)
    await live.read_vectors(namespace, kind, titles, SPACE.key, SPACE.dimension)
    return titles


def vector(*values: float) -> np.ndarray:
    v = np.asarray(values, dtype=np.float32)
    return v / np.linalg.norm(v)


async def test_the_vectors_of_the_live_titles_are_read_once_and_the_missing_each_time(pool: asyncpg.Pool) -> None:
    records = RecordRepository(pool)
    source = VectorCountingSource(pool)
    await source.ensure_space(SPACE)
    live = LiveTitles(source)
    first, _ = await records.create(fields("Export the sales report"))
    second, _ = await records.create(fields("Reset a password"))
    fourth, _ = await records.create(fields("Archive old orders"))
    await source.store_titles(SPACE.key, [(title_key("export the sales report"), vector(1, 0, 0, 0))])
    await source.store_titles(SPACE.key, [(title_key("archive old orders"), vector(0, 0, 0, 1))])

    titles = await with_vectors(live, "ns", "story")
    assert source.asked == 3 and list(titles.waiting.values()) == ["reset a password"]  # no vector yet
    snapshot = titles.snapshot()
    assert {snapshot.ids[row] for row in np.flatnonzero(comparable(snapshot, []))} == {first, fourth}

    await source.store_titles(SPACE.key, [(title_key("reset a password"), vector(0, 1, 0, 0))])
    third, _ = await records.create(fields("Print a label"))
    await source.store_titles(SPACE.key, [(title_key("print a label"), vector(0, 0, 1, 0))])
    await records.forget(first)
    titles = await with_vectors(live, "ns", "story")
    assert source.asked == 5  # the one still missing and the new one, not the others again
    snapshot = titles.snapshot()
    assert {snapshot.ids[row] for row in np.flatnonzero(comparable(snapshot, []))} == {second, third, fourth}
    hits = top_hits(snapshot, comparable(snapshot, []), vector(0, 0, 1, 0.1), 0.5, lambda hits, beyond: False)
    assert [(record_id, norm) for record_id, norm, _ in hits] == [(third, "print a label")]


async def test_vectors_left_unread_past_the_deadline_wait_for_the_next_read(pool: asyncpg.Pool) -> None:
    records = RecordRepository(pool)
    source = VectorCountingSource(pool)
    await source.ensure_space(SPACE)
    live = LiveTitles(source, read_batch=2)
    for n, title in enumerate(["One", "Two", "Three", "Four", "Five"]):
        await records.create(fields(title))
        await source.store_titles(SPACE.key, [(title_key(title.lower()), vector(1, n, 0, 0))])
    titles = await live.kind("ns", "story")
    # past the deadline already: one batch is read all the same, so that every check moves on
    await live.read_vectors("ns", "story", titles, SPACE.key, SPACE.dimension, until=anyio.current_time())
    assert source.asked == 2 and len(titles.waiting) == 3
    assert int(comparable(titles.snapshot(), []).sum()) == 2
    await live.read_vectors("ns", "story", titles, SPACE.key, SPACE.dimension, until=anyio.current_time() + 60)
    assert source.asked == 5 and not titles.waiting


async def test_full_reads_while_no_mark_settles_keep_the_vectors_read(pool: asyncpg.Pool) -> None:
    """Review finding 1b: while a writing transaction is open (a bulk ingest) every read is a
    full one; it must not throw away the vectors read before and read them all again."""
    records = RecordRepository(pool)
    source = VectorCountingSource(pool)
    await source.ensure_space(SPACE)
    live = LiveTitles(source)
    kept, _ = await records.create(fields("One"))
    gone, _ = await records.create(fields("Two"))
    for n, norm in enumerate(["one", "two", "three"]):
        await source.store_titles(SPACE.key, [(title_key(norm), vector(1, n, 0, 0))])
    async with pool.acquire() as conn:
        open_write = conn.transaction()
        await open_write.start()
        await conn.execute(
            """INSERT INTO records (id, namespace, kind, title, title_norm, body, content_hash)
               VALUES (gen_random_uuid(), 'ns', 'story', 'Late', 'late', '', 'x')"""
        )
        assert await source.change_mark() is None  # no mark settles while it is open
        titles = await with_vectors(live, "ns", "story")
        assert source.asked == 2 and not titles.waiting
        third, _ = await records.create(fields("Three"))
        await records.forget(gone)
        again = await with_vectors(live, "ns", "story")
        assert source.asked == 3  # only the new title's vector, not the two read before
        assert dict(again.members()) == {kept: "one", third: "three"} and not again.waiting
        snapshot = again.snapshot()
        assert {snapshot.ids[row] for row in np.flatnonzero(comparable(snapshot, []))} == {kept, third}
        await open_write.rollback()


async def test_a_read_names_the_titles_it_found_no_stored_vector_for_in_the_order_written(pool: asyncpg.Pool) -> None:
    """What a check embeds itself (written a moment ago, before the index manager stored a
    vector): never a title it did not look up, never one it found."""
    records = RecordRepository(pool)
    source = VectorCountingSource(pool)
    await source.ensure_space(SPACE)
    live = LiveTitles(source, read_batch=2)
    for title in ["One", "Two", "Three", "Four", "Five"]:
        await records.create(fields(title))
    await source.store_titles(SPACE.key, [(title_key("two"), vector(1, 0, 0, 0))])
    first, _ = await records.create(fields("Six"))
    await records.update(first, fields("Zero"))  # a retitle is a change: the newest title now
    titles = await live.kind("ns", "story")
    assert await live.read_vectors("ns", "story", titles, SPACE.key, SPACE.dimension) == [
        "one",
        "three",
        "four",
        "five",
        "zero",
    ]
    # past the deadline: the first batch is looked up, the rest is not named (not looked up)
    await source.store_titles(SPACE.key, [(title_key("four"), vector(0, 1, 0, 0))])
    unread = await live.read_vectors("ns", "story", titles, SPACE.key, SPACE.dimension, until=anyio.current_time())
    assert unread == ["one", "three"]
    assert await live.read_vectors("ns", "story", titles, SPACE.key, SPACE.dimension) == [
        "one",
        "three",
        "five",
        "zero",
    ]


async def test_titles_of_unchecked_kinds_are_neither_embedded_nor_audited(pool: asyncpg.Pool) -> None:
    """`[duplicates] unchecked_kinds`: no check compares them, so the builder does not embed
    their titles, and an audit leaves them out (and counts them)."""
    records = RecordRepository(pool)
    await records.create(fields("Install guide", kind="doc"))
    story, _ = await records.create(fields("Export the sales report"))
    store = PgTitleStore(pool, unchecked_kinds=["doc"])
    assert await store.titles_to_embed(SPACE.key, 100) == [("export the sales report", "ns")]
    assert await store.namespace_titles("ns", None) == [(story, "story", "export the sales report")]
    assert await store.namespace_titles("ns", "doc") == []
    assert (await store.count_unchecked("ns", None), await store.count_unchecked("ns", "story")) == (1, 0)
    every = PgTitleStore(pool)
    assert {norm for norm, _ in await every.titles_to_embed(SPACE.key, 100)} == {
        "install guide",
        "export the sales report",
    }
    assert await every.count_unchecked("ns", None) == 0


async def test_concurrent_stores_of_the_same_titles_in_any_order_never_deadlock(pool: asyncpg.Pool) -> None:
    """Checks store the titles they caught up, each in its own order (the newest first), while
    others store the same ones: speculative inserts of one unique key wait on each other, so two
    writers taking overlapping keys in opposite orders would deadlock without one order."""
    store = PgTitleStore(pool)
    space = VectorSpace(provider="p", model="m", dimension=4, normalized=True, template_version=1, builder_version=1)
    await store.ensure_space(space)
    vector = np.ones(4, dtype=np.float32) / 2
    for round_ in range(20):
        keys = [title_key(f"title {round_} {i}") for i in range(40)]
        async with anyio.create_task_group() as tasks:
            for order in (keys, keys[::-1], keys[::2] + keys[1::2], keys[1::2][::-1] + keys[::2]):
                tasks.start_soon(store.store_titles, space.key, [(key, vector) for key in order])
    async with pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM title_vectors WHERE space_id = $1", space.key) == 20 * 40


class HeldChanges(PgTitleStore):
    """The real store, whose reads of changes can be held after they have read (a subclass: every
    query runs), and counted."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        super().__init__(pool)
        self.reads = 0
        self.read = anyio.Event()
        self.release = anyio.Event()
        self.hold = False

    async def title_changes(self, namespace: str, after: int) -> list[tuple[Any, str, str, bool]]:
        self.reads += 1
        changes = await super().title_changes(namespace, after)
        if self.hold:
            self.hold = False
            self.read.set()
            await self.release.wait()
        return changes


async def test_concurrent_checks_share_a_refresh_only_when_it_began_after_they_asked(pool: asyncpg.Pool) -> None:
    records = RecordRepository(pool)
    source = HeldChanges(pool)
    live = LiveTitles(source)
    await records.create(fields("One"))
    await live.titles("ns", "story")  # the first, full read
    seen: dict[str, set[str]] = {}

    async def check(name: str) -> None:
        seen[name] = {norm for _, norm in await live.titles("ns", "story")}

    async with anyio.create_task_group() as tasks:
        source.hold = True
        tasks.start_soon(check, "a")
        await source.read.wait()  # a's refresh has read, before "two" was written
        await records.create(fields("Two"))
        tasks.start_soon(check, "b")  # both ask after "two" was committed, while a's refresh runs
        tasks.start_soon(check, "c")
        await anyio.wait_all_tasks_blocked()
        reads = source.reads
        source.release.set()
    assert seen["a"] == {"one"}
    # b did not take a's refresh, begun before it asked; c took b's, begun after it asked
    assert seen["b"] == seen["c"] == {"one", "two"}
    assert source.reads == reads + 1
