"""daemon/heap.py: once the daemon serves, what is alive is frozen out of the collector's sight
and the young generation is collected less often; a frozen object is still freed by reference
counting, and a garbage cycle made after settling is still collected by the collector's own
schedule (no explicit collection). Run in a fresh interpreter, so the test process's own
collector is left alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PROBE = """
import gc, json, weakref
from recalld.heap import YOUNG_THRESHOLD, settle_heap
class Node: pass
start_up = [Node() for _ in range(1000)]
dropped = Node()  # alive at start, dropped later (a swapped-out handle)
start_up_cycle = Node()
start_up_cycle.other = start_up_cycle
settle_heap()
tracked = {id(o) for o in gc.get_objects()}  # the collector's generations, not the frozen ones
frozen = sum(id(o) not in tracked for o in start_up)
dropped_ref = weakref.ref(dropped)
del dropped  # no collection: reference counting alone
frozen_cycle = weakref.ref(start_up_cycle)
del start_up_cycle
a, b = Node(), Node()
a.other, b.other = b, a  # a cycle made after settling
gone = weakref.ref(a)
del a, b
kept, allocations = [], 0
while gone() is not None and allocations < 100 * YOUNG_THRESHOLD:
    kept.append([])  # net container allocations, as a serving daemon makes them
    allocations += 1
collected_on_schedule = gone() is None
gc.collect()  # even a full collection leaves the frozen cycle
print(json.dumps({
    "frozen": frozen,
    "young": gc.get_threshold()[0],
    "expected_young": YOUNG_THRESHOLD,
    "dropped_freed": dropped_ref() is None,
    "cycle_collected": collected_on_schedule,
    "allocations": allocations,
    "frozen_cycle_kept": frozen_cycle() is not None,
}))
"""


def test_settle_heap_freezes_what_is_alive_and_still_collects_later_cycles() -> None:
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True, text=True, cwd=root).stdout
    seen = json.loads(out)
    assert seen["frozen"] == 1000, "every object alive when settling is out of the collector's sight"
    assert seen["young"] == seen["expected_young"] > 700
    assert seen["dropped_freed"], "a frozen object is still freed by reference counting"
    assert seen["cycle_collected"], "a cycle made after settling is collected without an explicit collection"
    assert seen["allocations"] >= seen["expected_young"] // 2, "the young generation is collected less often"
    assert seen["frozen_cycle_kept"], "a frozen cycle is never freed (the cost heap.py states)"
