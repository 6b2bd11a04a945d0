"""The live titles of a namespace and kind, kept in memory in step with PostgreSQL, with their
title vectors as one matrix (`daemon/services/duplicates_rows.py`), so that a duplicate check reads only what
changed since the last one (not 100,000 rows: that read cost a second a check,
bench/NOTES.md) and compares with one matrix product.

In step by change marks, as the index manager's catch-up is (`IndexBacklog.change_mark`): every
record write takes the next `change_seq`; a mark read while no writing transaction is open
bounds what can still commit below it. After reading at mark M, the next read takes the records
of the namespace changed above M (created, retitled, moved to another kind, forgotten) and
applies them; reading a change twice is harmless.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import anyio
import numpy as np
import numpy.typing as npt

from recalld.actors.duplicates.rules import title_key
from recalld.services.duplicates_rows import KindTitles

READ_BATCH = 5000
"""Title vectors read a query (10 MB at 512 dimensions)."""


class LiveTitleSource(Protocol):
    async def change_mark(self) -> int | None: ...

    async def kind_titles(self, namespace: str, kind: str) -> list[tuple[uuid.UUID, str]]:
        """(id, normalised title) of every live record of the namespace and kind, the least
        recently changed first (rows are appended in this order: the newest last)."""
        ...

    async def title_changes(self, namespace: str, after: int) -> list[tuple[uuid.UUID, str, str, bool]]:
        """(id, kind, normalised title, live) of the namespace's records changed above `after`,
        in the order of their changes."""
        ...

    async def vectors(self, space_id: str, keys: Sequence[str], dimension: int) -> dict[str, npt.NDArray[np.float32]]:
        """The stored vectors of these title keys in the space (keys without one are absent)."""
        ...


@dataclass
class _Kept:
    titles: KindTitles = field(default_factory=KindTitles)
    mark: int | None = None
    """Every change at or below it is in `titles`; None: read them all next time."""
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    """One refresh at a time: changes read earlier must not be applied after newer ones."""
    started: int = 0
    """Refreshes begun so far."""
    completed: int = 0
    """The number (in `started`'s count) of the last refresh that completed."""


class LiveTitles:
    """Per (namespace, kind), the live records' normalised titles and title vectors; the
    `capacity` most recently checked ones are kept."""

    def __init__(self, source: LiveTitleSource, capacity: int = 256, read_batch: int = READ_BATCH) -> None:
        self._source = source
        self._capacity = capacity
        self._read_batch = read_batch
        self._kept: OrderedDict[tuple[str, str], _Kept] = OrderedDict()

    def last_count(self, namespace: str, kind: str) -> int | None:
        """How many live titles the namespace and kind had when last read (None: not kept)."""
        kept = self._kept.get((namespace, kind))
        return len(kept.titles) if kept is not None else None

    def waiting(self, namespace: str, kind: str) -> list[str]:
        """The normalised titles that had no vector at the last read, oldest first (no I/O)."""
        kept = self._kept.get((namespace, kind))
        return list(kept.titles.waiting.values()) if kept is not None else []

    async def titles(self, namespace: str, kind: str) -> list[tuple[uuid.UUID, str]]:
        """(id, normalised title) of every live record of the namespace and kind, now."""
        return (await self.kind(namespace, kind)).members()

    async def kind(self, namespace: str, kind: str) -> KindTitles:
        """The namespace's and kind's live titles, brought in step with PostgreSQL now: with
        every change committed before the call, by a refresh that began after it.

        Concurrent checks share refreshes: one that waited for another's refresh, begun after
        it asked, takes that one's titles rather than reading again. Of two records written at
        once, at least one's check still sees the other: each refresh a check uses began after
        its own record was committed."""
        key = (namespace, kind)
        kept = self._kept.pop(key, None) or _Kept()
        self._kept[key] = kept
        while len(self._kept) > self._capacity:
            self._kept.popitem(last=False)
        asked = kept.started
        async with kept.lock:
            if kept.completed > asked:
                return kept.titles
            kept.started += 1
            number = kept.started
            mark = await self._source.change_mark()  # before reading: what commits later is read again
            if kept.mark is None:
                # A full read is reconciled into the titles kept, not read into new ones: while
                # writes go on (a bulk ingest) no mark may settle for a while, and every vector
                # read so far would be thrown away and read again at each check.
                members = await self._source.kind_titles(namespace, kind)
                for record_id, norm in members:
                    kept.titles.put(record_id, norm)
                now = {record_id for record_id, _ in members}
                for record_id, _ in kept.titles.members():
                    if record_id not in now:
                        kept.titles.remove(record_id)
            else:
                for record_id, record_kind, norm, live in await self._source.title_changes(namespace, kept.mark):
                    if live and record_kind == kind:
                        kept.titles.put(record_id, norm)
                    else:
                        kept.titles.remove(record_id)
            if mark is not None:
                kept.mark = mark
            # else: a writing transaction was open; the old mark (or a full read) stays the bound
            kept.completed = number
        return kept.titles

    async def read_vectors(
        self,
        namespace: str,
        kind: str,
        titles: KindTitles,
        space_id: str,
        dimension: int,
        *,
        until: float | None = None,
        skip: Collection[str] = (),
        found: Mapping[str, npt.NDArray[np.float32]] | None = None,
    ) -> list[str]:
        """Read the stored vectors of `space_id` for the titles of `titles` (what `kind()`
        returned) that have none yet, `read_batch` titles a query; past `until` (anyio's clock)
        no further batch is started, and the titles left wait for the next check (`compared` <
        `of` says so). The first check after a start reads every vector of its kind: with
        100,000 titles seconds on a loaded machine, more than the time cap allows.

        Titles in `skip` (being embedded already) are not looked up, nor those `found` has
        vectors for (embedded a moment ago, not stored yet), which are taken. Returns the normalised
        titles looked up and found with no stored vector (written a moment ago, before the index
        manager embedded them), oldest row first; titles left unread for `until` are not among
        them."""
        kept = self._kept.get((namespace, kind))
        lock = kept.lock if kept is not None and kept.titles is titles else anyio.Lock()
        unstored: list[str] = []
        async with lock:
            titles.use_space(space_id, dimension)
            if found:
                titles.fill(found.get)
            waiting = [norm for norm in titles.waiting.values() if norm not in skip]
            for start in range(0, len(waiting), self._read_batch):
                if start and until is not None and anyio.current_time() >= until:
                    break
                part = waiting[start : start + self._read_batch]
                keys = {title_key(norm): norm for norm in part}
                found = await self._source.vectors(space_id, list(keys), dimension)
                by_norm = {keys[key]: vector for key, vector in found.items()}
                titles.fill(by_norm.get)
                unstored += [norm for norm in part if norm not in by_norm]
        return unstored
