"""The GC sweeper actor: deletes what nothing references any more, and nothing else.

Daemons sharing a database (a fleet) each sweep their own generations directory; the database
work below (rows of generations, searches, disputes, holds, retired chunks) runs in one daemon at
a time, fleet-wide, under the advisory lock `SWEEPER_ROLE`, and a pass that finds it held does
only its own directory.

- A generation goes only when it is not current, is not the rollback target inside the rollback
  window, and has no open lease in this daemon. Its row changes in a fenced transaction (the
  store re-checks the pointer under a row lock); the directory is removed after that commits,
  so a crash in between leaves an unreferenced directory, never a row pointing at nothing.
- Build directories left by a crash (`.tmp-*`) and generation directories no row knows are
  removed once older than a grace period; they never affect loading or readiness.
- Search telemetry older than its retention is deleted, and so are disputes finished (resolved,
  superseded, skipped) longer ago than theirs.
- Index holds (records the provider would not embed) of record revisions that are no longer live
  are deleted: the record was forgotten, or its newer revision is tried afresh anyway.
- What is left of a retired chunk (a forget or an update took its text and vectors when it
  committed) is its surrogate row: generations built before the change still hold the vector in
  their own file, and the row is the tombstone that keeps them from returning it. It is deleted
  once retired for the rollback window and held by no generation directory on disk.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import shutil
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import numpy as np
import numpy.typing as npt
from anyio.abc import TaskStatus

from recalld.actors.index.listing import list_generation_dirs, orphaned_temp_dirs
from recalld.actors.index.manifest import ID_MAP_FILE, TEMP_PREFIX
from recalld.actors.kernel.supervisor import stop_requested
from recalld.actors.ports.gc import DisputeRetention, RetentionStore
from recalld.actors.ports.index import GenerationRow, SweptStore
from recalld.actors.ports.roles import TickLocks

log = logging.getLogger("recalld.sweeper")

SWEEPER_ROLE = "gc_sweeper"
"""The advisory lock a pass's database work runs under: daemons sharing a database each sweep
their own directory, and one at a time the rows."""

RETIRED_PAGE = 5000
"""Retired chunk rows read (and deleted) per statement."""


@dataclass(frozen=True)
class SweepSettings:
    interval_s: float = 60.0
    rollback_window_s: float = 3600.0
    temp_grace_s: float = 3600.0
    search_retention_s: float = 30 * 86400.0
    dispute_retention_s: float = 90 * 86400.0


@dataclass
class SweepReport:
    generations: list[str] = field(default_factory=list)
    directories: list[str] = field(default_factory=list)
    searches: int = 0
    holds: int = 0
    chunks: int = 0
    """Surrogate rows of retired chunks deleted."""
    disputes: int = 0
    """Finished disputes deleted."""
    database: bool = True
    """Whether this pass did the database work (False: another daemon held `SWEEPER_ROLE`)."""


def generation_removable(
    row: GenerationRow,
    *,
    current: str | None,
    previous: str | None,
    leased: set[str],
    now: dt.datetime,
    window_s: float,
) -> bool:
    """The deletion rule for one generation, pure so it can be tested case by case.

    Never the current one, never one a search holds. The rollback target (`previous`) and any
    other earlier generation an operator might activate stay for `window_s` after the last
    moment they mattered: when they stopped being current, or were built if never current.
    """
    if row.state != "verified" or row.id == current or row.id in leased:
        return False
    if row.id == previous and row.deactivated_at is None:
        return False  # it is the rollback target but its hand-over time is unknown: keep it
    since = row.deactivated_at or row.built_at
    return (now - since).total_seconds() >= window_s


def _remove(path: Path) -> None:
    # whole directories only: truncating a memory-mapped file in place would crash its readers
    shutil.rmtree(path, ignore_errors=True)


class Sweeper:
    """The GC actor: every `interval_s`, one pass of `sweep_once` over what the module docstring
    lists.

    Guarantees: it deletes only what nothing references (a generation that is current, the
    rollback target inside the window, or leased here is never touched, and its row goes before
    its directory); the database work of a pass runs only while this daemon holds
    `SWEEPER_ROLE` (with `locks`; without, always); a pass that fails is logged and the next one
    starts afresh. Every kind of deletion is reported through `on_delete`.
    """

    def __init__(
        self,
        store: SweptStore,
        retention: RetentionStore,
        root: Path,
        *,
        leased: Callable[[], set[str]],
        settings: SweepSettings,
        on_delete: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.time,
        disputes: DisputeRetention | None = None,
        locks: TickLocks | None = None,
    ) -> None:
        self._store = store
        self._retention = retention
        self._disputes = disputes
        self._locks = locks
        self._root = root
        self._leased = leased
        self.settings = settings
        self._on_delete = on_delete
        self._clock = clock
        self.last: SweepReport | None = None
        self._id_maps: dict[str, npt.NDArray[np.int64]] = {}
        """Surrogates held by each generation directory read so far."""

    def _now(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self._clock(), dt.UTC)

    async def sweep_once(self) -> SweepReport:
        report = SweepReport()
        rows = await self._store.generations()
        await self._remove_orphaned_directories(rows, report)
        async with self._database_role() as held:
            report.database = held
            if held:
                await self._sweep_database(rows, report)
        self.last = report
        return report

    def _database_role(self) -> contextlib.AbstractAsyncContextManager[bool]:
        """The sweeper's database work is one member's at a time, fleet-wide (`SWEEPER_ROLE`)."""
        return self._locks.hold(SWEEPER_ROLE) if self._locks is not None else contextlib.nullcontext(True)

    async def _remove_orphaned_directories(self, rows: list[GenerationRow], report: SweepReport) -> None:
        """This daemon's own directory: crashed builds, and directories no verified row knows
        (among them its copies of generations another member retired)."""
        known = {row.id for row in rows if row.state == "verified"}
        for path in await anyio.to_thread.run_sync(
            lambda: orphaned_temp_dirs(self._root, self.settings.temp_grace_s, known=known, now=self._clock())
        ):
            await anyio.to_thread.run_sync(_remove, path)
            report.directories.append(path.name)
            log.info("orphaned build directory %s removed", path.name)
            self._deleted("directory")

    async def _sweep_database(self, rows: list[GenerationRow], report: SweepReport) -> None:
        now = self._now()
        pointer = await self._store.pointer()
        current = pointer.current.id if pointer.current else None
        for row in rows:
            verdict = generation_removable(
                row,
                current=current,
                previous=pointer.previous,
                leased=self._leased(),
                now=now,
                window_s=self.settings.rollback_window_s,
            )
            if not verdict:
                continue

            def fence(locked: GenerationRow, now_current: str | None, now_previous: str | None) -> bool:
                # re-checked under the row lock, against the pointer and the leases as they are now
                return generation_removable(
                    locked,
                    current=now_current,
                    previous=now_previous,
                    leased=self._leased(),
                    now=self._now(),
                    window_s=self.settings.rollback_window_s,
                )

            if await self._store.retire_generation(row.id, fence):
                await anyio.to_thread.run_sync(_remove, self._root / row.id)
                report.generations.append(row.id)
                log.info("generation %s deleted", row.id)
                self._deleted("generation")
        cutoff = now - dt.timedelta(seconds=self.settings.search_retention_s)
        report.searches = await self._retention.delete_searches_before(cutoff)
        if report.searches:
            self._deleted("searches")
        if self._disputes is not None:
            finished_before = now - dt.timedelta(seconds=self.settings.dispute_retention_s)
            report.disputes = await self._disputes.delete_finished_disputes_before(finished_before)
            if report.disputes:
                self._deleted("disputes")
        report.holds = await self._store.delete_stale_holds()
        if report.holds:
            self._deleted("holds")
        remaining = [row for row in rows if row.id not in report.generations]
        report.chunks = await self._delete_retired_chunks(now, remaining)
        if report.chunks:
            self._deleted("chunks")

    def _deleted(self, what: str) -> None:
        if self._on_delete is not None:
            self._on_delete(what)

    async def _delete_retired_chunks(self, now: dt.datetime, rows: list[GenerationRow]) -> int:
        """Delete the surrogate rows of chunks retired longer than the rollback window ago that no
        generation directory on disk holds (such a generation would return them once activated).

        A build in progress (a `.tmp-*` directory) may hold them in its snapshot: the pass then
        leaves them for the next one. The window also covers handles that loaded a chunk as a
        delta before it was retired: they take its tombstone within one poll.
        """
        if await anyio.to_thread.run_sync(self._build_in_progress):
            return 0
        retired_before = now - dt.timedelta(seconds=self.settings.rollback_window_s)
        held: tuple[npt.NDArray[np.int64], int] | None = None
        deleted, after = 0, 0
        while len(page := await self._store.retired_chunks(retired_before, after=after, limit=RETIRED_PAGE)):
            after = int(page[-1])
            if held is None:  # read the id maps only when there is something to decide
                held = await anyio.to_thread.run_sync(lambda: self._held_by_generations(rows))
            surrogates, up_to = held
            unheld = page[(page > up_to) & ~np.isin(page, surrogates, assume_unique=True)]
            deleted += await self._store.delete_retired_chunks(unheld.tolist(), retired_before)
        if deleted:
            log.info("retired chunk rows deleted", extra={"count": deleted})
        return deleted

    def _build_in_progress(self) -> bool:
        try:
            return any(path.name.startswith(TEMP_PREFIX) for path in self._root.iterdir())
        except FileNotFoundError:
            return False

    def _held_by_generations(self, rows: list[GenerationRow]) -> tuple[npt.NDArray[np.int64], int]:
        """(every surrogate some generation directory holds, a surrogate up to which all count as
        held). A verified generation whose id map is there but cannot be read holds, as far as
        anyone can tell, everything up to its source watermark."""
        verified = {row.id: row for row in rows if row.state == "verified"}
        held: list[npt.NDArray[np.int64]] = []
        up_to = 0
        for name in sorted(set(list_generation_dirs(self._root)) | set(verified)):
            surrogates = self._id_maps.get(name)
            if surrogates is None:
                try:
                    with np.load(self._root / name / ID_MAP_FILE, allow_pickle=False) as data:
                        surrogates = np.asarray(data["surrogate"], dtype=np.int64)
                except FileNotFoundError:
                    continue  # gone, or never complete: it can never be loaded, so it returns nothing
                except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
                    row = verified.get(name)
                    log.warning("cannot read the id map of generation %s: %s", name, exc)
                    if row is not None:
                        up_to = max(up_to, row.source_watermark)
                    continue
                self._id_maps[name] = surrogates  # a generation's files never change
            held.append(surrogates)
        for gone in set(self._id_maps) - set(list_generation_dirs(self._root)):
            del self._id_maps[gone]
        return (np.unique(np.concatenate(held)) if held else np.empty(0, np.int64)), up_to

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        stop = stop_requested()
        task_status.started()
        while not stop.is_set():
            try:
                await self.sweep_once()
            except Exception as exc:  # a store outage: try again next round
                log.warning("sweep failed: %s: %s", type(exc).__name__, exc)
            with anyio.move_on_after(self.settings.interval_s):
                await stop.wait()
