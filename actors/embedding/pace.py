"""How many texts one provider call for bulk work carries. Pure: no I/O, no clock.

A query waits behind at most the provider call in flight (`recalld.actors.embedding.dispatch`), so what
one bulk call (indexing) costs is what indexing can add to a query's time. The provider's speed
is not known in advance and changes with the machine's load, so it is measured: every bulk call
reports its texts and seconds, and the next call carries as many texts as the provider took
`target_s` for lately.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import anyio

from recalld.actors.ports.usage import Purpose

QUERY_LANE: Final = 0
"""Queries (and the probe): a person or a program waits for the answer."""
CHECK_LANE: Final = 1
"""Duplicate checks and evaluation runs: a caller waits, but a query goes first."""
BULK_LANE: Final = 2
"""Indexing: the catch-up has no caller waiting; it takes what the others leave."""
LANES: Final = 3

_LANE_OF: Final[dict[str, int]] = {
    "query": QUERY_LANE,
    "probe": QUERY_LANE,
    "dedupe": CHECK_LANE,
    "eval": CHECK_LANE,
    "index": BULK_LANE,
}


def lane_of(purpose: Purpose) -> int:
    """The embedder's mailbox lane for a purpose: earlier lanes are served first."""
    return _LANE_OF[purpose]


class BulkPace:
    """Texts per bulk provider call: as many as the provider took `target_s` for lately, between
    1 and `max_batch`.

    The cost of a text is an exponentially weighted mean of the calls observed (seconds per
    text, the call's fixed overhead included, so small calls overestimate it and the batch errs
    small). Before any observation a call carries one text: the first call measures.
    """

    def __init__(self, target_s: float, max_batch: int, *, smoothing: float = 0.3) -> None:
        if target_s <= 0 or max_batch < 1 or not 0 < smoothing <= 1:
            raise ValueError("target_s > 0, max_batch >= 1 and 0 < smoothing <= 1 are needed")
        self.target_s = target_s
        self.max_batch = max_batch
        self._smoothing = smoothing
        self.per_text_s: float | None = None
        """Seconds a text costs lately; None before the first observation."""

    def observe(self, texts: int, seconds: float) -> None:
        """A bulk call of `texts` texts took `seconds` (answered or timed out)."""
        if texts < 1 or not math.isfinite(seconds) or seconds < 0:
            return
        cost = seconds / texts
        previous = self.per_text_s
        self.per_text_s = cost if previous is None else previous + self._smoothing * (cost - previous)

    @property
    def batch(self) -> int:
        """Texts the next bulk call may carry."""
        if self.per_text_s is None:
            return 1
        if self.per_text_s <= 0:
            return self.max_batch
        return max(1, min(self.max_batch, int(self.target_s / self.per_text_s)))


class Foreground:
    """Work a caller is waiting for now, counted by who holds it, so that background embedding
    (indexing) can make room for it: on a machine of few cores an indexing call takes every core
    the model may use, and a duplicate check, a query or a write running beside it took several
    times as long (docs/BENCHMARKS.md, "Writes with the duplicate check and indexing").

    One per daemon, shared by its embedders. Each embedder holds it, as its own owner, for its
    queries and duplicate checks while they wait; work outside an embedder (a check reading
    titles, a record's write) holds it with no owner. `waiting(apart_from=e)` is what embedder
    `e`'s indexing makes room for: everyone's holds but `e`'s own (its own queries are served
    before its indexing anyway, by lane, and waiting would only delay them). Event-loop only."""

    def __init__(self) -> None:
        self._held: dict[object, int] = {}
        self._total = 0
        self._changed: anyio.Event | None = None

    @contextmanager
    def hold(self, owner: object = None) -> Iterator[None]:
        """Count as foreground work of `owner` until the block ends."""
        self._change(owner, 1)
        try:
            yield
        finally:
            self._change(owner, -1)

    def waiting(self, *, apart_from: object) -> int:
        """Holds now, `apart_from`'s own left out."""
        return self._total - self._held.get(apart_from, 0)

    def holding(self, owner: object) -> int:
        """`owner`'s own holds now."""
        return self._held.get(owner, 0)

    async def changed(self) -> None:
        """Until the next hold starts or ends."""
        if self._changed is None:
            self._changed = anyio.Event()
        await self._changed.wait()

    def _change(self, owner: object, delta: int) -> None:
        count = self._held.get(owner, 0) + delta
        if count:
            self._held[owner] = count
        else:
            self._held.pop(owner, None)
        self._total += delta
        if self._changed is not None:
            self._changed.set()
            self._changed = None
