"""The ports of the garbage collector's database work beyond the index: old searches and finished
disputes, deleted past their retention (`recalld.store` implements them)."""

from __future__ import annotations

import datetime as dt
from typing import Protocol


class RetentionStore(Protocol):
    """The search log, kept for `[gc] search_retention_days`."""

    async def delete_searches_before(self, cutoff: dt.datetime) -> int: ...


class DisputeRetention(Protocol):
    async def delete_finished_disputes_before(self, cutoff: dt.datetime) -> int:
        """Disputes in a finished state (resolved, superseded, skipped_unchanged) last changed
        before `cutoff`; pending, in-progress and moderated ones are never deleted."""
        ...
