"""The index manager actor: keeps the vector route's copy-on-write handle current.

One loop, woken by record changes, by the generation pointer moving, or by a poll timer:

1. follow the pointer: when another daemon (or a rollback) moved it, load that generation, or,
   when its directory is not here (a fleet's members share nothing but PostgreSQL), build this
   daemon's own copy of it from the stored vectors in the background and load that, serving
   what it has meanwhile (`actors/index/following.py`, `actors/index/copies.py`);
2. as the builder-lock holder only: chunk and embed live records that have no vectors in the
   current space yet, storing chunks and vectors durably (so nothing is ever embedded twice)
   (`actors/index/catch_up.py`);
3. refresh the handle: vectors stored after its watermark become the delta, retired chunks the
   tombstones, each as a NEW handle swapped in (searches keep their leased one);
4. as the builder only: build a new generation in the background when none exists for the
   space, when the delta outgrows `compact_share` of the base, or when asked
   (`actors/index/builds.py`, which also rolls the pointer back).

A search never waits for any of this: it leases whatever handle is current.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import anyio
import msgspec
import numpy as np
import numpy.typing as npt
from anyio.abc import TaskStatus

from recalld.actors.duplicates.catch_up import TitleCatchUp
from recalld.actors.embedding.embedder import Embedder
from recalld.actors.embedding.errors import Reason
from recalld.actors.index.backlog import ChunkCounts, count_waiting
from recalld.actors.index.builds import Builds, BuildStatus, id_map, query_compatible
from recalld.actors.index.catch_up import CatchUp
from recalld.actors.index.following import PointerFollower
from recalld.actors.index.handle import Handle, HandleCell, Hit
from recalld.actors.index.idmap import record_id_rows
from recalld.actors.index.manifest import IndexReason
from recalld.actors.index.placement import SearchPlacement, ordinary_search, placed, scored_exactly
from recalld.actors.index.problems import NOTHING_INDEXED, IndexUnavailable, Problem
from recalld.actors.index.settings import IndexSettings
from recalld.actors.kernel.mailbox import Mailbox
from recalld.actors.kernel.supervisor import stop_requested
from recalld.actors.ports.duplicates import TitleBacklog
from recalld.actors.ports.embedding import VectorSpace
from recalld.actors.ports.index import BuilderLock, GenerationRow, Holds, VectorStore

log = logging.getLogger("recalld.index")


@dataclass(frozen=True)
class _IndexedThrough:
    """Every live record of `space_id` with a change mark up to `mark` is indexed; `at` is when
    the last step that read every record began."""

    space_id: str
    mark: int
    at: float


class IndexManager:
    """The actor that owns the loop and the handle cell of the vector route.

    Guarantees: a search leases the handle that is current when it starts and never waits for
    indexing, loading or building; a handle is never changed in place, only replaced whole
    (`HandleCell`). Only a generation that verifies against its catalogue row is ever served;
    a corrupt one is reported (`problem`) and the previous handle keeps serving. Only the holder
    of the builder lock writes (catch-up, builds, holds); every daemon follows the pointer and
    applies the vectors stored after its handle's watermark. A generation whose directory is not
    here is copied from the stored vectors, never embedded again, while the handle being served
    keeps serving (`serving()` says which generation, and how far behind). A failing step (the
    store down, the provider failing) is recorded in `last_error` and retried by the next one; it
    never ends the actor. A wake-up (`wake`) received while a step runs brings one more step, never more.
    """

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
        titles: TitleBacklog | None = None,
        title_embedder: Embedder | None = None,
        member: str = "",
    ) -> None:
        """`member`: who this daemon is among those sharing the database, for people (the copies
        it records say it); its generations directory when empty."""
        self._store = store
        self._lock = lock
        self._embedder = embedder
        self.settings = settings
        self._on_swap = on_swap
        self._extend_start = extend_start
        self.cell = HandleCell()
        self._spaces: dict[str, VectorSpace] = {}
        # Capacity one: a wake-up queued while a step runs is all the next step needs, so more
        # coalesce into it (`wake` drops them) instead of queueing steps.
        self._wakeups = Mailbox[None, None](capacity=1, name="index")
        self._catch_up = CatchUp(store, embedder, settings) if embedder is not None else None
        # Title vectors for the duplicate check, caught up after the chunks by the same builder,
        # with the duplicate check's own embedder (`title_embedder`) when it has one.
        title_embedder = title_embedder or embedder
        self._titles = TitleCatchUp(titles, title_embedder) if titles and title_embedder else None
        self._builds = Builds(store, settings, self._spaces, new_generation_id=new_generation_id, published=self.wake)
        self._following = PointerFollower(
            store,
            settings,
            self._spaces,
            self._builds,
            self.cell,
            swap=self._swap,
            member=member or str(settings.root),
            copied=self.wake,
        )
        self._caught_up_at: float | None = None
        """anyio time at which the last refresh that took in every stored vector began."""
        self._full_passes = 0
        self._steps = 0
        """Steps that ran to their end: a poll (`poll_s`) or a wake-up each. A caller can wait for
        the manager to have looked again (a test that something did not happen on a poll)."""
        """Steps that read every live record (catch-up and count); once every record is indexed,
        steps read only the records changed since."""
        self._last_error: str | None = None
        self._pending = 0
        """Records the last step found still to index, held ones apart."""
        self._holds = Holds(by_reason={}, next_end_s=None)
        """Records set aside because the provider will not embed them (last step)."""
        self._hold_ends_at: float | None = None
        """anyio time at which the first of `_holds` ends: its record is due for another try."""
        self._placement = SearchPlacement(settings.inline_search_max_s)  # on the loop or in a thread, by cost
        self._indexed_through: _IndexedThrough | None = None
        self._last_change = 0.0  # anyio time of the last wake-up; the poll timer re-checks builds
        self._chunk_counts = ChunkCounts(settings)

    # -- what callers use

    def wake(self) -> None:
        """Something changed (a record write, a pointer move): run a step soon."""
        self._last_change = anyio.current_time()
        try:
            self._wakeups.cast_nowait(None)
        except anyio.WouldBlock:
            pass  # a wake-up is already queued: the step it brings sees this change too

    @property
    def store(self) -> VectorStore:
        return self._store

    async def count_pending(self, namespaces: Collection[str] | None = None, *, with_held: bool = True) -> int:
        """Live records whose current revision is not yet searchable in the embedder's space,
        counted now; only those of `namespaces` when given (None: every namespace).
        `with_held=False` leaves out the records set aside (held): those wait for their hold to
        end, not for indexing."""
        return await self._count_pending(self._embedder.space if self._embedder else None, namespaces, with_held)

    async def count_pending_chunks(self, namespaces: Collection[str]) -> int:
        """Chunks still to embed for the records of `namespaces` waiting to be indexed in the
        embedder's space (held ones left out), counted now: each record's chunks as the
        catch-up cuts them (`index_chunks`), less those of the batch in flight here whose
        vectors have come back. So the count falls a slice of chunks at a time, not a batch of
        records at a time; it is 0 once every such record is embedded (the last may still wait
        for the handle to take it in: `count_pending` says when the route finds them).

        A record revision's chunks are counted once, in a worker thread, and kept while it
        waits; its body is read from the store only for that (`ChunkCounts`)."""
        space = self._embedder.space if self._embedder else None
        key, after = (space.key, self._known_mark(space)) if space is not None else ("", 0)
        embedded = self._catch_up.embedded_chunks() if self._catch_up is not None else {}
        return await self._chunk_counts.count(self._store, key, namespaces, after=after, embedded=embedded)

    async def nothing_to_index(self) -> bool:
        """Whether the store holds no live record at all: with nothing indexed, the vector route
        then has nothing to find, which is no fault (a fresh daemon)."""
        return await self._store.count_to_index("", self.settings.chunker) == 0

    async def count_unsearchable(self, namespaces: Collection[str]) -> int:
        """For recall: live records of `namespaces` the handle being served cannot find yet,
        held ones left out. While a switch to a new space is built, the previous space's
        generation serves and finds every record it holds: what it lacks counts, not what the
        new space lacks (the route says `vector_space_rebuilding` for that)."""
        handle = self.cell.current()
        space = handle.space if handle is not None else (self._embedder.space if self._embedder else None)
        return await self._count_pending(space, namespaces, with_held=False)

    async def _count_pending(
        self, space: VectorSpace | None, namespaces: Collection[str] | None, with_held: bool
    ) -> int:
        after = self._known_mark(space) if space is not None else 0
        return await count_waiting(
            self._store,
            space,
            self.settings.chunker,
            self.cell.current(),
            after=after,
            namespaces=namespaces,
            with_held=with_held,
        )

    def generation_count(self, generation_id: str, namespaces: Collection[str]) -> int | None:
        """Vectors of `namespaces` in generation `generation_id`, when it is the base of the
        handle this daemon serves; None when it is not (this daemon has not loaded it)."""
        handle = self.cell.current()
        base = handle.base if handle is not None else None
        if base is None or base.generation_id != generation_id:
            return None
        return sum(base.namespace_count(namespace) for namespace in namespaces)

    def generations_in_use(self) -> set[str]:
        """Generations a handle of this daemon still holds (current, or leased by a search)."""
        return set(self.cell.generations_in_use())

    @property
    def is_builder(self) -> bool:
        return self._lock.held

    @property
    def full_passes(self) -> int:
        return self._full_passes

    @property
    def pending(self) -> int:
        """Live records not yet searchable by the vector route here (0 when caught up), those
        set aside because the provider will not embed them included."""
        return self._pending + sum(self._holds.by_reason.values())

    @property
    def held(self) -> dict[str, int]:
        """Records set aside because the provider will not embed their input, by reason."""
        return dict(self._holds.by_reason)

    def problem(self) -> Problem | None:
        """(reason code, message) when the vector route cannot answer, else None."""
        handle = self.cell.current()
        space = self._embedder.space if self._embedder else None
        if self._embedder is None:
            return (Reason.NO_PROVIDER, "no embedding provider is configured")
        if space is None:
            health = self._embedder.health()
            return (health.reason or IndexReason.EMBEDDER_UNAVAILABLE, health.message)
        if handle is None or handle.count == 0:
            return self._following.problem or NOTHING_INDEXED
        if not query_compatible(handle.space_id, space, self._spaces):
            return (IndexReason.VECTOR_SPACE_REBUILDING, "the index is being rebuilt for the configured model")
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
        """Search the current handle under a lease, on the loop or in a thread (`index/placement.py`).
        Returns (hits, generation id). `within`: only these records, scored exactly (`Handle.search`)."""
        rows = record_id_rows(within) if within is not None else None
        async with self.cell.lease() as handle:
            if handle is None or handle.count == 0:
                reason, message = self._following.problem or NOTHING_INDEXED
                raise IndexUnavailable(reason, message)
            exact = rows is not None or scored_exactly((handle.base, *handle.deltas), namespace, k_records)
            hits = await placed(
                self._placement,
                handle,
                lambda: handle.search(
                    query,
                    k_records=k_records,
                    namespace=namespace,
                    accept=accept,
                    within=rows,
                    ef_search=self.settings.hnsw_ef_search,
                ),
                ordinary=ordinary_search(exact=exact, k_records=k_records),
            )
            return hits, handle.base.manifest.generation_id if handle.base is not None else None

    def request_rebuild(self) -> BuildStatus:
        status = self._builds.request()
        self.wake()
        return status

    def builds(self) -> list[BuildStatus]:
        return list(self._builds.history)

    def serving(self) -> dict[str, dict[str, object]]:
        """Which generation this daemon serves and how far it lags, for `/v1/generations` and
        `/readyz` (`PointerFollower.serving`)."""
        return self._following.serving(self._caught_up_at)

    async def vectors_behind(self) -> int | None:
        """Vectors stored in PostgreSQL in the embedder's space that the handle has not taken in
        yet, counted now; None without a space."""
        space = self._embedder.space if self._embedder else None
        if space is None:
            return None
        handle = self.cell.current()
        seen = handle.seen if handle is not None and handle.space_id == space.key else 0
        return await self._store.count_vectors_after(space.key, seen)

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
            "indexed_records": self._catch_up.indexed_records if self._catch_up is not None else 0,
            "full_passes": self._full_passes,
            "steps": self._steps,
            "last_error": self._last_error,
            "leases": self.cell.open_leases,
            "copy": None if (copy := self._following.copies.last) is None else msgspec.to_builtins(copy),
        }

    async def activate(self, generation_id: str) -> GenerationRow:
        """Roll back (or forward) to a verified generation; the loop then loads it and applies
        the delta and tombstones recorded after its watermarks.

        Raises GenerationNotFound, GenerationCorrupt, SpaceMismatch or PointerMoved
        (`Builds.activate`).
        """
        return await self._builds.activate(generation_id, self._embedder.space if self._embedder else None)

    # -- the actor

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        stop = stop_requested()
        self.settings.root.mkdir(parents=True, exist_ok=True)
        try:
            await self._following.announce_load(self._extend_start)
            await self._following.follow()
        except Exception as exc:  # the store may be down at start; the loop retries
            log.warning("could not read the generation pointer at start: %s", exc)
        task_status.started()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._loop, tasks)
            await stop.wait()
            tasks.cancel_scope.cancel()
        await self._lock.release()

    async def _loop(self, tasks: anyio.abc.TaskGroup) -> None:
        async with self._wakeups.receiving() as wakeups:
            while True:
                with anyio.move_on_after(self.settings.poll_s):
                    await wakeups.receive()
                try:
                    await self._step(tasks)
                    self._steps += 1
                except Exception as exc:
                    # A store outage or a provider failure must not kill the actor: report and retry.
                    self._last_error = f"{type(exc).__name__}: {exc}"
                    log.warning("index step failed: %s", self._last_error)

    async def _step(self, tasks: anyio.abc.TaskGroup) -> None:
        space = self._embedder.space if self._embedder else None
        if space is not None and space.key not in self._spaces:
            await self._store.ensure_space(space)
            self._spaces[space.key] = space
        builder = await self._lock.try_acquire()
        await self._following.follow(tasks)
        if space is None:
            return
        started = anyio.current_time()
        mark = await self._store.change_mark()
        after = self._known_mark(space)
        if builder and self._catch_up is not None:
            trouble = await self._catch_up.run(space, after=after, holding=lambda: self._lock.held)
            if trouble is not None:
                self._last_error = trouble
        await self._refresh(space)
        self._pending = await self._store.count_to_index(space.key, self.settings.chunker, after=after)
        self._holds = await self._store.held(space.key)
        ends_in = self._holds.next_end_s
        self._hold_ends_at = None if ends_in is None else anyio.current_time() + ends_in
        full_at = started if after == 0 or self._indexed_through is None else self._indexed_through.at
        if after == 0:
            self._full_passes += 1
            self._indexed_through = None
        if mark is not None and self._pending == 0:
            self._indexed_through = _IndexedThrough(space.key, mark, full_at)
        builds = self._builds
        quiet_for = anyio.current_time() - self._last_change
        if (
            builder
            and not builds.building
            and builds.due(
                self.cell.current(),
                space,
                pending=self._pending,
                quiet_for=quiet_for,
                copying=self._following.copies.building is not None,
            )
        ):
            builds.building = True
            tasks.start_soon(builds.build, space)
        # Last: the handle is refreshed and a build started before titles are embedded, so the
        # vector route never waits for the duplicate check's vectors.
        if builder and self._titles is not None:
            trouble = await self._titles.run(after=after, holding=lambda: self._lock.held)
            if trouble is not None:
                self._last_error = trouble

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

    # -- refreshing the handle (everyone)

    async def _refresh(self, space: VectorSpace) -> None:
        handle = self.cell.current()
        if handle is None or handle.space_id != space.key:
            if handle is not None and query_compatible(handle.space_id, space, self._spaces):
                return  # keep serving the older-template generation until the new one is built
            problem = self._following.problem
            if handle is None and problem is not None and problem[0] == IndexReason.VECTOR_INDEX_CORRUPT:
                # Past a corrupt current generation the route is served from a previous
                # verified generation or reported degraded, never from a handle of our own
                # making; the builder replaces the damaged generation (`heal`) and we load that.
                return
            handle = Handle.empty(space)
        started = anyio.current_time()
        seen = handle.seen
        changed = False
        while True:
            rows = await self._store.vectors_after(space.key, space.dimension, seen, self.settings.delta_page)
            if not len(rows):
                break
            handle = handle.with_delta(rows.vectors, id_map(rows))
            seen = int(rows.surrogates[-1])
            changed = True
        retired = await self._store.retired_surrogates(seen)
        fresh = set(retired.tolist()) - handle.tombstones
        if fresh:
            handle = handle.with_tombstones(fresh)
            changed = True
        if changed:
            self._swap(handle, "delta applied")
        self._caught_up_at = started

    def _swap(self, handle: Handle, why: str) -> None:
        self.cell.swap(handle)
        log.debug("handle swapped: %s", why, extra={"count": handle.count, "delta": handle.delta_count})
        if self._on_swap is not None:
            self._on_swap(why)
