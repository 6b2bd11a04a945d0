"""The garbage collector's share of the loop (issue 24).

Under a steady recall load CPython's cyclic collector took 8% of the time the event loop held
the GIL (py-spy, 16 clients): every collection of the oldest generation walks every object the
daemon made at start (the models' graphs, FAISS wrappers, config, modules), and a recall makes
enough short-lived containers to trigger collections many times a second. What start-up made
lives for the process, so once the daemon serves it is moved out of the collector's sight
(`gc.freeze`), and the youngest generation is collected ten times less often: a recall's
garbage is acyclic and freed by reference counting, the collector only finds the rare cycle.
"""

from __future__ import annotations

import gc
from typing import Final

YOUNG_THRESHOLD: Final = 7_000
"""Allocations (less deallocations) between collections of the youngest generation; CPython's
default is 700. Memory held by garbage cycles waits ten times longer, a few MB at most."""


def settle_heap() -> None:
    """Collect once, then freeze every object alive now (never scanned again, never freed:
    start-up's objects live as long as the process) and collect the young generation less often.
    Called once the daemon serves."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
