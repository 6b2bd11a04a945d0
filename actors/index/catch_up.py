"""Catching up (the builder only): chunk, embed and store the live records that have no vectors
in the current space yet, setting aside those whose input the provider will not embed."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import anyio
import numpy as np

from recalld.actors.embedding.embedder import Embedder, EmbedResult
from recalld.actors.embedding.errors import EmbeddingError, Reason
from recalld.actors.index.chunking import chunk_text
from recalld.actors.index.settings import IndexSettings
from recalld.actors.ports.embedding import VectorSpace
from recalld.actors.ports.index import IndexBacklog, IndexHolds, RecordToIndex

log = logging.getLogger("recalld.index")

# Failures that are the input's, not the provider's: the provider refused the text, or answered
# it with a vector validation rejects (the embedder fails only the caller whose row it was).
INPUT_FAULTS = frozenset(
    {Reason.INPUT_REJECTED, Reason.EMBEDDING_NOT_FINITE, Reason.EMBEDDING_ZERO_VECTOR, Reason.EMBEDDING_NOT_NORMALIZED}
)
HOLD_LONGEST_S = 86_400.0
"""A held record is tried again at least once a day."""

# While a large backlog is indexed the planner's statistics describe the tables as they were when
# last taken, and both the catch-up's own query and recall's full text then get plans that scan
# what an index would have found (which tables, and what each cost: the PostgreSQL store's
# `PLANNED_AS_THEY_GROW`). The builder refreshes them as the indexed records grow.
STATISTICS_GROWTH = 0.2
STATISTICS_MIN_ROWS = 500


def records_to_hold(
    failures: list[tuple[RecordToIndex, EmbeddingError]], *, embedded: int
) -> list[tuple[RecordToIndex, EmbeddingError]]:
    """Which failed records of a batch to set aside: those whose own input failed, unless no
    record of the batch was embedded and either two or more failed that way or another failed
    for the provider's sake. Then the batch says more about the provider (a broken deployment
    refuses everything, and its circuit opens) than about the inputs, and holding them would
    set aside, one pass after another, every record a broken provider was asked for."""
    by_input = [(record, error) for record, error in failures if error.reason in INPUT_FAULTS]
    if embedded == 0 and (len(by_input) > 1 or len(by_input) < len(failures)):
        return []
    return by_input


def index_chunks(body: str, settings: IndexSettings) -> list[str]:
    """The chunks of `body` the index embeds and stores, in order: cut by the settings' chunker,
    a chunk that repeats an earlier one of the body word for word kept once."""
    # (A body of one sentence repeated made thousands of identical vectors, which an HNSW graph
    # cannot keep reachable: a repeat adds nothing to find the record by.)
    return list(dict.fromkeys(chunk_text(body, max_chars=settings.chunk_chars, overlap=settings.chunk_overlap)))


@dataclass(frozen=True, slots=True)
class _Chunks:
    """One record's chunks as the catch-up stores them, in chunk order."""

    texts: list[str]
    inputs: list[str]
    """What the model embeds for each chunk (the rendered template)."""
    hashes: list[str]


class _TextBudget:
    """Texts the catch-up may have waiting in the embedder at once; a taker waits for room.

    A taker that finds room takes it without yielding, so a batch's records all queue their
    texts in one pass of the event loop and the embedder's next provider call carries as many as
    its pace allows. (Behind a lock, handed from task to task once per pass of the loop, they
    queued one at a time while the calls went out: a catch-up of 4,000 records made 869 provider
    calls of 2 to 13 texts each.)
    """

    def __init__(self, size: int) -> None:
        self._free = size
        self._room = anyio.Event()

    @contextlib.asynccontextmanager
    async def taking(self, count: int) -> AsyncIterator[None]:
        while self._free < count:
            await self._room.wait()
        self._free -= count  # no await since the check: nobody took the room in between
        try:
            yield
        finally:
            self._free += count
            # Every waiter checks again; a later one waits on a fresh event.
            self._room.set()
            self._room = anyio.Event()


class CatchUpStore(IndexBacklog, IndexHolds, Protocol):
    """What the catch-up reads and writes: the backlog, and the holds it sets."""


class CatchUp:
    """Makes every live record searchable in a space, durably and once.

    Guarantees: a record's chunks and vectors are stored in one transaction with its batch, so a
    pass cut short (provider trouble, cancellation, a crash) loses no stored work and the next
    pass resumes behind it; nothing already stored is embedded again. A record whose own input
    the provider refuses is held (`records_to_hold`, `IndexSettings.hold_s`) and never blocks
    its batch-mates. The event loop is never held up by a large record: chunking runs in a
    worker thread and embedding goes a slice at a time.
    """

    def __init__(self, store: CatchUpStore, embedder: Embedder, settings: IndexSettings) -> None:
        self._store = store
        self._embedder = embedder
        self._settings = settings
        self.indexed_records = 0
        """Records stored by this daemon since it started."""
        self.stored_vectors = 0
        self._analysed_at = 0
        """`indexed_records` when the planner's statistics were last refreshed."""
        self._embedded: dict[tuple[uuid.UUID, int], int] = {}
        """Chunks of the batch in flight whose vectors have come back, by (record id, revision)."""

    def embedded_chunks(self) -> Mapping[tuple[uuid.UUID, int], int]:
        """How many chunks of each record (id, revision) of the batch being embedded have their
        vectors already, not stored yet: progress within a batch, which may take minutes when
        a record is large. Empty between batches; a record's entry goes once its batch is
        stored (and the record no longer waits), whatever became of it."""
        return dict(self._embedded)

    async def run(
        self, space: VectorSpace, *, after: int = 0, holding: Callable[[], bool] = lambda: True
    ) -> str | None:
        """Chunk, embed and store every live record that has no vectors in `space` yet; the
        provider's trouble that ended the pass early, if any, as `reason: message`.

        One pass walks the records in change order behind a cursor, a batch at a time: one
        embedder call per record (the embedder merges them into provider calls and meters them
        per namespace), one store transaction per batch. A record whose input the provider
        refuses is set aside (`records_to_hold`, `hold_s`) and its batch-mates are stored;
        provider trouble ends the pass after storing what was embedded, and the next step
        resumes it. `holding()` is asked before each batch: once it says the builder lock is
        lost, the pass ends, and the new holder embeds what is left (a batch is embedded twice
        at most: the one in flight when the lock went).
        """
        settings = self._settings
        cursor = after
        while True:
            if not holding():
                log.warning("the builder lock was lost: the catch-up stops here")
                return None
            if self.indexed_records - self._analysed_at >= max(
                STATISTICS_MIN_ROWS, STATISTICS_GROWTH * self._analysed_at
            ):
                await self._store.refresh_statistics()
                self._analysed_at = self.indexed_records
            batch = await self._store.records_to_index(space.key, settings.chunker, settings.index_batch, after=cursor)
            if not batch:
                return None
            cursor = batch[-1].change_seq
            # A body may be megabytes: cutting, rendering and hashing its thousands of chunks is
            # CPU work that must not hold up the event loop (and with it /livez and the watchdog).
            prepared = await anyio.to_thread.run_sync(self._prepare, batch)
            try:
                outcomes = await self._embed_records(batch, prepared)
                if any(isinstance(o, EmbedResult) and o.space.key != space.key for o in outcomes):
                    return None  # the space changed under us; the next step starts over
                embedded = [
                    (record, chunks, outcome.vectors)
                    for record, chunks, outcome in zip(batch, prepared, outcomes, strict=True)
                    if isinstance(outcome, EmbedResult)
                ]
                failures = [(r, o) for r, o in zip(batch, outcomes, strict=True) if isinstance(o, EmbeddingError)]
                refused = records_to_hold(failures, embedded=len(embedded))
                if embedded:
                    items = [(r, c.texts, c.hashes, v) for r, c, v in embedded]
                    self.stored_vectors += await self._store.store_batch(space.key, settings.chunker, items)
                    self.indexed_records += len(embedded)
                if refused:
                    holds = [(record.id, record.revision, error.reason.value) for record, error in refused]
                    await self._store.hold(space.key, holds, first_s=settings.hold_s, longest_s=HOLD_LONGEST_S)
                    for record, error in refused:
                        log.warning(
                            "record set aside: the provider will not embed its input",
                            extra={"record": str(record.id), "revision": record.revision, "reason": error.reason.value},
                        )
                held = {record.id for record, _ in refused}
                trouble = [error for record, error in failures if record.id not in held]
                if trouble:
                    return f"{trouble[0].reason}: {trouble[0]}"  # provider trouble: the next step tries again
            finally:
                self._embedded.clear()  # stored, held or given up: none of it is in flight now

    def _prepare(self, batch: list[RecordToIndex]) -> list[_Chunks]:
        """Blocking (a worker thread): each record's chunks, their model inputs and digests."""
        render, settings = self._embedder.render_document, self._settings
        prepared = []
        for record in batch:
            texts = index_chunks(record.body, settings)
            prepared.append(
                _Chunks(
                    texts=texts,
                    inputs=[render(record.title, text).text for text in texts],
                    hashes=[hashlib.sha256(text.encode()).hexdigest() for text in texts],
                )
            )
        return prepared

    async def _embed_records(
        self, batch: list[RecordToIndex], prepared: list[_Chunks]
    ) -> list[EmbedResult | EmbeddingError]:
        """One embedder call per record and slice of its chunks, all records at once: a failure
        is that record's alone.

        A record's slices go one after another, each with the embedder's own deadline, and only
        what the provider takes in two rounds waits in the embedder: a record of thousands of
        chunks takes as long as it takes without any call running out of time (as one call for
        all of them did, on every pass, forever), and a query never waits behind a whole record.
        """
        embedder = self._embedder
        step = embedder.settings.max_batch
        # Two provider rounds of texts in the embedder's queue at most: one call running, the
        # next one filling. More would only wait there, past their deadline, and keep queries
        # waiting behind them.
        queued = _TextBudget(2 * step * max(1, embedder.info.max_concurrency))
        outcomes: dict[int, EmbedResult | EmbeddingError] = {}

        async def embed(position: int) -> None:
            inputs = prepared[position].inputs
            namespace = batch[position].namespace
            key = (batch[position].id, batch[position].revision)
            parts: list[EmbedResult] = []
            try:
                # At least one call, as before, whatever the chunker returns.
                for start in range(0, max(len(inputs), 1), step):
                    texts = inputs[start : start + step]
                    async with queued.taking(len(texts)):
                        part = await embedder.embed(texts, purpose="index", namespace=namespace)
                    if parts and part.space.key != parts[0].space.key:
                        outcomes[position] = part  # the space changed mid-record: the caller starts over
                        return
                    parts.append(part)
                    self._embedded[key] = self._embedded.get(key, 0) + len(texts)
            except EmbeddingError as error:
                outcomes[position] = error
                return
            vectors = parts[0].vectors if len(parts) == 1 else np.concatenate([p.vectors for p in parts])
            outcomes[position] = EmbedResult(vectors, parts[0].space)

        async with anyio.create_task_group() as tasks:
            for position in range(len(batch)):
                tasks.start_soon(embed, position)
        return [outcomes[position] for position in range(len(batch))]
