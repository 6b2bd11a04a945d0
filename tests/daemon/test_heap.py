"""daemon/heap.py: once the daemon serves, start-up's objects are frozen out of the collector's
sight and the young generation is collected less often; garbage cycles made after it are still
collected. Run in a fresh interpreter, so the test process's own collector is left alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PROBE = """
import gc, json, weakref
from daemon.heap import YOUNG_THRESHOLD, settle_heap
kept = [{"start-up": i} for i in range(1000)]
settle_heap()
class Node: pass
a, b = Node(), Node()
a.other, b.other = b, a  # a cycle made after settling
gone = weakref.ref(a)
del a, b
gc.collect()
print(json.dumps({
    "frozen": gc.get_freeze_count(),
    "young": gc.get_threshold()[0],
    "expected_young": YOUNG_THRESHOLD,
    "cycle_collected": gone() is None,
}))
"""


def test_settle_heap_freezes_start_up_and_still_collects_later_cycles() -> None:
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True, text=True, cwd=root).stdout
    seen = json.loads(out)
    assert seen["frozen"] >= 1000, "start-up's objects are frozen"
    assert seen["young"] == seen["expected_young"] > 700
    assert seen["cycle_collected"], "a cycle made after settling is still collected"
