"""The title vectors duplicate checks embedded, stored after their answers rather than before.

A check keeps the vectors it embedded in memory at once (`LiveTitles`), so this daemon's next
checks have them; PostgreSQL's copy is for other members of a fleet, for the next start and for
the audit. Storing it inside the check cost a create about 1 ms of its answer on 2 cores (a
statement and a commit: docs/BENCHMARKS.md, "Writes with the duplicate check and indexing").

Whatever is waiting when the writer wakes is stored together: concurrent checks share one
statement and one commit. A vector that cannot be stored (PostgreSQL down, the queue full, the
daemon stopping) is only late: the index manager's catch-up embeds and stores every live title
that has none, and a check that finds a title without one embeds it with its own.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import anyio
import asyncpg
import numpy as np
import numpy.typing as npt

from recalld.actors.ports.embedding import VectorSpace
from recalld.store.db import STORE_DOWN_ERRORS
from recalld.store.duplicates import PgTitleStore

log = logging.getLogger("recalld.duplicates")

QUEUED = 1024
"""Checks' vectors waiting at most; past it a check's are not queued (see the module's docstring)."""

TitleVectors = Sequence[tuple[str, npt.NDArray[np.float32]]]
"""(title key, vector) pairs of one space."""


class TitleVectorWriter:
    """Stores title vectors handed over by `put`, in the background (`run`, a supervised actor).

    Guarantees: `put` never waits and never raises; each vector handed over is stored at most
    once by this writer, after its space is registered; what is waiting when it wakes is stored
    in one statement per space. `stored`, `dropped` and `failed` count vectors."""

    def __init__(self, store: PgTitleStore, *, queued: int = QUEUED) -> None:
        self._store = store
        self._send, self._receive = anyio.create_memory_object_stream[tuple[VectorSpace, TitleVectors]](queued)
        self.stored = 0
        self.dropped = 0
        """Not queued: the queue was full."""
        self.failed = 0
        """Queued, but PostgreSQL refused or could not be reached."""

    def put(self, space: VectorSpace, vectors: TitleVectors) -> None:
        """Queue `vectors` (of `space`) to be stored."""
        if not vectors:
            return
        try:
            self._send.send_nowait((space, vectors))
        except anyio.WouldBlock:
            self.dropped += len(vectors)
            log.warning("title vectors not queued: the queue is full", extra={"event": "title_vectors_dropped"})

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            waiting = [await self._receive.receive()]
            while True:
                try:
                    waiting.append(self._receive.receive_nowait())
                except anyio.WouldBlock:
                    break
            by_space: dict[str, tuple[VectorSpace, dict[str, npt.NDArray[np.float32]]]] = {}
            for space, vectors in waiting:
                by_space.setdefault(space.key, (space, {}))[1].update(vectors)
            for space, merged in by_space.values():
                await self._store_space(space, merged)

    async def _store_space(self, space: VectorSpace, vectors: dict[str, npt.NDArray[np.float32]]) -> None:
        try:
            await self._store.ensure_space(space)  # a title model of its own may have no index manager
            await self._store.store_titles(space.key, list(vectors.items()))
            self.stored += len(vectors)
        except (*STORE_DOWN_ERRORS, asyncpg.PostgresError) as exc:
            self.failed += len(vectors)
            log.warning("title vectors not stored: %s", exc, extra={"event": "title_vectors_failed"})
