"""Where a vector search runs: on the event loop, or in a worker thread (docs/DESIGN.md, "Nothing
stalls the event loop").

A worker thread's round trip costs the loop CPU (handing the call over, waking the loop, and the
GIL passed back and forth while the loop serves other requests): on the 8,000-passage bench at
16 clients, searches of up to 2 ms run on the loop cost the daemon 2.50 ms of CPU a recall
against 2.87 ms with every search in a thread (a search there costs 0.7-1.5 ms of CPU, p10 to
p99, the raw FAISS call on the same file 0.2 ms at the median: bench/recall.py). A search that
costs more must not stall every other request for longer, so it goes to a thread.

Two rules decide, in order:

- Only an ordinary search may run on the loop at all (`ordinary_search`): unfiltered (no
  `within` records), answered by FAISS's own top-k search (an HNSW walk or a flat scan) rather
  than by scoring a namespace's vectors one by one, and for at most `INLINE_MAX_K_RECORDS`
  records. A filtered search, a small HNSW namespace scored exactly, a large k or an over-fetch
  round always runs in a thread: their cost is not what the handle's ordinary searches
  measured (an exact scan of up to `[recall] exact_filter_max_records` records and their
  chunks, say), and judged by that estimate they could hold the loop far beyond the bound.
- An ordinary search runs on the loop while this handle's ordinary searches measured cheap
  (`SearchPlacement`). A search on the loop is measured by wall time, exactly how long the loop
  was held: generations are memory-mapped, so a page fault's disk wait, or waiting to take the
  GIL back after FAISS released it, holds the loop without costing CPU. A search in a worker
  thread is measured by its thread's CPU time, which the GIL waits of a loaded machine do not
  inflate (otherwise a loaded daemon would read its searches as slow and keep them in threads,
  where they are slower still); a cold page read there is not counted, and shows at the search's
  first run on the loop, which then sends the next ones back to threads.

The decisions are pure and read no clock; `placed` runs a search where they decide and reports
what it cost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Final, Protocol, TypeVar

import anyio.to_thread

T = TypeVar("T")

INLINE_MAX_S: Final = 0.002
"""A search runs on the loop while this handle's recent ordinary searches cost at most this long:
the loop is held about this long by one search at most. Not a config key: it is the daemon's own
budget for holding its loop (every other request waits that long), not a property of a
deployment; a slower disk or machine is already measured by the estimate. Chosen by
bench/recall_probe.py (fd68a9b): at 0.5 ms no search of the 8,000-passage bench ran on the loop."""

DECAY: Final = 0.9
"""How fast a costly search is forgotten: the estimate is the latest cost or this share of the
one before, whichever is larger. After one search of 5 ms the next 9 searches run in threads
(5 ms x 0.9^9 = 1.9 ms, under the 2 ms bound), so a handle whose searches are sometimes slow stays
off the loop, while one slow search of a cheap handle (a cold page) is not held against it for
long. Not a config key: it trades how often a slow handle is retried on the loop against how long
a fast one waits, and no deployment knows better than this measured default."""

INLINE_MAX_K_RECORDS: Final = 100
"""An ordinary search asks for at most this many records. The vector route asks for
max([recall] vector_candidates, k) records (30 by default), 4x more at each over-fetch round; up
to 100 records an HNSW search's first fetch (2 x k vectors) fits the default beam of 200, so the
walk costs what the handle's ordinary searches measured. A larger search widens the beam and
turns more rows into hits. Not a config key: it bounds which searches the estimate describes,
and a deployment that asks for more records still gets them, from a worker thread."""


class VectorPart(Protocol):
    """What `scored_exactly` reads of a handle's part (`recalld.actors.index.vectors.VectorSet`)."""

    def first_fetch(self, namespace: str, k_records: int, *, exact: bool = False) -> int: ...
    def scored_exactly(self, namespace: str, k: int) -> bool: ...


def scored_exactly(parts: Iterable[VectorPart | None], namespace: str, k_records: int) -> bool:
    """Whether an unfiltered search of `namespace` for `k_records` records scores some part's
    vectors one by one (an HNSW namespace of at most `EXACT_NAMESPACE_MAX` vectors) at its first
    fetch. None parts (a handle without a base) are skipped."""
    return any(
        part.scored_exactly(namespace, part.first_fetch(namespace, k_records)) for part in parts if part is not None
    )


def ordinary_search(*, exact: bool, k_records: int) -> bool:
    """Whether a search may run on the loop at all: not scored `exact`ly (a search `within`
    records, or a namespace `scored_exactly`), and for at most `INLINE_MAX_K_RECORDS` records."""
    return not exact and k_records <= INLINE_MAX_K_RECORDS


class SearchPlacement:
    """Decides, per ordinary search, whether it may run on the event loop.

    Guarantees: a handle's first search runs in a thread (nothing is known of its cost); a
    search runs on the loop only while the estimate for the same handle is at most `inline_max_s`;
    the estimate never falls below the latest search's cost, so one search over the bound sends
    the next ones to threads at once. A new handle (a new generation or delta) starts unknown.
    """

    def __init__(self, inline_max_s: float = INLINE_MAX_S, decay: float = DECAY) -> None:
        if not 0 <= decay < 1:
            raise ValueError("decay must be in [0, 1)")
        self._inline_max_s = inline_max_s
        self._decay = decay
        self._handle: object = None
        self._estimate: float | None = None
        # Worker threads report concurrently; a lost costly report would keep searches inline.
        self._lock = threading.Lock()

    def inline(self, handle: object) -> bool:
        """Whether the next ordinary search of `handle` may run on the loop."""
        return handle is self._handle and self._estimate is not None and self._estimate <= self._inline_max_s

    def observe(self, handle: object, cost_s: float) -> None:
        """An ordinary search of `handle` cost `cost_s` seconds (`placed` says how measured)."""
        with self._lock:
            if handle is not self._handle:
                self._handle, self._estimate = handle, None
            previous = self._estimate
            self._estimate = cost_s if previous is None else max(cost_s, previous * self._decay)

    @property
    def estimate_s(self) -> float | None:
        """The current handle's estimated search cost; None before its first search."""
        return self._estimate


async def placed(placement: SearchPlacement, handle: object, search: Callable[[], T], *, ordinary: bool) -> T:
    """Run `search` of `handle` on the loop or in a worker thread (not abandoned on cancel: the
    caller's lease must outlive it), and report an ordinary search's cost to `placement`. A search
    that is not `ordinary` always runs in a thread and is not reported: its cost says nothing of
    the ordinary ones."""
    if not ordinary:
        return await anyio.to_thread.run_sync(search)
    if placement.inline(handle):
        started = time.perf_counter()
        found = search()
        # Wall time: how long the loop was held, page faults and GIL waits included.
        placement.observe(handle, time.perf_counter() - started)
        return found

    def in_thread() -> T:
        started = time.thread_time()
        found = search()
        # The thread's own CPU: a GIL wait in a worker thread is not the search's cost.
        placement.observe(handle, time.thread_time() - started)
        return found

    return await anyio.to_thread.run_sync(in_thread)
