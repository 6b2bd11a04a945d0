"""Where a vector search runs: on the event loop, or in a worker thread (issue 24).

A worker thread's round trip costs the loop CPU (handing the call over, waking the loop, and the
GIL passed back and forth while the loop serves other requests): on the 8,000-passage bench at
16 clients, searches of up to 2 ms run on the loop cost the daemon 2.50 ms of CPU a recall
against 2.87 ms with every search in a thread (a search there costs 0.7-1.5 ms of CPU, p10 to
p99, the raw FAISS call on the same file 0.2 ms at the median: bench/recall.py). A search that costs more (a large
generation, an exact scan, a wide beam) must not stall every other request for longer, so it
goes to a thread. The choice rests on what this handle's searches measured: their own thread
CPU time, which a GIL wait or a busy machine does not inflate (otherwise a loaded daemon would
read its searches as slow and keep them in threads, where they are slower still).

The decision (`SearchPlacement`) is pure and reads no clock; `placed` runs a search where it
decides and reports what the search cost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final, TypeVar

import anyio.to_thread

T = TypeVar("T")

INLINE_MAX_S: Final = 0.002
"""A search runs on the loop while this handle's recent searches cost at most this much CPU: the
loop is held at most about this long by one search."""

DECAY: Final = 0.9
"""How fast a costly search is forgotten: the estimate is the latest cost or this share of the
one before, whichever is larger. One search of 5 ms keeps searches in threads for about 22
searches, so a handle whose searches are sometimes slow (an over-fetch, a wide filter) stays off
the loop, while one slow search of a cheap handle (a cold page) is not held against it for long."""


class SearchPlacement:
    """Decides, per search, whether it may run on the event loop.

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
        """Whether the next search of `handle` may run on the loop."""
        return handle is self._handle and self._estimate is not None and self._estimate <= self._inline_max_s

    def observe(self, handle: object, cpu_s: float) -> None:
        """A search of `handle` cost `cpu_s` seconds of its thread's CPU."""
        with self._lock:
            if handle is not self._handle:
                self._handle, self._estimate = handle, None
            previous = self._estimate
            self._estimate = cpu_s if previous is None else max(cpu_s, previous * self._decay)

    @property
    def estimate_s(self) -> float | None:
        """The current handle's estimated search cost; None before its first search."""
        return self._estimate


async def placed(placement: SearchPlacement, handle: object, search: Callable[[], T]) -> T:
    """Run `search` of `handle` on the loop or in a worker thread (not abandoned on cancel: the
    caller's lease must outlive it), as `placement` decides, and report its cost."""

    def measured() -> T:
        started = time.thread_time()
        found = search()
        # The thread's own CPU: a GIL wait in a worker thread is not the search's cost.
        placement.observe(handle, time.thread_time() - started)
        return found

    if placement.inline(handle):
        return measured()
    return await anyio.to_thread.run_sync(measured)
