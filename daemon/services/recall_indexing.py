"""How far the vector route is behind in a namespace, as recall asks it on every request.

Counting the records a namespace still waits for takes a few queries, so a count is kept for
`ttl_s` and a recall reads it from memory; the first recall after it expires counts again (one at
a time per namespace: the others read the count being replaced).
"""

from __future__ import annotations

import logging

import anyio

from recalld.actors.index.manager import IndexManager
from recalld.store.db import STORE_DOWN_ERRORS

log = logging.getLogger("recalld.recall")

# Namespaces whose counts are kept; beyond this the oldest are forgotten (and counted again).
MAX_NAMESPACES = 1024


class IndexingStatus:
    """Per namespace: live records the vector route cannot find yet (`IndexManager.count_unsearchable`),
    at most `ttl_s` old. A store that does not answer counts as nothing pending: full text, which
    needs the store too, will say so."""

    def __init__(self, index: IndexManager, *, ttl_s: float = 1.0) -> None:
        self._index = index
        self._ttl_s = ttl_s
        self._counts: dict[str, tuple[int, float]] = {}
        self._counting: set[str] = set()

    async def pending(self, namespace: str) -> int:
        now = anyio.current_time()
        known = self._counts.get(namespace)
        if known is not None and (now - known[1] < self._ttl_s or namespace in self._counting):
            return known[0]
        self._counting.add(namespace)
        try:
            count = await self._index.count_unsearchable([namespace])
        except STORE_DOWN_ERRORS as exc:
            log.debug("pending records not counted: %s", type(exc).__name__)
            return known[0] if known is not None else 0
        finally:
            self._counting.discard(namespace)
        if len(self._counts) >= MAX_NAMESPACES and namespace not in self._counts:
            self._counts.pop(next(iter(self._counts)))
        self._counts[namespace] = (count, anyio.current_time())
        return count

    def written(self, namespace: str) -> None:
        """A record of `namespace` was written through this daemon: a kept count of 0 no longer
        holds (the write waits to be indexed), so the next recall counts again, and one asked
        straight after a write says the route is partial. A count above 0 is kept: it says so
        already, and recounting after every write of a burst would cost a count per recall."""
        known = self._counts.get(namespace)
        if known is not None and known[0] == 0:
            del self._counts[namespace]
