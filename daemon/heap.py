"""The garbage collector's share of the loop (docs/DESIGN.md, "Nothing stalls the event loop").

Under a steady recall load CPython's cyclic collector took 8% of the time the event loop held
the GIL (py-spy, 16 clients): every collection of the oldest generation walks every object the
daemon made at start (the models' graphs, FAISS wrappers, config, modules), and a recall makes
enough short-lived containers to trigger collections many times a second. So once the daemon
serves, what is alive then is moved out of the collector's sight (`gc.freeze`), and the
youngest generation is collected ten times less often: a recall's garbage is acyclic and freed
by reference counting, the collector only finds the rare cycle.

What freezing costs: most of what start-up made lives as long as the process (modules, config,
the models), but not all of it (the first handle and generation are swapped out later, an actor
that restarts drops its objects). A frozen object is still freed by reference counting once
nothing refers to it; only a frozen object caught in a reference cycle is never freed, since the
collector no longer looks at it. That is memory kept until the process exits, bounded by what
was alive at start; it was not measured.
"""

from __future__ import annotations

import gc
from typing import Final

YOUNG_THRESHOLD: Final = 7_000
"""Allocations (less deallocations) of container objects between collections of the youngest
generation; CPython's default is 700. A garbage cycle made while serving waits for up to this
many before a collection frees it. Not a config key: it tunes the interpreter to this daemon's
allocation pattern (measured in commit 7a804c6), and an operator has nothing to tune it by."""


def settle_heap() -> None:
    """Collect once, then freeze every object alive now (never scanned by the collector again:
    freed by reference counting alone, so a frozen cycle is never freed) and collect the young
    generation less often. Called once the daemon serves."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
