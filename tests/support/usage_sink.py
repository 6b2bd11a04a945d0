"""Usage sinks for the embedder's `UsageSink` port: one that keeps what the embedder meters in a
list, one that drops it."""

from __future__ import annotations

from collections.abc import Sequence

from recalld.actors.ports.usage import UsageRow


class ListSink:
    def __init__(self) -> None:
        self.rows: list[UsageRow] = []
        self.writes = 0
        """Calls of `record`: the batches the embedder handed over."""

    async def record(self, rows: Sequence[UsageRow]) -> None:
        self.rows.extend(rows)
        self.writes += 1

    def work(self) -> list[UsageRow]:
        """The rows of real work, the breaker's probes left out."""
        return [r for r in self.rows if r.purpose != "probe"]


class NoSink:
    """Drops what the embedder meters: for tests about something else."""

    async def record(self, rows: Sequence[UsageRow]) -> None:
        pass
