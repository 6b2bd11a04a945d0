"""The index manager on fakes: catch-up, holds and their back-off, the build trigger, a follower
following the pointer, rollback, a crash mid-build.

The store and the builder lock are the in-memory fakes of `kernel.fakes` (pinned to PostgreSQL by
`tests/actors/ports/test_port_contracts.py`); the embedder is the real actor over an in-process
provider; FAISS is real. Trio's MockClock jumps over every wait, so hours of holds and poll
timers take no real time. While a worker thread runs (chunking, a FAISS build) the mock clock
may still jump, so time is asserted only as bounds far from the poll interval.
"""

from __future__ import annotations

import itertools
import uuid

import anyio
import pytest

from recalld.actors.embedding.embedder import EmbedderSettings
from recalld.actors.index.builds import GenerationNotFound
from recalld.actors.index.chunking import chunk_text
from recalld.actors.index.manager import IndexManager
from recalld.actors.index.manifest import GenerationCorrupt
from recalld.actors.ports.index import GenerationRow
from tests.support.fakes import FakeDatabase, FakeVectorStore
from tests.support.index_cluster import (
    MOCK_SECOND,
    POISON,
    REAL_S,
    SETTINGS,
    Cluster,
    body,
    chunks_of,
    current_generation,
    find,
    live_chunks,
    rendered,
)
from tests.support.waits import eventually_async

pytestmark = [pytest.mark.anyio, pytest.mark.anyio_backends("trio")]

# -- catch-up and holds


CATCH_UP = [
    # (case, bodies, index_batch, vectors stored, held, pending after)
    ("three short records, two per batch", ["a", "b", "c"], 2, 3, {}, 0),
    ("long bodies are cut into chunks", [body(120, 1), body(60, 2), "short"], 4, 7, {}, 0),
    ("one refused record of three is held", ["a", f"b {POISON}", "c"], 4, 2, {"embedding_not_finite": 1}, 1),
    (
        "refused records in batches of one are each held",
        [f"a {POISON}", f"b {POISON}", "c"],
        1,
        1,
        {"embedding_not_finite": 2},
        2,
    ),
    # Two refused and none embedded says more about the provider than the inputs: nothing is
    # held, the pass ends there, and the batch is tried again at the next step.
    ("a whole batch refused is not held and ends the pass", [f"a {POISON}", f"b {POISON}", "c"], 2, 0, {}, 3),
]


@pytest.mark.parametrize(
    ("case", "bodies", "batch", "stored", "held", "pending"), CATCH_UP, ids=[c[0] for c in CATCH_UP]
)
async def test_the_catch_up_stores_every_record_it_can_and_holds_refused_inputs(
    cluster: Cluster, case: str, bodies: list[str], batch: int, stored: int, held: dict[str, int], pending: int
) -> None:
    ids = [await cluster.records.create("ns", f"Record {i}", text) for i, text in enumerate(bodies)]
    # Holds that never end here: the mock clock jumps while worker threads run, and on a loaded
    # machine it passed the default 600 s before the check below (the retry has its own test).
    async with cluster.daemon(index_batch=batch, hold_s=1e9) as manager:
        await eventually_async(lambda: manager.full_passes >= 1, REAL_S, "a first step", poll=MOCK_SECOND)
        await eventually_async(
            lambda: live_chunks(cluster) == stored and manager.pending == pending, REAL_S, "caught up", poll=MOCK_SECOND
        )
        await anyio.sleep(30)  # more steps change nothing
        assert (live_chunks(cluster), manager.pending, manager.held) == (stored, pending, held)
        handle = manager.cell.current()
        assert (handle.count if handle else 0) == stored
        for i, (record_id, text) in enumerate(zip(ids, bodies, strict=True)):
            if stored and POISON not in text:
                assert await find(manager, rendered(f"Record {i}", text)) == record_id


async def test_a_held_record_is_retried_when_its_hold_ends_and_the_wait_doubles(cluster: Cluster) -> None:
    refused = await cluster.records.create("ns", "Refused", f"nothing {POISON}")
    await cluster.records.create("ns", "Fine", "fine")
    async with cluster.daemon() as manager:
        await eventually_async(
            lambda: manager.held == {"embedding_not_finite": 1}, REAL_S, "the refused record is held", poll=MOCK_SECOND
        )
        space = next(iter(cluster.db.spaces))
        holds = []
        for attempt in (1, 2, 3):
            await eventually_async(
                lambda a=attempt: cluster.db.holds[(space, refused)].attempts == a,
                REAL_S,
                f"attempt {attempt}",
                poll=MOCK_SECOND,
            )
            holds.append(cluster.db.holds[(space, refused)])
        for earlier, later in itertools.pairwise(holds):
            assert later.held_at >= earlier.retry_at, "not tried again before its hold ended"
            # retried because the hold ended, not at the next full recheck (`recheck_s`); the
            # bound is loose because the mock clock runs on while a worker thread chunks
            assert later.held_at - earlier.retry_at < SETTINGS["recheck_s"] / 10
        assert [round(h.retry_at - h.held_at) for h in holds] == [600, 1200, 2400]
        assert manager.pending == 1

        await cluster.records.update(refused, "Refused", "mended")  # a new revision is tried at once
        manager.wake()
        await eventually_async(
            lambda: manager.pending == 0 and manager.held == {}, REAL_S, "the new revision indexed", poll=MOCK_SECOND
        )


async def test_provider_trouble_ends_a_pass_and_the_next_step_resumes(cluster: Cluster) -> None:
    async with cluster.daemon() as manager:
        await eventually_async(lambda: manager.full_passes >= 1, REAL_S, "a first step", poll=MOCK_SECOND)
        cluster.provider.down = True
        for i in range(3):
            await cluster.records.create("ns", f"R{i}", f"body {i}")
        manager.wake()
        await eventually_async(
            lambda: manager.pending == 3 and manager.snapshot()["last_error"] is not None,
            REAL_S,
            "the failure seen",
            poll=MOCK_SECOND,
        )
        assert manager.held == {} and live_chunks(cluster) == 0, "provider trouble holds nothing"
        cluster.provider.down = False
        await eventually_async(
            lambda: manager.pending == 0 and live_chunks(cluster) == 3, REAL_S, "resumed", poll=MOCK_SECOND
        )


async def test_pending_counts_the_namespaces_asked_for(cluster: Cluster) -> None:
    async with cluster.daemon() as manager:
        await eventually_async(lambda: manager.full_passes >= 1, REAL_S, "a first step", poll=MOCK_SECOND)
        await cluster.records.create("ns", "Indexed", "indexed")
        manager.wake()
        await eventually_async(
            lambda: manager.pending == 0 and live_chunks(cluster) == 1,
            REAL_S,
            "the first record indexed",
            poll=MOCK_SECOND,
        )
        cluster.provider.down = True
        for i in range(3):
            await cluster.records.create("other", f"Waiting {i}", f"waiting {i}")
        await cluster.records.create("ns", f"Held {POISON}", "refused")
        manager.wake()
        await eventually_async(lambda: manager.pending == 4, REAL_S, "the failure seen", poll=MOCK_SECOND)
        assert [await manager.count_pending(ns) for ns in (None, ["ns"], ["other"], ["elsewhere"])] == [4, 1, 3, 0]

        cluster.provider.down = False
        manager.wake()
        await eventually_async(
            lambda: manager.pending == 1 and manager.held == {"embedding_not_finite": 1},
            REAL_S,
            "the rest indexed",
            poll=MOCK_SECOND,
        )
        assert [await manager.count_pending(ns) for ns in (["ns"], ["other"], ["ns", "other"])] == [1, 0, 1]
        assert await manager.count_pending(["ns"], with_held=False) == 0, "held is not waiting for indexing"
        assert await manager.count_unsearchable(["ns"]) == 0 and await manager.count_unsearchable(["other"]) == 0


async def pending_chunks_become(manager: IndexManager, wanted: int, what: str, *, namespace: str = "ns") -> None:
    await eventually_async(
        lambda: manager.count_pending_chunks([namespace]),
        REAL_S,
        f"{what} (pending chunks {wanted})",
        accept=lambda counted: counted == wanted,
        poll=MOCK_SECOND,
    )


async def test_pending_chunks_count_the_chunks_still_to_embed_and_fall_a_slice_at_a_time(cluster: Cluster) -> None:
    """Each waiting record's chunks as the catch-up cuts them (a repeated one once); a record's
    fall as the embedder's answers come back, before the record is stored."""
    step = EmbedderSettings().max_batch
    # The gated call below must wait for the gate, not for its deadline: the mock clock leaps to
    # the deadline whenever nothing else is due, and a call given up on would keep the provider
    # (one call at a time) busy for good, failing every later call.
    patient = EmbedderSettings(max_wait_s=0.0, timeout_s=1e9)
    async with cluster.daemon(embedding=patient) as manager:
        await eventually_async(lambda: manager.full_passes >= 1, REAL_S, "a first step", poll=MOCK_SECOND)
        cluster.provider.down = True
        large = body(2400, 1) + " GATE " + body(40, 2)  # the gate's chunk is past the first slices
        small = "a short one"
        repeated = ("y" * 199 + " ") * 8  # eight chunks, all one text
        # the large record alone in its namespace: its count falls slice by slice whichever of
        # the embedder's calls its batch-mates' few chunks share
        await cluster.records.create("ns", "Large", large)
        for title, text in (("Small", small), ("Repeated", repeated)):
            await cluster.records.create("mates", title, text)
        await cluster.records.create("other", "Elsewhere", body(300, 3))
        manager.wake()
        await eventually_async(
            lambda: manager.snapshot()["last_error"] is not None,
            REAL_S,
            "the provider's failure seen",
            poll=MOCK_SECOND,
        )
        large_chunks = chunks_of(large)
        assert large_chunks > 2 * step and chunks_of(repeated) > len(
            set(chunk_text(repeated, max_chars=200, overlap=20))
        )
        assert await manager.count_pending_chunks(["ns"]) == large_chunks
        mates = 1 + len(set(chunk_text(repeated, max_chars=200, overlap=20)))
        assert await manager.count_pending_chunks(["mates"]) == mates
        assert await manager.count_pending_chunks(["ns", "mates"]) == large_chunks + mates
        assert await manager.count_pending_chunks(["other"]) == chunks_of(body(300, 3))
        assert await manager.count_pending_chunks(["elsewhere"]) == 0

        gated_slice = next(i for i, c in enumerate(chunk_text(large, max_chars=200, overlap=20)) if "GATE" in c) // step
        assert gated_slice >= 2
        cluster.provider.gate = "GATE"
        cluster.provider.down = False
        manager.wake()
        # the large record's slices before the gated one are embedded and counted, while the
        # record waits for that one and is not stored (its batch-mates may have gone ahead, in a
        # step that ran as the provider came back)
        await pending_chunks_become(manager, large_chunks - gated_slice * step, "the first slices counted down")
        assert await manager.count_pending(["ns"]) == 1
        cluster.provider.opened.set()
        await pending_chunks_become(manager, 0, "every chunk embedded")
        await pending_chunks_become(manager, 0, "every batch-mate's chunk embedded", namespace="mates")
        await eventually_async(lambda: manager.pending == 0, REAL_S, "all indexed", poll=MOCK_SECOND)
        assert await manager.count_pending_chunks(["other"]) == 0


# -- building generations


BUILDS = [
    # (case, first records, records added later, generations built): the delta is compacted
    # once it holds more than `compact_share` (0.2) of the base
    ("nothing written, nothing built", 0, 0, 0),
    ("the first records make the first generation", 10, 0, 1),
    ("a delta of 2 on 10 waits", 10, 2, 1),
    ("a delta of 3 on 10 is compacted", 10, 3, 2),
]


@pytest.mark.parametrize(("case", "first", "later", "built"), BUILDS, ids=[b[0] for b in BUILDS])
async def test_a_generation_is_built_when_caught_up_and_quiet_or_when_the_delta_outgrows_the_base(
    cluster: Cluster, case: str, first: int, later: int, built: int
) -> None:
    for i in range(first):
        await cluster.records.create("ns", f"First {i}", f"first {i}")
    async with cluster.daemon() as manager:
        await eventually_async(
            lambda: manager.cell.current() is not None or first == 0, REAL_S, "a handle", poll=MOCK_SECOND
        )
        await eventually_async(
            lambda: manager.pending == 0 and live_chunks(cluster) == first, REAL_S, "caught up", poll=MOCK_SECOND
        )
        if first:
            await eventually_async(
                lambda: current_generation(manager) == "g1", REAL_S, "the first generation", poll=MOCK_SECOND
            )
        for i in range(later):
            await cluster.records.create("ns", f"Later {i}", f"later {i}")
        manager.wake()
        await eventually_async(
            lambda: live_chunks(cluster) == first + later, REAL_S, "the later records stored", poll=MOCK_SECOND
        )
        await anyio.sleep(60)  # a minute of polls: any build due has started
        await eventually_async(
            lambda: all(b.state not in ("queued", "running") for b in manager.builds()),
            REAL_S,
            "builds ended",
            poll=MOCK_SECOND,
        )
        assert len(cluster.db.generations) == built
        assert [b.state for b in manager.builds()] == ["done"] * built
        handle = manager.cell.current()
        assert (handle.count if handle else 0) == first + later


async def test_a_requested_rebuild_runs_and_the_pointer_keeps_the_previous(cluster: Cluster) -> None:
    for i in range(3):
        await cluster.records.create("ns", f"R{i}", f"body {i}")
    async with cluster.daemon() as manager:
        await eventually_async(
            lambda: current_generation(manager) == "g1", REAL_S, "the first generation", poll=MOCK_SECOND
        )
        status = manager.request_rebuild()
        await eventually_async(
            lambda: current_generation(manager) == "g2", REAL_S, "the requested one", poll=MOCK_SECOND
        )
        assert (status.state, status.reason, status.generation) == ("done", "requested", "g2")
        assert (cluster.db.current, cluster.db.previous) == ("g2", "g1")


async def test_an_auto_factory_builds_flat_below_its_threshold_and_hnsw_from_it(cluster: Cluster) -> None:
    records: dict[uuid.UUID, tuple[str, str]] = {}

    async def create(i: int) -> None:
        records[await cluster.records.create("ns", f"R{i}", f"body {i}")] = (f"R{i}", f"body {i}")

    for i in range(6):
        await create(i)
    # `auto` is the default factory; no automatic compaction here, so g2 is the requested rebuild
    async with cluster.daemon(auto_hnsw_from=8, compact_share=10.0) as manager:
        await eventually_async(
            lambda: current_generation(manager) == "g1", REAL_S, "the first generation", poll=MOCK_SECOND
        )
        assert cluster.db.generations["g1"].index_type == "Flat"
        for i in range(6, 9):
            await create(i)
        manager.wake()
        await eventually_async(lambda: live_chunks(cluster) == 9, REAL_S, "the later records stored", poll=MOCK_SECOND)
        manager.request_rebuild()
        await eventually_async(
            lambda: current_generation(manager) == "g2", REAL_S, "the rebuilt generation", poll=MOCK_SECOND
        )
        assert cluster.db.generations["g2"].index_type == "HNSW32"
        for record, (title, text) in records.items():
            assert await find(manager, rendered(title, text)) == record


# -- following the pointer, rolling back


async def test_a_follower_serves_what_the_builder_builds_and_stores(cluster: Cluster) -> None:
    for i in range(4):
        await cluster.records.create("ns", f"R{i}", f"body {i}")
    async with cluster.daemon() as builder:
        await eventually_async(
            lambda: current_generation(builder) == "g1", REAL_S, "the builder's generation", poll=MOCK_SECOND
        )
        async with cluster.daemon() as follower:
            assert builder.is_builder
            await eventually_async(
                lambda: current_generation(follower) == "g1",
                REAL_S,
                "the follower follows the pointer",
                poll=MOCK_SECOND,
            )
            assert not follower.is_builder
            added = await cluster.records.create("ns", "Added", "added later")
            builder.wake()
            await eventually_async(lambda: live_chunks(cluster) == 5, REAL_S, "the builder stored it", poll=MOCK_SECOND)
            follower.wake()  # as the record notification does
            await eventually_async(
                lambda: (h := follower.cell.current()) is not None and h.count == 5,
                REAL_S,
                "the follower's delta",
                poll=MOCK_SECOND,
            )
            assert await find(follower, rendered("Added", "added later")) == added
            # The builder may compact the delta meanwhile (once the mock clock has run past its
            # quiet time, as it does when a loaded machine keeps a worker thread slow).
            assert follower.builds() == [], "the follower built nothing"


async def test_activate_rolls_back_and_the_delta_since_keeps_every_record_searchable(cluster: Cluster) -> None:
    for i in range(5):
        await cluster.records.create("ns", f"R{i}", f"body {i}")
    async with cluster.daemon() as manager:
        await eventually_async(lambda: current_generation(manager) == "g1", REAL_S, "g1", poll=MOCK_SECOND)
        for i in range(5, 10):
            await cluster.records.create("ns", f"R{i}", f"body {i}")
        manager.wake()
        await eventually_async(
            lambda: current_generation(manager) == "g2", REAL_S, "g2 compacts the delta", poll=MOCK_SECOND
        )
        await eventually_async(
            lambda: (h := manager.cell.current()) is not None and h.delta_count == 0,
            REAL_S,
            "g2 serving",
            poll=MOCK_SECOND,
        )
        assert (cluster.db.current, cluster.db.previous) == ("g2", "g1")

        row = await manager.activate("g1")
        assert isinstance(row, GenerationRow) and row.id == "g1"
        await eventually_async(
            lambda: current_generation(manager) == "g1", REAL_S, "g1 serving again", poll=MOCK_SECOND
        )
        await eventually_async(
            lambda: (h := manager.cell.current()) is not None and h.count == 10,
            REAL_S,
            "and its delta",
            poll=MOCK_SECOND,
        )
        handle = manager.cell.current()
        assert handle is not None and handle.count == 10 and handle.delta_count == 5
        assert (cluster.db.current, cluster.db.previous) == ("g1", "g2")
        assert await find(manager, rendered("R7", "body 7")) is not None

        with pytest.raises(GenerationNotFound):
            await manager.activate("g9")
        (cluster.root / "g2" / "manifest.json").write_text("{}")
        with pytest.raises(GenerationCorrupt):
            await manager.activate("g2")
        # never made current; the manager may meanwhile have compacted g1's delta into g3
        assert cluster.db.current != "g2"


class StalledStore(FakeVectorStore):
    """The store as a daemon that dies mid-build sees it: the generation's row never lands."""

    def __init__(self, db: FakeDatabase) -> None:
        super().__init__(db)
        self.stalled = anyio.Event()

    async def add_generation(self, row: GenerationRow) -> None:
        self.stalled.set()
        await anyio.sleep_forever()


async def test_a_crash_mid_build_leaves_the_previous_generation_and_a_restart_builds_again(cluster: Cluster) -> None:
    for i in range(3):
        await cluster.records.create("ns", f"R{i}", f"body {i}")
    async with cluster.daemon() as manager:
        await eventually_async(lambda: current_generation(manager) == "g1", REAL_S, "g1", poll=MOCK_SECOND)
    stalled = StalledStore(cluster.db)
    async with cluster.daemon(store=stalled) as manager:
        for i in range(3, 9):
            await cluster.records.create("ns", f"R{i}", f"body {i}")
        manager.wake()
        await eventually_async(stalled.stalled.is_set, REAL_S, "the build reached the store", poll=MOCK_SECOND)
    # the daemon died there: its build's files are written, its row never added
    assert (cluster.root / "g2").is_dir() and "g2" not in cluster.db.generations
    assert cluster.db.current == "g1"

    async with cluster.daemon() as restarted:
        await eventually_async(
            lambda: current_generation(restarted) == "g3",
            REAL_S,
            "a new generation beside the orphan",
            poll=MOCK_SECOND,
        )
        handle = restarted.cell.current()
        assert handle is not None and handle.count == 9 and handle.delta_count == 0
        assert cluster.db.current == "g3" and cluster.db.previous == "g1"


FORGETS = [
    # (case, records forgotten of 10, generations built): vectors a generation still holds for
    # forgotten records count toward `compact_share` like a delta, so they leave its files
    ("forgetting 2 of 10 waits", 2, 1),
    ("forgetting 3 of 10 builds them out", 3, 2),
]


@pytest.mark.parametrize(("case", "forgotten", "built"), FORGETS, ids=[f[0] for f in FORGETS])
async def test_forgotten_vectors_count_toward_compaction(
    cluster: Cluster, case: str, forgotten: int, built: int
) -> None:
    ids = [await cluster.records.create("ns", f"First {i}", f"first {i}") for i in range(10)]
    async with cluster.daemon() as manager:
        await eventually_async(
            lambda: current_generation(manager) == "g1", REAL_S, "the first generation", poll=MOCK_SECOND
        )
        for record_id in ids[:forgotten]:
            assert await cluster.records.forget(record_id)
        manager.wake()
        await eventually_async(
            lambda: len(manager.cell.current().tombstones) >= forgotten,
            REAL_S,
            "the tombstones taken in",
            poll=MOCK_SECOND,
        )  # type: ignore[union-attr]
        await anyio.sleep(60)  # a minute of polls: any build due has started
        await eventually_async(
            lambda: all(b.state not in ("queued", "running") for b in manager.builds()),
            REAL_S,
            "builds ended",
            poll=MOCK_SECOND,
        )
        assert len(cluster.db.generations) == built
        await eventually_async(
            lambda: current_generation(manager) == f"g{built}", REAL_S, "the last generation serving", poll=MOCK_SECOND
        )
        handle = manager.cell.current()
        assert handle is not None and handle.base is not None
        assert handle.base.count == (10 - forgotten if built == 2 else 10)


async def test_chunks_a_record_repeats_word_for_word_are_stored_once(cluster: Cluster) -> None:
    sentence = "The operator rotates the signing keys and restores the ledger from the nightly dump. "
    body = sentence * 100  # ~8,500 characters: dozens of chunks, most of them the same text
    chunks = chunk_text(body, max_chars=int(SETTINGS["chunk_chars"]), overlap=int(SETTINGS["chunk_overlap"]))
    distinct = set(chunks)
    assert len(chunks) > 2 * len(distinct), "the body repeats its chunks"
    record_id = await cluster.records.create("ns", "A repetitive manual", body)
    async with cluster.daemon() as manager:
        await eventually_async(
            lambda: manager.pending == 0 and live_chunks(cluster) > 0, REAL_S, "caught up", poll=MOCK_SECOND
        )
        assert sorted(c.text for c in cluster.db.chunks.values()) == sorted(distinct)
        assert await find(manager, rendered("A repetitive manual", sentence.strip())) == record_id
