"""The live titles of a namespace and kind, kept in memory in step with PostgreSQL, so that a
duplicate check reads only what changed since the last one (not 100,000 rows: that read cost a
second a check, docs/BENCHMARKS.md).

In step by change marks, as the index manager's catch-up is (`IndexBacklog.change_mark`): every
record write takes the next `change_seq`; a mark read while no writing transaction is open
bounds what can still commit below it. After reading at mark M, the next read takes the records
of the namespace changed above M (created, retitled, moved to another kind, forgotten) and
applies them; reading a change twice is harmless.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Protocol


class LiveTitleSource(Protocol):
    async def change_mark(self) -> int | None: ...

    async def kind_titles(self, namespace: str, kind: str) -> list[tuple[uuid.UUID, str]]:
        """(id, normalised title) of every live record of the namespace and kind."""
        ...

    async def title_changes(self, namespace: str, after: int) -> list[tuple[uuid.UUID, str, str, bool]]:
        """(id, kind, normalised title, live) of the namespace's records changed above `after`."""
        ...


@dataclass
class _Titles:
    members: dict[uuid.UUID, str] = field(default_factory=dict)
    mark: int | None = None
    """Every change at or below it is in `members`; None: read them all next time."""


class LiveTitles:
    """Per (namespace, kind), the live records' normalised titles; the `capacity` most recently
    checked ones are kept."""

    def __init__(self, source: LiveTitleSource, capacity: int = 256) -> None:
        self._source = source
        self._capacity = capacity
        self._kept: OrderedDict[tuple[str, str], _Titles] = OrderedDict()

    async def titles(self, namespace: str, kind: str) -> list[tuple[uuid.UUID, str]]:
        """(id, normalised title) of every live record of the namespace and kind, now."""
        key = (namespace, kind)
        kept = self._kept.pop(key, None) or _Titles()
        self._kept[key] = kept
        while len(self._kept) > self._capacity:
            self._kept.popitem(last=False)
        mark = await self._source.change_mark()  # before reading: what commits later is read again
        if kept.mark is None:
            kept.members = dict(await self._source.kind_titles(namespace, kind))
        else:
            for record_id, record_kind, norm, live in await self._source.title_changes(namespace, kept.mark):
                if live and record_kind == kind:
                    kept.members[record_id] = norm
                else:
                    kept.members.pop(record_id, None)
        if mark is not None:
            kept.mark = mark
        # else: a writing transaction was open; the old mark (or a full read) stays the bound
        return list(kept.members.items())
