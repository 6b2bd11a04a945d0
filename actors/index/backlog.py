"""What waits to be indexed: records not yet searchable, and the chunks still to embed for them
(what ingest's progress counts)."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping

import anyio

from recalld.actors.index.catch_up import index_chunks
from recalld.actors.index.handle import Handle
from recalld.actors.index.settings import IndexSettings
from recalld.actors.ports.embedding import VectorSpace
from recalld.actors.ports.index import VectorStore

RecordRevision = tuple[uuid.UUID, int]


class ChunkCounts:
    """Each waiting record revision's chunk count, cut as the catch-up cuts it (`index_chunks`),
    counted once in a worker thread and kept while the revision waits."""

    def __init__(self, settings: IndexSettings) -> None:
        self._settings = settings
        self._counts: dict[RecordRevision, tuple[str, int]] = {}
        """(record id, revision) -> (namespace, chunks) of records waiting to be indexed."""
        self._counting = anyio.Lock()

    async def count(
        self,
        store: VectorStore,
        space_key: str,
        namespaces: Collection[str],
        *,
        after: int,
        embedded: Mapping[RecordRevision, int],
    ) -> int:
        """Chunks of the revisions of `namespaces` waiting in `space_key` (changed after mark
        `after`), less the `embedded` ones of each (the batch in flight); 0 once every such
        revision is embedded. Only revisions not counted before have their body read."""
        settings = self._settings
        async with self._counting:  # two callers at once: the second finds the counts made
            known = [pair for pair, (namespace, _) in self._counts.items() if namespace in namespaces]
            bodies = await store.bodies_to_index(
                space_key, settings.chunker, namespaces=namespaces, after=after, known=known
            )
            fresh = [(b.id, b.revision, b.namespace, b.body) for b in bodies if b.body is not None]
            if fresh:
                counts = await anyio.to_thread.run_sync(
                    lambda: [len(index_chunks(body, settings)) for *_, body in fresh]
                )
                for (record_id, revision, namespace, _), count in zip(fresh, counts, strict=True):
                    self._counts[(record_id, revision)] = (namespace, count)
            waiting = {(b.id, b.revision) for b in bodies}
            for pair in known:
                if pair not in waiting:  # indexed, changed or forgotten since: not waiting any more
                    del self._counts[pair]
            counted = {pair: self._counts[pair][1] for pair in waiting}
        return sum(max(0, count - embedded.get(pair, 0)) for pair, count in counted.items())


async def count_waiting(
    store: VectorStore,
    space: VectorSpace | None,
    chunker: str,
    served: Handle | None,
    *,
    after: int,
    namespaces: Collection[str] | None,
    with_held: bool,
) -> int:
    """Live records of `namespaces` (None: all) not yet searchable in `space` through the handle
    `served`: those without vectors changed after mark `after`, the held ones when `with_held`,
    and one more when vectors are stored that the handle has not taken in yet. Without a space,
    every live record waits."""
    if space is None:
        return await store.count_to_index("", chunker, namespaces=namespaces)
    waiting = await store.count_to_index(space.key, chunker, after=after, namespaces=namespaces)
    held = sum((await store.held(space.key, namespaces=namespaces)).by_reason.values()) if with_held else 0
    seen = served.seen if served is not None and served.space_id == space.key else 0
    stored_after = await store.newest_live_surrogate(space.key, namespaces=namespaces) > seen
    return waiting + held + (1 if stored_after else 0)
