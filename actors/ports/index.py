"""The ports of the vector index: the store of chunks, vectors and generations
(`recalld.store.vectors` implements them) and the builder lock."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple, Protocol

import msgspec
import numpy as np
import numpy.typing as npt

from recalld.actors.ports.embedding import VectorSpace


class RecordToIndex(NamedTuple):
    """A live record revision whose chunks still need vectors in the current space."""

    id: uuid.UUID
    revision: int
    namespace: str
    title: str
    body: str
    change_seq: int = 0
    """Where the record stands in change order (the catch-up's cursor)."""


class BodyToIndex(NamedTuple):
    """A live record revision still to index, as one counting its chunks needs it."""

    id: uuid.UUID
    revision: int
    namespace: str
    body: str | None
    """None for a revision the caller said it knows (`IndexBacklog.bodies_to_index`'s `known`)."""


@dataclass(frozen=True)
class VectorRows:
    """Stored vectors with their id-map rows, in surrogate order."""

    surrogates: npt.NDArray[np.int64]
    record_ids: list[uuid.UUID]
    revisions: npt.NDArray[np.int32]
    namespaces: list[str]
    vectors: npt.NDArray[np.float32]

    @classmethod
    def empty(cls, dimension: int) -> VectorRows:
        return cls(np.empty(0, np.int64), [], np.empty(0, np.int32), [], np.empty((0, dimension), np.float32))

    def __len__(self) -> int:
        return len(self.record_ids)


class GenerationRow(msgspec.Struct, frozen=True, kw_only=True):
    """A verified generation as PostgreSQL records it; loading must match it exactly."""

    id: str
    space_id: str
    directory: str
    manifest_sha256: str
    index_type: str
    count: int
    source_watermark: int
    """The highest surrogate the generation holds: newer vectors come as a delta."""
    tombstone_watermark: int
    """The highest record change it reflects."""
    state: str = "verified"
    built_at: datetime
    activated_at: datetime | None = None
    deactivated_at: datetime | None = None


class GenerationCopy(msgspec.Struct, frozen=True, kw_only=True):
    """A copy of a published generation that a daemon built from the stored vectors rather than
    the builder's files (a fleet shares nothing but PostgreSQL): what loading it must match."""

    generation_id: str
    manifest_sha256: str
    """The copy's own manifest digest: its files are not the builder's byte for byte."""
    count: int
    """Vectors it holds: the live ones stored up to the generation's source watermark when it
    was built (fewer than the builder's when chunks were retired since)."""
    member: str
    """Which daemon built it (host and generations directory), for people."""
    built_at: datetime


class Pointer(msgspec.Struct, frozen=True, kw_only=True):
    current: GenerationRow | None
    previous: str | None
    """The rollback target: the generation that was current before."""
    version: int
    """Compare-and-swap token: moves succeed only from the version they read."""


@dataclass(frozen=True, slots=True)
class Holds:
    """Live records set aside by `IndexHolds.hold` whose hold has not ended yet."""

    by_reason: dict[str, int]
    next_end_s: float | None
    """Seconds from now until the first of these holds ends (its record is then due for another
    try); None when nothing is held."""


class SpaceCatalogue(Protocol):
    """The vector spaces the store knows (a space is registered before anything is stored in it)."""

    async def ensure_space(self, space: VectorSpace) -> None: ...
    async def spaces(self) -> dict[str, object]:
        """Every space the store knows: its id -> its stored spec (for `GET /v1/generations`)."""
        ...


class IndexBacklog(Protocol):
    """What the catch-up reads and writes: the records still to embed, and their vectors."""

    async def records_to_index(self, space_id: str, chunker: str, limit: int, *, after: int = 0) -> list[RecordToIndex]:
        """Live records whose current revision has no vectors in the space (cut by `chunker`)
        yet, in change order after change mark `after`, at most `limit`; held ones (see
        `IndexHolds.hold`) are not returned."""
        ...

    async def count_to_index(
        self, space_id: str, chunker: str, *, after: int = 0, namespaces: Collection[str] | None = None
    ) -> int:
        """Live records whose current revision has no vectors in the space yet, among those
        changed after change mark `after`; held ones (see `hold`) are not counted. Only records
        of `namespaces` when given (None: every namespace)."""
        ...

    async def bodies_to_index(
        self,
        space_id: str,
        chunker: str,
        *,
        namespaces: Collection[str],
        after: int = 0,
        known: Collection[tuple[uuid.UUID, int]] = (),
    ) -> list[BodyToIndex]:
        """The records `count_to_index` counts for `namespaces` (held ones left out), in no
        particular order, each with its body, but for the (id, revision) pairs in `known`,
        which come without it: counting their chunks, the caller has done it already."""
        ...

    async def change_mark(self) -> int | None:
        """The newest committed record change (`change_seq`), or None while a transaction in
        progress might still commit an older one: every change a later call sees is then above
        the mark."""
        ...

    async def refresh_statistics(self) -> None:
        """Bring the query planner's view of the records and the indexed records up to date."""
        ...

    async def store_batch(
        self,
        space_id: str,
        chunker: str,
        items: Sequence[tuple[RecordToIndex, list[str], list[str], npt.NDArray[np.float32]]],
    ) -> int:
        """Store (record, chunk texts, their hashes, their vectors) items at once; returns the
        vectors stored. An item whose revision is no longer live is skipped; a chunk already
        stored for the same revision and text keeps its surrogate. Ends the items' holds."""
        ...


class IndexHolds(Protocol):
    """Records the provider will not embed, set aside for a while."""

    async def hold(
        self, space_id: str, holds: Sequence[tuple[uuid.UUID, int, str]], *, first_s: float, longest_s: float
    ) -> None:
        """Set these (record, revision, reason) aside: neither `records_to_index` nor
        `count_to_index` returns them until `first_s` from now, doubled for each earlier hold of
        the same revision, at most `longest_s`. Storing a record's vectors ends its hold."""
        ...

    async def held(self, space_id: str, *, namespaces: Collection[str] | None = None) -> Holds:
        """Live records held now, by reason, and when the first of those holds ends; only those
        of `namespaces` when given."""
        ...

    async def delete_stale_holds(self) -> int:
        """Delete the holds whose record revision is no longer live (the record was forgotten or
        has a newer revision); how many went."""
        ...


class DeltaSource(Protocol):
    """What a handle refresh reads: vectors stored after its watermark, chunks retired since."""

    async def vectors_after(self, space_id: str, dimension: int, after: int, limit: int) -> VectorRows:
        """Live chunks' vectors in the space with a surrogate above `after`, ascending, at most `limit`."""
        ...

    async def newest_live_surrogate(self, space_id: str, *, namespaces: Collection[str] | None = None) -> int:
        """The highest surrogate of a live (not retired) chunk with a vector in the space, of
        `namespaces` when given; 0 if none."""
        ...

    async def retired_surrogates(self, up_to: int) -> npt.NDArray[np.int64]:
        """Surrogates of retired chunks at or below `up_to` (tombstones for a handle that far)."""
        ...

    async def count_vectors_after(self, space_id: str, after: int) -> int:
        """Vectors stored in the space with a surrogate above `after`: what a handle that far
        has not taken in yet."""
        ...


class BuildSource(Protocol):
    """What a generation build reads."""

    async def build_snapshot(self, space_id: str, chunker: str, dimension: int) -> tuple[VectorRows, int, int, int]:
        """In one snapshot: every live chunk's vectors in the space cut by `chunker` (surrogate
        order), the source watermark (highest surrogate with a vector in the space), the
        tombstone watermark (highest record change) and the records still to index."""
        ...


class CopySource(Protocol):
    """What a daemon's own copy of a published generation is built from, and where it is recorded."""

    async def copy_snapshot(self, space_id: str, chunker: str, dimension: int, up_to: int) -> VectorRows:
        """In one snapshot: the live chunks' vectors in the space cut by `chunker` with a
        surrogate at or below `up_to` (a generation's source watermark), in surrogate order."""
        ...

    async def add_copy(self, copy: GenerationCopy) -> None:
        """Record a copy of a generation (its row must exist)."""
        ...

    async def copies(self, generation_id: str) -> list[GenerationCopy]:
        """The copies recorded of a generation, oldest first."""
        ...


class GenerationCatalogue(Protocol):
    """Verified generations and the pointer to the current one (compare-and-swap)."""

    async def pointer(self) -> Pointer: ...
    async def generation(self, generation_id: str) -> GenerationRow | None: ...
    async def generations(self) -> list[GenerationRow]:
        """Every generation row, newest build first."""
        ...

    async def add_generation(self, row: GenerationRow) -> None: ...
    async def move_pointer(self, generation_id: str, expected_version: int) -> bool:
        """Make `generation_id` current if the pointer is still at `expected_version`: the
        version goes up by one, the current one becomes `previous` (unless it is the same)."""
        ...

    async def retire_generation(
        self, generation_id: str, fence: Callable[[GenerationRow, str | None, str | None], bool]
    ) -> bool:
        """Mark a verified generation deleted, never the current one and only if
        `fence(row, current, previous)` holds with the pointer locked."""
        ...


class RetiredChunks(Protocol):
    """The rows retired chunks leave behind (the sweeper deletes them once unneeded)."""

    async def retired_chunks(self, retired_before: datetime, *, after: int, limit: int) -> npt.NDArray[np.int64]:
        """Surrogates of chunks retired before `retired_before`, above `after`, ascending, at most
        `limit` (what is left of them: the row that tombstones them in older generations)."""
        ...

    async def delete_retired_chunks(self, surrogates: Sequence[int], retired_before: datetime) -> int:
        """Delete the rows of these surrogates that were retired before `retired_before` (a live
        chunk is never deleted); how many went."""
        ...


class SweptStore(GenerationCatalogue, IndexHolds, RetiredChunks, Protocol):
    """What the sweeper needs: generations to retire, stale holds, retired chunks."""


class VectorStore(
    SpaceCatalogue,
    IndexBacklog,
    IndexHolds,
    DeltaSource,
    BuildSource,
    CopySource,
    GenerationCatalogue,
    RetiredChunks,
    Protocol,
):
    """The index manager's durable side (PostgreSQL in the daemon): every role above."""


class BuilderLock(Protocol):
    """Only its holder embeds, stores vectors and builds generations; others follow the pointer."""

    @property
    def held(self) -> bool: ...
    async def try_acquire(self) -> bool: ...
    async def release(self) -> None: ...
