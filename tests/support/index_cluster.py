"""Index managers on fakes, for the actor's own tests: a cluster of daemons sharing one
database, one builder lock and one generations directory (the in-memory fakes of
tests/support/fakes.py, pinned to PostgreSQL by the port contract tests), the real embedder over an
in-process provider whose vectors are a pure function of the text, and real FAISS.

Waits on a cluster go through `eventually_async` with `poll=MOCK_SECOND`: trio's MockClock jumps
over each poll, while the deadline is real time, since a worker thread (chunking, a FAISS build)
lets the mock clock run."""

from __future__ import annotations

import hashlib
import itertools
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Self

import anyio
import numpy as np
import numpy.typing as npt

from recalld.actors.embedding.embedder import Embedder, EmbedderSettings
from recalld.actors.embedding.errors import EmbeddingError, Reason
from recalld.actors.embedding.template import render_document
from recalld.actors.index.chunking import chunk_text
from recalld.actors.index.manager import IndexManager
from recalld.actors.index.settings import IndexSettings
from recalld.actors.ports.embedding import ProviderBatch, ProviderInfo
from tests.support.fakes import FakeDatabase, FakeLockServer, FakeRecords, FakeVectorStore
from tests.support.usage_sink import ListSink

MOCK_SECOND = 1.0
"""The poll of a wait on a cluster: one second of trio's mock clock, no real time."""
REAL_S = 20.0
"""The real-time bound of a wait on a cluster."""

DIM = 8
POISON = "POISON"
"""A chunk containing this comes back from the provider as NaN: its record's input is at fault."""


class WordsProvider:
    """An in-process embedding provider: a text's vector is a pure function of the text."""

    def __init__(self) -> None:
        self.down = False
        """Every call fails with `provider_unavailable` while set."""
        self.gate: str | None = None
        """A call with a text containing this waits until `opened` is set."""
        self.opened = anyio.Event()

    def describe(self) -> ProviderInfo:
        return ProviderInfo(provider="test", model="words")

    async def embed(self, texts: Sequence[str], *, timeout: float) -> ProviderBatch:  # noqa: ASYNC109
        await anyio.lowlevel.checkpoint()
        if self.gate is not None and any(self.gate in text for text in texts):
            await self.opened.wait()
        if self.down:
            raise EmbeddingError(Reason.PROVIDER_UNAVAILABLE, "the provider is down")
        return ProviderBatch(vectors=np.stack([vector_of(t) for t in texts]), input_tokens=len(texts))

    async def aclose(self) -> None:
        pass

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        pass


def vector_of(text: str) -> npt.NDArray[np.float32]:
    if POISON in text:
        return np.full(DIM, np.nan, np.float32)
    seed = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


SETTINGS = {"chunk_chars": 200, "chunk_overlap": 20, "index_batch": 4, "poll_s": 2.0, "quiet_s": 1.0}
SETTINGS |= {"hold_s": 600.0, "recheck_s": 1e6}


@dataclass
class Cluster:
    """Daemons sharing one database, one builder lock and one generations directory."""

    root: Path
    db: FakeDatabase = field(default_factory=FakeDatabase)
    locks: FakeLockServer = field(default_factory=FakeLockServer)
    provider: WordsProvider = field(default_factory=WordsProvider)
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def records(self) -> FakeRecords:
        return FakeRecords(self.db)

    @asynccontextmanager
    async def daemon(
        self, store: FakeVectorStore | None = None, *, embedding: EmbedderSettings | None = None, **settings: float
    ) -> AsyncIterator[IndexManager]:
        """An embedder and an index manager running until the block ends (a crash, if it raises)."""
        embedder = Embedder(self.provider, usage=ListSink(), settings=embedding or EmbedderSettings(max_wait_s=0.0))
        lock = self.locks.lock()
        manager = IndexManager(
            store or FakeVectorStore(self.db),
            lock,
            embedder,
            IndexSettings(root=self.root, **{**SETTINGS, **settings}),
            new_generation_id=lambda: f"g{next(self.ids)}",
        )
        try:
            async with anyio.create_task_group() as tasks:
                await tasks.start(embedder.run)
                await tasks.start(manager.run)
                yield manager
                tasks.cancel_scope.cancel()
        finally:
            lock.drop()  # a daemon's lock goes with it, even when it dies


def body(words: int, seed: int) -> str:
    return " ".join(f"w{seed}x{i}" for i in range(words))


def chunks_of(text: str) -> int:
    return len(chunk_text(text, max_chars=int(SETTINGS["chunk_chars"]), overlap=int(SETTINGS["chunk_overlap"])))


def current_generation(manager: IndexManager) -> str | None:
    handle = manager.cell.current()
    return None if handle is None or handle.base is None else handle.base.manifest.generation_id


def live_chunks(cluster: Cluster) -> int:
    return sum(1 for c in cluster.db.chunks.values() if c.retired_at is None)


async def find(manager: IndexManager, text: str, namespace: str = "ns") -> uuid.UUID | None:
    hits, _ = await manager.search(vector_of(text), namespace=namespace, k_records=1)
    return hits[0].record_id if hits else None


def rendered(title: str, text: str) -> str:
    """What the model embeds for a record's first chunk."""
    first = chunk_text(text, max_chars=int(SETTINGS["chunk_chars"]), overlap=int(SETTINGS["chunk_overlap"]))[0]
    return render_document(title, first, version=1).text
