"""The index manager actor: keeps the vector route's copy-on-write handle current.

One loop, woken by record changes, by the generation pointer moving, or by a poll timer:

1. follow the pointer: when another daemon (or a rollback) moved it, load that generation;
2. as the builder-lock holder only: chunk and embed live records that have no vectors in the
   current space yet, storing chunks and vectors durably (so nothing is ever embedded twice);
3. refresh the handle: vectors stored after its watermark become the delta, retired chunks the
   tombstones, each as a NEW handle swapped in (searches keep their leased one);
4. as the builder only: build a new generation in the background when none exists for the
   space, when the delta outgrows `compact_share` of the base, or when asked.

A search never waits for any of this: it leases whatever handle is current.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import anyio
import msgspec
import numpy as np
import numpy.typing as npt
from anyio.abc import TaskStatus

from actors.chunking import chunk_text
from actors.embedder import Embedder, EmbedResult
from actors.embedding.errors import EmbeddingError, Reason
from actors.index.generation import Generation, IdMap, build_generation, load_generation, manifest_sha256
from actors.index.handle import Handle, HandleCell, Hit
from actors.index.idmap import record_id_rows
from actors.index.manifest import Expected, GenerationCorrupt
from actors.kernel.ports import (
    BuilderLock,
    GenerationRow,
    Holds,
    Pointer,
    RecordToIndex,
    VectorRows,
    VectorSpace,
    VectorStore,
)
from actors.kernel.supervisor import stop_requested

log = logging.getLogger("recalld.index")

# A conservative reading speed for checksumming a generation at start (bytes per second).
LOAD_BYTES_PER_S = 50e6

NOTHING_INDEXED = ("no_verified_generation", "nothing is indexed yet")

BuildState = Literal["queued", "running", "done", "failed", "skipped"]


class IndexUnavailable(Exception):
    """The vector route cannot answer now; `reason` is a stable code."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True, slots=True)
class _Chunks:
    """One record's chunks as the catch-up stores them, in chunk order."""

    texts: list[str]
    inputs: list[str]
    """What the model embeds for each chunk (the rendered template)."""
    hashes: list[str]


class _TextBudget:
    """Texts the catch-up may have waiting in the embedder at once; a taker waits for room."""

    def __init__(self, size: int) -> None:
        self._free = size
        self._changed = anyio.Condition()

    @contextlib.asynccontextmanager
    async def taking(self, count: int) -> AsyncIterator[None]:
        async with self._changed:
            while self._free < count:
                await self._changed.wait()
            self._free -= count
        try:
            yield
        finally:
            with anyio.CancelScope(shield=True):
                async with self._changed:
                    self._free += count
                    self._changed.notify_all()


@dataclass(frozen=True)
class IndexSettings:
    root: Path
    """Where generation directories live (shared by every daemon on this database)."""
    chunk_chars: int = 1000
    chunk_overlap: int = 150
    factory: str = "Flat"
    """FAISS factory for generations; e.g. "HNSW32" for large corpora."""
    compact_share: float = 0.2
    """Build a new generation when the delta holds more than this share of the base."""
    index_batch: int = 16
    """Records chunked and embedded per step of the catch-up."""
    poll_s: float = 2.0
    recheck_s: float = 60.0
    """Once every record is indexed, steps look only at records changed since; this often they
    read every live record again anyway."""
    hold_s: float = 600.0
    """A record the provider will not embed is tried again after this long, then after twice as
    long each time (at most a day); a new revision of it is tried at once."""
    delta_page: int = 5000
    quiet_s: float = 1.0
    """An automatic build waits until no change has arrived for this long (a burst of writes
    becomes one generation, not several)."""

    @property
    def chunker(self) -> str:
        """Names how chunks were cut: chunks of another chunker are other chunks."""
        return f"c1:{self.chunk_chars}:{self.chunk_overlap}"


class BuildStatus(msgspec.Struct, kw_only=True):
    id: str
    state: BuildState
    reason: str
    started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    done: int = 0
    total: int = 0
    generation: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class _IndexedThrough:
    """Every live record of `space_id` with a change mark up to `mark` is indexed; `at` is when
    the last step that read every record began."""

    space_id: str
    mark: int
    at: float


# Failures that are the input's, not the provider's: the provider refused the text, or answered
# it with a vector validation rejects (the embedder fails only the caller whose row it was).
INPUT_FAULTS = frozenset(
    {Reason.INPUT_REJECTED, Reason.EMBEDDING_NOT_FINITE, Reason.EMBEDDING_ZERO_VECTOR, Reason.EMBEDDING_NOT_NORMALIZED}
)
HOLD_LONGEST_S = 86_400.0
"""A held record is tried again at least once a day."""

# "Which records still need vectors" joins records with indexed_records. While a large backlog is
# indexed, the planner's statistics say indexed_records is as small as when they were taken, and
# it picks a nested loop that rescans all of it for every record: measured after 100,000 records
# were written at once, one count ran past a minute. The builder refreshes them as it grows.
STATISTICS_GROWTH = 0.2
STATISTICS_MIN_ROWS = 500


def records_to_hold(
    failures: list[tuple[RecordToIndex, EmbeddingError]], *, embedded: int
) -> list[tuple[RecordToIndex, EmbeddingError]]:
    """Which failed records of a batch to set aside: those whose own input failed, unless no
    record of the batch was embedded and two or more failed that way, which says more about
    the provider (a broken deployment refuses everything) than about the inputs."""
    by_input = [(record, error) for record, error in failures if error.reason in INPUT_FAULTS]
    if embedded == 0 and len(by_input) > 1:
        return []
    return by_input


@dataclass
class _Progress:
    indexed_records: int = 0
    stored_vectors: int = 0
    full_passes: int = 0
    """Steps that read every live record (catch-up and count); once every record is indexed,
    steps read only the records changed since."""
    last_error: str | None = None
    builds: list[BuildStatus] = field(default_factory=list)


def query_compatible(index: str, query: VectorSpace | None, spaces: dict[str, VectorSpace]) -> bool:
    """Can a query embedded in `query` search an index built in space `index`?

    Only the model side must agree (provider, model, dimension, metric, normalisation): a
    document-template change alters what was embedded, not what a query vector means, so the
    old generation keeps serving while the new template's generation is built.
    """
    built = spaces.get(index)
    if query is None or built is None:
        return False
    same = ("provider", "model", "dimension", "metric", "normalized")
    return all(getattr(built, f) == getattr(query, f) for f in same)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class IndexManager:
    def __init__(
        self,
        store: VectorStore,
        lock: BuilderLock,
        embedder: Embedder | None,
        settings: IndexSettings,
        *,
        new_generation_id: Callable[[], str],
        on_swap: Callable[[str], None] | None = None,
        extend_start: Callable[[float], None] | None = None,
    ) -> None:
        self._store = store
        self._lock = lock
        self._embedder = embedder
        self.settings = settings
        self._new_id = new_generation_id
        self._on_swap = on_swap
        self._extend_start = extend_start
        self.cell = HandleCell()
        self._spaces: dict[str, VectorSpace] = {}
        self._pointer: Pointer | None = None
        self._generation: Generation | None = None
        self._problem: tuple[str, str] | None = ("no_verified_generation", "no generation loaded yet")
        self._wakeup = anyio.Event()
        self._progress = _Progress()
        self._rebuild_requested: BuildStatus | None = None
        self._building = False
        self._heal = False
        """The pointer's generation failed verification: build a replacement."""
        self._pending = 0
        """Records the last step found still to index, held ones apart."""
        self._holds = Holds(by_reason={}, next_end_s=None)
        """Records set aside because the provider will not embed them (last step)."""
        self._hold_ends_at: float | None = None
        """anyio time at which the first of `_holds` ends: its record is due for another try."""
        self._indexed_through: _IndexedThrough | None = None
        self._analysed_at = 0
        """`indexed_records` progress when the planner's statistics were last refreshed."""
        self._last_change = 0.0  # anyio time of the last wake-up; the poll timer re-checks builds

    # -- what callers use

    def wake(self) -> None:
        """Something changed (a record write, a pointer move): run a step soon."""
        self._last_change = anyio.current_time()
        self._wakeup.set()

    @property
    def store(self) -> VectorStore:
        return self._store

    async def count_pending(self) -> int:
        """Live records whose current revision is not yet searchable here, counted now."""
        space = self._embedder.space if self._embedder else None
        if space is None:
            return await self._store.count_to_index("", self.settings.chunker)
        waiting = await self._store.count_to_index(space.key, self.settings.chunker, after=self._known_mark(space))
        held = sum((await self._store.held(space.key)).by_reason.values())
        handle = self.cell.current()
        seen = handle.seen if handle is not None and handle.space_id == space.key else 0
        stored_after = await self._store.newest_live_surrogate(space.key) > seen
        return waiting + held + (1 if stored_after else 0)

    def generations_in_use(self) -> set[str]:
        """Generations a handle of this daemon still holds (current, or leased by a search)."""
        return set(self.cell.generations_in_use())

    @property
    def is_builder(self) -> bool:
        return self._lock.held

    @property
    def full_passes(self) -> int:
        return self._progress.full_passes

    @property
    def pending(self) -> int:
        """Live records not yet searchable by the vector route here (0 when caught up), those
        set aside because the provider will not embed them included."""
        return self._pending + sum(self._holds.by_reason.values())

    @property
    def held(self) -> dict[str, int]:
        """Records set aside because the provider will not embed their input, by reason."""
        return dict(self._holds.by_reason)

    def problem(self) -> tuple[str, str] | None:
        """(reason code, message) when the vector route cannot answer, else None."""
        handle = self.cell.current()
        space = self._embedder.space if self._embedder else None
        if self._embedder is None:
            return ("no_provider", "no embedding provider is configured")
        if space is None:
            health = self._embedder.health()
            return (health.reason or "embedder_unavailable", health.message)
        if handle is None or handle.count == 0:
            return self._problem or NOTHING_INDEXED
        if not query_compatible(handle.space_id, space, self._spaces):
            return ("vector_space_rebuilding", "the index is being rebuilt for the configured model")
        return None

    async def search(
        self,
        query: npt.NDArray[np.float32],
        *,
        namespace: str,
        k_records: int,
        accept: Callable[[uuid.UUID, int], bool] | None = None,
        within: Sequence[uuid.UUID] | None = None,
    ) -> tuple[list[Hit], str | None]:
        """Search the current handle under a lease, off the event loop. Returns (hits, generation id).
        `within`: only these records, scored exactly (`Handle.search`)."""
        rows = record_id_rows(within) if within is not None else None
        async with self.cell.lease() as handle:
            if handle is None or handle.count == 0:
                reason, message = self._problem or NOTHING_INDEXED
                raise IndexUnavailable(reason, message)
            hits = await anyio.to_thread.run_sync(
                lambda: handle.search(query, k_records=k_records, namespace=namespace, accept=accept, within=rows)
            )
            base = handle.base.manifest.generation_id if handle.base is not None else None
            return hits, base

    def request_rebuild(self) -> BuildStatus:
        status = BuildStatus(id=uuid.uuid4().hex[:12], state="queued", reason="requested")
        self._rebuild_requested = status
        self._progress.builds.insert(0, status)
        del self._progress.builds[20:]
        self.wake()
        return status

    def builds(self) -> list[BuildStatus]:
        return list(self._progress.builds)

    def snapshot(self) -> dict[str, object]:
        handle = self.cell.current()
        return {
            "builder": self.is_builder,
            "pending": self.pending,
            "held": self.held,
            "handle": None
            if handle is None
            else {
                "space_id": handle.space_id,
                "count": handle.count,
                "delta": handle.delta_count,
                "tombstones": len(handle.tombstones),
                "generation": handle.base.manifest.generation_id if handle.base else None,
            },
            "indexed_records": self._progress.indexed_records,
            "full_passes": self._progress.full_passes,
            "last_error": self._progress.last_error,
            "leases": self.cell.open_leases,
        }

    # -- the actor

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        stop = stop_requested()
        self.settings.root.mkdir(parents=True, exist_ok=True)
        try:
            await self._announce_load()
            await self._follow_pointer()
        except Exception as exc:  # the store may be down at start; the loop retries
            log.warning("could not read the generation pointer at start: %s", exc)
        task_status.started()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._loop, tasks)
            await stop.wait()
            tasks.cancel_scope.cancel()
        await self._lock.release()

    async def _announce_load(self) -> None:
        """Before the start-up load, tell the service manager how long it may take (systemd's
        EXTEND_TIMEOUT_USEC): checksumming and mapping run at roughly disk speed."""
        pointer = await self._store.pointer()
        if self._extend_start is None or pointer.current is None:
            return
        directory = self.settings.root / pointer.current.id
        size = await anyio.to_thread.run_sync(
            lambda: sum(f.stat().st_size for f in directory.glob("*") if f.is_file()) if directory.is_dir() else 0
        )
        self._extend_start(30.0 + size / LOAD_BYTES_PER_S)

    async def _loop(self, tasks: anyio.abc.TaskGroup) -> None:
        while True:
            with anyio.move_on_after(self.settings.poll_s):
                await self._wakeup.wait()
            self._wakeup = anyio.Event()
            try:
                await self._step(tasks)
            except Exception as exc:
                # A store outage or a provider failure must not kill the actor: report and retry.
                self._progress.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("index step failed: %s", self._progress.last_error)

    async def _step(self, tasks: anyio.abc.TaskGroup) -> None:
        space = self._embedder.space if self._embedder else None
        if space is not None and space.key not in self._spaces:
            await self._store.ensure_space(space)
            self._spaces[space.key] = space
        builder = await self._lock.try_acquire()
        await self._follow_pointer()
        if space is None:
            return
        started = anyio.current_time()
        mark = await self._store.change_mark()
        after = self._known_mark(space)
        if builder:
            await self._catch_up(space, after=after)
        await self._refresh(space)
        self._pending = await self._store.count_to_index(space.key, self.settings.chunker, after=after)
        self._holds = await self._store.held(space.key)
        ends_in = self._holds.next_end_s
        self._hold_ends_at = None if ends_in is None else anyio.current_time() + ends_in
        full_at = started if after == 0 or self._indexed_through is None else self._indexed_through.at
        if after == 0:
            self._progress.full_passes += 1
            self._indexed_through = None
        if mark is not None and self._pending == 0:
            self._indexed_through = _IndexedThrough(space.key, mark, full_at)
        if builder and not self._building and self._should_build(space):
            self._building = True
            tasks.start_soon(self._build, space)

    def _known_mark(self, space: VectorSpace) -> int:
        """The change mark through which every live record is known to be indexed in `space`
        (0: nothing is known, read every record). Finding unindexed records reads every record
        it looks at, so once all are indexed, steps and `count_pending` look only at records
        changed since; every `recheck_s` a step reads them all again anyway. A hold that ends
        is a change too: its record, unchanged since, is due again (and pending again) at once."""
        known = self._indexed_through
        if known is None or known.space_id != space.key:
            return 0
        now = anyio.current_time()
        if now - known.at >= self.settings.recheck_s:
            return 0
        if self._hold_ends_at is not None and now >= self._hold_ends_at:
            return 0
        return known.mark

    # -- following the pointer

    async def _follow_pointer(self) -> None:
        pointer = await self._store.pointer()
        if self._pointer is not None and pointer.version == self._pointer.version:
            return
        self._pointer = pointer
        row = pointer.current
        if row is None:
            return
        if self._generation is not None and self._generation.manifest.generation_id == row.id:
            return
        generation = await self._load(row)
        if generation is None:
            # The current generation is damaged: serve the previous verified one if nothing is
            # serving yet, and have the builder replace the damaged one.
            self._heal = True
            if self.cell.current() is None and pointer.previous is not None:
                previous = await self._store.generation(pointer.previous)
                if previous is not None and previous.state == "verified":
                    generation = await self._load(previous)
            if generation is None:
                return
        await self._remember_space(generation.manifest.space_id, generation)
        self._swap(Handle.of(generation), f"loaded generation {generation.manifest.generation_id}")

    async def _remember_space(self, space_id: str, generation: Generation) -> None:
        self._spaces.setdefault(space_id, generation.manifest.space)

    async def _verify(self, row: GenerationRow) -> Generation:
        """Load a generation exactly as its row describes it; GenerationCorrupt otherwise."""
        expected = Expected(
            generation_id=row.id,
            manifest_sha256=row.manifest_sha256,
            count=row.count,
            space_id=row.space_id,
            source_watermark=row.source_watermark,
            tombstone_watermark=row.tombstone_watermark,
        )
        return await anyio.to_thread.run_sync(lambda: load_generation(self.settings.root, expected))

    async def _load(self, row: GenerationRow) -> Generation | None:
        """Verify and adopt the pointer's generation, or report it corrupt and keep serving."""
        try:
            generation = await self._verify(row)
        except GenerationCorrupt as exc:
            self._problem = ("vector_index_corrupt", str(exc))
            log.error("generation %s is corrupt: %s; keeping the previous handle", row.id, exc)
            return None
        self._generation = generation
        self._problem = None
        return generation

    # -- catching up (builder only)

    async def _catch_up(self, space: VectorSpace, *, after: int = 0) -> None:
        """Chunk, embed and store every live record that has no vectors in `space` yet.

        One pass walks the records in change order behind a cursor, a batch at a time: one
        embedder call per record (the embedder merges them into provider calls and meters them
        per namespace), one store transaction per batch. A record whose input the provider
        refuses is set aside (`records_to_hold`, `hold_s`) and its batch-mates are stored;
        provider trouble ends the pass after storing what was embedded, and the next step
        resumes it.
        """
        assert self._embedder is not None
        settings = self.settings
        cursor = after
        while True:
            if self._progress.indexed_records - self._analysed_at >= max(
                STATISTICS_MIN_ROWS, STATISTICS_GROWTH * self._analysed_at
            ):
                await self._store.refresh_statistics()
                self._analysed_at = self._progress.indexed_records
            batch = await self._store.records_to_index(space.key, settings.chunker, settings.index_batch, after=cursor)
            if not batch:
                return
            cursor = batch[-1].change_seq
            # A body may be megabytes: cutting, rendering and hashing its thousands of chunks is
            # CPU work that must not hold up the event loop (and with it /livez and the watchdog).
            prepared = await anyio.to_thread.run_sync(self._prepare, batch)
            outcomes = await self._embed_records(batch, prepared)
            if any(isinstance(o, EmbedResult) and o.space.key != space.key for o in outcomes):
                return  # the space changed under us; the next step starts over
            embedded = [
                (record, chunks, outcome.vectors)
                for record, chunks, outcome in zip(batch, prepared, outcomes, strict=True)
                if isinstance(outcome, EmbedResult)
            ]
            failures = [(r, o) for r, o in zip(batch, outcomes, strict=True) if isinstance(o, EmbeddingError)]
            refused = records_to_hold(failures, embedded=len(embedded))
            if embedded:
                items = [(r, c.texts, c.hashes, v) for r, c, v in embedded]
                self._progress.stored_vectors += await self._store.store_batch(space.key, settings.chunker, items)
                self._progress.indexed_records += len(embedded)
            if refused:
                holds = [(record.id, record.revision, error.reason.value) for record, error in refused]
                await self._store.hold(space.key, holds, first_s=settings.hold_s, longest_s=HOLD_LONGEST_S)
                for record, error in refused:
                    log.warning(
                        "record set aside: the provider will not embed its input",
                        extra={"record": str(record.id), "revision": record.revision, "reason": error.reason.value},
                    )
            held = {record.id for record, _ in refused}
            trouble = [error for record, error in failures if record.id not in held]
            if trouble:
                self._progress.last_error = f"{trouble[0].reason}: {trouble[0]}"
                return  # provider trouble: the next step tries again

    def _prepare(self, batch: list[RecordToIndex]) -> list[_Chunks]:
        """Blocking (a worker thread): each record's chunks, their model inputs and digests."""
        assert self._embedder is not None
        render, settings = self._embedder.render_document, self.settings
        prepared = []
        for record in batch:
            texts = chunk_text(record.body, max_chars=settings.chunk_chars, overlap=settings.chunk_overlap)
            prepared.append(
                _Chunks(
                    texts=texts,
                    inputs=[render(record.title, text).text for text in texts],
                    hashes=[hashlib.sha256(text.encode()).hexdigest() for text in texts],
                )
            )
        return prepared

    async def _embed_records(
        self, batch: list[RecordToIndex], prepared: list[_Chunks]
    ) -> list[EmbedResult | EmbeddingError]:
        """One embedder call per record and slice of its chunks, all records at once: a failure
        is that record's alone.

        A record's slices go one after another, each with the embedder's own deadline, and only
        what the provider takes in two rounds waits in the embedder: a record of thousands of
        chunks takes as long as it takes without any call running out of time (as one call for
        all of them did, on every pass, forever), and a query never waits behind a whole record.
        """
        assert self._embedder is not None
        embedder = self._embedder
        step = embedder.settings.max_batch
        # Two provider rounds of texts in the embedder's queue at most: one call running, the
        # next one filling. More would only wait there, past their deadline, and keep queries
        # waiting behind them.
        queued = _TextBudget(2 * step * max(1, embedder.info.max_concurrency))
        outcomes: dict[int, EmbedResult | EmbeddingError] = {}

        async def embed(position: int) -> None:
            inputs = prepared[position].inputs
            namespace = batch[position].namespace
            parts: list[EmbedResult] = []
            try:
                # At least one call, as before, whatever the chunker returns.
                for start in range(0, max(len(inputs), 1), step):
                    texts = inputs[start : start + step]
                    async with queued.taking(len(texts)):
                        part = await embedder.embed(texts, purpose="index", namespace=namespace)
                    if parts and part.space.key != parts[0].space.key:
                        outcomes[position] = part  # the space changed mid-record: the caller starts over
                        return
                    parts.append(part)
            except EmbeddingError as error:
                outcomes[position] = error
                return
            vectors = parts[0].vectors if len(parts) == 1 else np.concatenate([p.vectors for p in parts])
            outcomes[position] = EmbedResult(vectors, parts[0].space)

        async with anyio.create_task_group() as tasks:
            for position in range(len(batch)):
                tasks.start_soon(embed, position)
        return [outcomes[position] for position in range(len(batch))]

    # -- refreshing the handle (everyone)

    async def _refresh(self, space: VectorSpace) -> None:
        handle = self.cell.current()
        if handle is None or handle.space_id != space.key:
            if handle is not None and query_compatible(handle.space_id, space, self._spaces):
                return  # keep serving the older-template generation until the new one is built
            handle = Handle.empty(space)
        seen = handle.seen
        changed = False
        while True:
            rows = await self._store.vectors_after(space.key, space.dimension, seen, self.settings.delta_page)
            if not len(rows):
                break
            handle = handle.with_delta(rows.vectors, _id_map(rows))
            seen = int(rows.surrogates[-1])
            changed = True
        retired = await self._store.retired_surrogates(seen)
        fresh = set(retired.tolist()) - handle.tombstones
        if fresh:
            handle = handle.with_tombstones(fresh)
            changed = True
        if changed:
            self._swap(handle, "delta applied")

    def _swap(self, handle: Handle, why: str) -> None:
        self.cell.swap(handle)
        log.debug("handle swapped: %s", why, extra={"count": handle.count, "delta": handle.delta_count})
        if self._on_swap is not None:
            self._on_swap(why)

    # -- building generations (builder only)

    def _should_build(self, space: VectorSpace) -> bool:
        if self._rebuild_requested is not None or self._heal:
            return True
        if anyio.current_time() - self._last_change < self.settings.quiet_s:
            return False  # the poll timer brings us back once it is quiet
        handle = self.cell.current()
        if handle is None or handle.space_id != space.key:
            return self._pending == 0 and handle is not None
        if handle.base is None:
            return handle.delta_count > 0 and self._pending == 0
        return handle.delta_count > self.settings.compact_share * max(handle.base.count, 1)

    async def _build(self, space: VectorSpace) -> None:
        reason = "replace a corrupt generation" if self._heal else "automatic"
        status = self._rebuild_requested or BuildStatus(id=uuid.uuid4().hex[:12], state="queued", reason=reason)
        if self._rebuild_requested is None:
            self._progress.builds.insert(0, status)
            del self._progress.builds[20:]
        self._rebuild_requested = None
        status.state, status.started_at = "running", _now()
        try:
            rows, source, tombstone, missing = await self._store.build_snapshot(
                space.key, self.settings.chunker, space.dimension
            )
            status.total = len(rows)
            if not len(rows):
                status.state, status.error = "skipped", "nothing to index"
                return
            generation_id = self._new_id()

            def progress(done: int, total: int) -> None:
                status.done, status.total = done, total

            manifest = await anyio.to_thread.run_sync(
                lambda: build_generation(
                    self.settings.root,
                    generation_id=generation_id,
                    space=space,
                    space_id=space.key,
                    vectors=rows.vectors,
                    id_map=_id_map(rows),
                    source_watermark=source,
                    tombstone_watermark=tombstone,
                    factory=self.settings.factory,
                    progress=progress,
                )
            )
            digest = await anyio.to_thread.run_sync(lambda: manifest_sha256(self.settings.root / generation_id))
            row = GenerationRow(
                id=generation_id,
                space_id=space.key,
                directory=str(self.settings.root / generation_id),
                manifest_sha256=digest,
                index_type=manifest.index_type,
                count=manifest.count,
                source_watermark=source,
                tombstone_watermark=tombstone,
                built_at=_now(),
            )
            await self._store.add_generation(row)
            pointer = await self._store.pointer()
            if not await self._store.move_pointer(generation_id, pointer.version):
                status.state, status.error = "failed", "the pointer moved during the build"
                return
            status.state, status.generation, status.finished_at = "done", generation_id, _now()
            self._heal = False
            log.info(
                "generation %s built and current",
                generation_id,
                extra={"count": manifest.count, "missing": missing, "space": space.key},
            )
            self.wake()
        except Exception as exc:
            status.state, status.error, status.finished_at = "failed", f"{type(exc).__name__}: {exc}", _now()
            log.error("generation build failed: %s", status.error)
        finally:
            self._building = False

    async def activate(self, generation_id: str) -> GenerationRow:
        """Roll back (or forward) to a verified generation: re-check its files, its space and
        its watermarks, then move the pointer; the loop then loads it and applies the delta
        and tombstones recorded after its watermarks.

        Raises LookupError (unknown), ValueError (another vector space), GenerationCorrupt,
        RuntimeError (the pointer moved meanwhile).
        """
        row = await self._store.generation(generation_id)
        if row is None or row.state != "verified":
            raise LookupError(f"no verified generation {generation_id}")
        generation = await self._verify(row)
        await self._remember_space(row.space_id, generation)
        space = self._embedder.space if self._embedder else None
        if not query_compatible(row.space_id, space, self._spaces):
            raise ValueError(f"generation {generation_id} is in another vector space than the configured model")
        pointer = await self._store.pointer()
        if not await self._store.move_pointer(generation_id, pointer.version):
            raise RuntimeError("the generation pointer moved meanwhile; try again")
        self.wake()
        return row


def _id_map(rows: VectorRows) -> IdMap:
    return IdMap.from_rows(rows.surrogates, rows.record_ids, rows.revisions, rows.namespaces)
