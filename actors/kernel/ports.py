"""The ports through which actors reach the outside world; `daemon/` implements them.

Only Protocols and plain data live here, so that `actors` never imports a driver.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Literal, NamedTuple, Protocol, Self, runtime_checkable

import msgspec
import numpy as np
import numpy.typing as npt

# --- embedding ---------------------------------------------------------------------------------

Purpose = Literal["index", "query", "dedupe", "eval", "probe", "resolve"]
"""Why a provider call was made. `probe` is the embedder's own start-up/re-probe call;
`resolve` is the dispute resolver's LLM call."""

SYSTEM_PURPOSES: frozenset[str] = frozenset({"dedupe", "eval", "probe"})
"""Purposes that are the daemon's own work: never counted in per-client usage totals, even when
made for a namespace (a duplicate check's embedding is the daemon's safeguard, not a client's
request); reported apart as system usage."""


@dataclass(frozen=True, slots=True)
class ProviderInfo:
    """What a provider says about itself; fixed for the provider's lifetime."""

    provider: str
    """`local`, `ollama`, `openai`."""
    model: str
    max_input_tokens: int | None = None
    """Longer inputs are truncated by the provider; None when the provider does not say."""
    max_concurrency: int = 1
    """Provider calls the embedder may have in flight at once (1 for an in-process model,
    whose calls compete for the same cores)."""


@dataclass(frozen=True, slots=True)
class ProviderBatch:
    """A provider's answer to one call, before validation."""

    vectors: npt.NDArray[np.float32] | Sequence[Sequence[float]]
    """(n, d) in input order. Raw from the wire: the embedder validates it."""
    input_tokens: int | None
    """Tokens the provider reports for the whole call; None when it reports none."""
    token_counts: Sequence[int] | None = None
    """Exact tokens per input, when the provider knows them (the local model does)."""


@runtime_checkable
class EmbeddingProvider(Protocol):
    """One embedding model behind one small interface, like an httpx transport.

    Enter it (`async with`) before the first `embed`; leaving it or `aclose()` releases what it
    holds (the local model's session; nothing for HTTP providers, whose client the daemon owns).
    A provider may be entered again after it was left (the supervisor restarts the embedder).
    Failures raise `recalld.actors.embedding.EmbeddingError` with a provider reason code.
    """

    def describe(self) -> ProviderInfo: ...

    # The timeout is the remaining budget handed down to the socket, not a scope the caller
    # could wrap around the call: an HTTP provider passes it to httpx as the request timeout.
    async def embed(self, texts: Sequence[str], *, timeout: float) -> ProviderBatch:  # noqa: ASYNC109
        """Embed `texts` (already rendered by a template) within `timeout` seconds.

        `provider_timeout` when the time runs out; the call never outlives `timeout` by more
        than the time it takes to notice.
        """
        ...

    async def aclose(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class TokenCounter(Protocol):
    """Counts model tokens for inputs (used when a provider reports no usage)."""

    def count_tokens(self, texts: Sequence[str]) -> list[int]: ...


class UsageRow(msgspec.Struct, frozen=True, kw_only=True):
    """One metered provider call for one (purpose, namespace)."""

    purpose: Purpose
    namespace: str | None
    """None for system work (the probe)."""
    provider: str
    model: str | None
    """None when the model is not in the price catalogue (and then cost_micros is 0)."""
    input_tokens: int
    estimated: bool
    """True when the tokens were counted or estimated here rather than reported by the provider
    (or apportioned from a batch total shared by several namespaces/purposes)."""
    cost_micros: int
    at: datetime
    """UTC wall-clock time of the provider call's end."""
    output_tokens: int = 0

    @property
    def is_system(self) -> bool:
        return self.purpose in SYSTEM_PURPOSES or self.namespace is None


class SinkUnavailable(Exception):
    """The sink cannot store rows now (its database is down); the same rows may be retried."""


class UsageSink(Protocol):
    """Where usage rows go (PostgreSQL in the daemon, a list in tests)."""

    async def record(self, rows: Sequence[UsageRow]) -> None:
        """Store the rows, all or none. Raises `SinkUnavailable` when trying again later may
        succeed; any other exception means these rows will never be stored."""
        ...


class VectorSpace(msgspec.Struct, frozen=True, kw_only=True):
    """The identity of a vector space: two spaces never share an index or a delta.

    `key` is a stable string (same fields → same key, across processes and versions of this
    code) for keying generations, directories and rows.
    """

    provider: str
    model: str
    dimension: int
    metric: Literal["ip"] = "ip"
    normalized: bool
    template_version: int
    builder_version: int = 1

    @property
    def key(self) -> str:
        # Canonical: sorted field names, compact JSON; the hash keeps it path-safe and short.
        canonical = msgspec.json.encode(msgspec.to_builtins(self), order="sorted")
        return f"vs1-{hashlib.sha256(canonical).hexdigest()[:24]}"

    def describe(self) -> str:
        """For people: `local/all-MiniLM-L6-v2-onnx-int8 384d ip norm t1 b1`."""
        norm = "norm" if self.normalized else "raw"
        return (
            f"{self.provider}/{self.model} {self.dimension}d {self.metric} {norm} "
            f"t{self.template_version} b{self.builder_version}"
        )


# --- vector index ------------------------------------------------------------------------------


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


class BuildSource(Protocol):
    """What a generation build reads."""

    async def build_snapshot(self, space_id: str, chunker: str, dimension: int) -> tuple[VectorRows, int, int, int]:
        """In one snapshot: every live chunk's vectors in the space cut by `chunker` (surrogate
        order), the source watermark (highest surrogate with a vector in the space), the
        tombstone watermark (highest record change) and the records still to index."""
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
    SpaceCatalogue, IndexBacklog, IndexHolds, DeltaSource, BuildSource, GenerationCatalogue, RetiredChunks, Protocol
):
    """The index manager's durable side (PostgreSQL in the daemon): every role above."""


class BuilderLock(Protocol):
    """Only its holder embeds, stores vectors and builds generations; others follow the pointer."""

    @property
    def held(self) -> bool: ...
    async def try_acquire(self) -> bool: ...
    async def release(self) -> None: ...
