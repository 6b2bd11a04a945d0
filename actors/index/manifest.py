"""The manifest of a vector index generation and the pure checks that bind it to its pointer row.

A generation directory holds `manifest.json` plus the files it lists with their SHA-256 and size.
PostgreSQL's pointer row records what the caller expects (`Expected`): the manifest's own SHA-256,
the count, the vector space and the watermarks. Loading trusts nothing that does not match that
row exactly; every mismatch is a `GenerationCorrupt` with the stable reason `vector_index_corrupt`.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Final, Literal

import msgspec

from recalld.actors.ports.embedding import VectorSpace

FORMAT_VERSION: Final = 1
MANIFEST_FILE: Final = "manifest.json"
INDEX_FILE: Final = "index.faiss"
ID_MAP_FILE: Final = "idmap.npz"
DATA_FILES: Final = frozenset({INDEX_FILE, ID_MAP_FILE})
"""Every file a generation holds besides the manifest; the manifest lists exactly these."""

TEMP_PREFIX: Final = ".tmp-"
"""Build directories start with this; nothing that loads generations ever looks at them."""

MAX_MANIFEST_BYTES: Final = 1 << 20
"""A manifest is a few hundred bytes; anything this large is not one (and is not read whole)."""

_GENERATION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_FACTORY = re.compile(r"(?:Flat|HNSW(?P<m>[1-9][0-9]{0,2})(?:,Flat)?)")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class IndexReason(StrEnum):
    """Stable reason codes of the vector index (they reach /readyz, `degraded_routes`, metrics)."""

    VECTOR_INDEX_CORRUPT = "vector_index_corrupt"
    """A generation's files do not match its pointer row or cannot be read: never served."""
    VECTOR_INDEX_BUILD_FAILED = "vector_index_build_failed"
    """A build was refused or failed its own verification; the previous generation keeps serving."""
    NO_VERIFIED_GENERATION = "no_verified_generation"
    """Nothing is searchable yet: no generation is loaded and no vector has been stored."""
    VECTOR_SPACE_REBUILDING = "vector_space_rebuilding"
    """The configured model cannot query the generation serving; one in its space is being built."""
    EMBEDDER_UNAVAILABLE = "embedder_unavailable"
    """The embedder has no vector space yet and gave no reason of its own."""
    GENERATION_COPY_BUILDING = "generation_copy_building"
    """This daemon is building its own copy of the current generation from the stored vectors
    (its directory is not here: a fleet's members share nothing but PostgreSQL) and has nothing
    to serve meanwhile."""


class Corruption(StrEnum):
    """What exactly failed when a generation was rejected (for logs and tests, not for clients)."""

    MISSING_MANIFEST = "missing_manifest"
    MANIFEST_CHECKSUM = "manifest_checksum"
    MANIFEST_INVALID = "manifest_invalid"
    MISSING_FILE = "missing_file"
    FILE_SIZE = "file_size"
    FILE_CHECKSUM = "file_checksum"
    GENERATION_MISMATCH = "generation_mismatch"
    COUNT_MISMATCH = "count_mismatch"
    DIMENSION_MISMATCH = "dimension_mismatch"
    SPACE_MISMATCH = "space_mismatch"
    WATERMARK_MISMATCH = "watermark_mismatch"
    NON_FINITE_VECTORS = "non_finite_vectors"
    BAD_VECTOR_NORM = "bad_vector_norm"
    ID_MAP_MISMATCH = "id_map_mismatch"
    INDEX_STRUCTURE = "index_structure"
    LOAD_EXCEPTION = "load_exception"


class GenerationCorrupt(Exception):
    """A generation may not be served. `reason` is always `vector_index_corrupt`.

    `kind` names the check that failed and `detail` says how, for people; callers switch on
    `reason` only.
    """

    reason: Final[IndexReason] = IndexReason.VECTOR_INDEX_CORRUPT

    def __init__(self, kind: Corruption, detail: str, *, generation_id: str | None = None) -> None:
        self.kind = kind
        self.detail = detail
        self.generation_id = generation_id
        where = f" (generation {generation_id})" if generation_id else ""
        super().__init__(f"{self.reason}: {kind}: {detail}{where}")


class FileEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One file of a generation as the builder wrote it."""

    sha256: str
    size: int = msgspec.field(name="bytes")


class Manifest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """`manifest.json`: what a generation is and what its files must be."""

    format_version: int
    generation_id: str
    space: VectorSpace
    space_id: str
    """`space.key`; stored so that a pointer row can be compared without decoding the space."""
    index_type: str
    """The FAISS factory string under the `IndexIDMap2`, e.g. `Flat` or `HNSW32`."""
    metric: Literal["ip"]
    dimension: int
    count: int
    source_watermark: int
    """The highest surrogate the generation may contain: later vectors belong to a delta."""
    tombstone_watermark: int
    """The tombstone position the builder applied: later forgets belong to the tombstone set."""
    built_at: datetime
    """UTC, RFC 3339 in the file."""
    builder_version: str
    files: dict[str, FileEntry]


class Expected(msgspec.Struct, frozen=True, kw_only=True):
    """What the PostgreSQL pointer row says a generation is; loading accepts nothing else."""

    generation_id: str
    manifest_sha256: str
    count: int
    space_id: str
    source_watermark: int
    tombstone_watermark: int

    @classmethod
    def from_manifest(cls, manifest: Manifest, manifest_sha256: str) -> Expected:
        """The pointer row for a generation just built (its manifest and `manifest_sha256(dir)`)."""
        return cls(
            generation_id=manifest.generation_id,
            manifest_sha256=manifest_sha256,
            count=manifest.count,
            space_id=manifest.space_id,
            source_watermark=manifest.source_watermark,
            tombstone_watermark=manifest.tombstone_watermark,
        )


_decoder = msgspec.json.Decoder(Manifest)


def encode_manifest(manifest: Manifest) -> bytes:
    """The exact bytes of `manifest.json` (sorted keys, so equal manifests hash equal)."""
    return msgspec.json.format(msgspec.json.encode(manifest, order="sorted"), indent=2) + b"\n"


def is_valid_generation_id(generation_id: str) -> bool:
    """A generation id is a plain, path-safe directory name that can never look like a temp dir."""
    return _GENERATION_ID.fullmatch(generation_id) is not None and not generation_id.startswith(TEMP_PREFIX)


def index_family(index_type: str) -> Literal["flat", "hnsw"]:
    """`flat` or `hnsw` for the factory strings a generation may use; ValueError for anything else.

    Only these two are accepted because their on-disk layout is checked field by field before
    FAISS reads a file (see `recalld.actors.index.layout`).
    """
    match = _FACTORY.fullmatch(index_type)
    if match is None:
        raise ValueError(f"unsupported index type {index_type!r}: use 'Flat' or 'HNSW<M>' (M in 1..999)")
    return "hnsw" if match.group("m") else "flat"


def hnsw_m(index_type: str) -> int | None:
    """The HNSW `M` of a factory string, None for a flat index."""
    match = _FACTORY.fullmatch(index_type)
    return int(match.group("m")) if match and match.group("m") else None


def decode_manifest(data: bytes, *, generation_id: str | None = None) -> Manifest:
    """A well-formed, self-consistent manifest from `manifest.json`'s bytes, or `GenerationCorrupt`.

    Callers check the bytes' digest against the pointer row (`check_manifest_digest`) first.
    """
    try:
        manifest = _decoder.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise GenerationCorrupt(
            Corruption.MANIFEST_INVALID, f"manifest does not decode: {exc}", generation_id=generation_id
        ) from exc
    check_self_consistent(manifest)
    return manifest


def check_manifest_digest(actual_sha256: str, expected: Expected) -> None:
    """The manifest file's bytes hash to what the pointer row recorded."""
    if actual_sha256 != expected.manifest_sha256:
        raise GenerationCorrupt(
            Corruption.MANIFEST_CHECKSUM,
            f"manifest sha256 {actual_sha256[:16]}… differs from the pointer row's {expected.manifest_sha256[:16]}…",
            generation_id=expected.generation_id,
        )


def check_self_consistent(manifest: Manifest) -> None:
    """The manifest agrees with itself: space key, dimension, format, index type, file list."""
    gid = manifest.generation_id

    def fail(kind: Corruption, detail: str) -> GenerationCorrupt:
        return GenerationCorrupt(kind, detail, generation_id=gid)

    if manifest.format_version != FORMAT_VERSION:
        raise fail(Corruption.MANIFEST_INVALID, f"format_version {manifest.format_version} != {FORMAT_VERSION}")
    if not is_valid_generation_id(gid):
        raise fail(Corruption.MANIFEST_INVALID, f"generation_id {gid!r} is not a valid directory name")
    if manifest.space.key != manifest.space_id:
        raise fail(
            Corruption.SPACE_MISMATCH, f"space_id {manifest.space_id} is not the key of its space {manifest.space.key}"
        )
    if manifest.dimension != manifest.space.dimension or manifest.dimension < 1:
        raise fail(
            Corruption.DIMENSION_MISMATCH,
            f"dimension {manifest.dimension} != the space's {manifest.space.dimension}",
        )
    if manifest.metric != manifest.space.metric:
        raise fail(Corruption.SPACE_MISMATCH, f"metric {manifest.metric} != the space's {manifest.space.metric}")
    try:
        index_family(manifest.index_type)
    except ValueError as exc:
        raise fail(Corruption.MANIFEST_INVALID, str(exc)) from exc
    if manifest.count < 0:
        raise fail(Corruption.COUNT_MISMATCH, f"negative count {manifest.count}")
    if set(manifest.files) != DATA_FILES:
        raise fail(Corruption.MANIFEST_INVALID, f"files {sorted(manifest.files)} are not exactly {sorted(DATA_FILES)}")
    for name, entry in manifest.files.items():
        if _SHA256.fullmatch(entry.sha256) is None or entry.size < 0:
            raise fail(Corruption.MANIFEST_INVALID, f"file entry for {name} is malformed")


def check_manifest(manifest: Manifest, expected: Expected) -> None:
    """The manifest describes exactly the generation the pointer row names (id, count, space, watermarks)."""
    gid = expected.generation_id
    if manifest.generation_id != gid:
        raise GenerationCorrupt(
            Corruption.GENERATION_MISMATCH,
            f"manifest is for generation {manifest.generation_id!r}",
            generation_id=gid,
        )
    if manifest.space_id != expected.space_id:
        raise GenerationCorrupt(
            Corruption.SPACE_MISMATCH,
            f"space {manifest.space_id} != expected {expected.space_id}",
            generation_id=gid,
        )
    if manifest.count != expected.count:
        raise GenerationCorrupt(
            Corruption.COUNT_MISMATCH, f"count {manifest.count} != expected {expected.count}", generation_id=gid
        )
    if (manifest.source_watermark, manifest.tombstone_watermark) != (
        expected.source_watermark,
        expected.tombstone_watermark,
    ):
        raise GenerationCorrupt(
            Corruption.WATERMARK_MISMATCH,
            f"watermarks (source {manifest.source_watermark}, tombstone {manifest.tombstone_watermark}) != "
            f"expected ({expected.source_watermark}, {expected.tombstone_watermark})",
            generation_id=gid,
        )


def check_file(name: str, entry: FileEntry, *, size: int | None, sha256: str | None, generation_id: str) -> None:
    """One data file against its manifest entry: present, the recorded size, the recorded digest.

    Pass `sha256=None` to check presence and size only (done before hashing a large file).
    """
    if size is None:
        raise GenerationCorrupt(Corruption.MISSING_FILE, f"{name} is missing", generation_id=generation_id)
    if size != entry.size:
        raise GenerationCorrupt(
            Corruption.FILE_SIZE,
            f"{name} has {size} bytes, the manifest says {entry.size} (truncated or extended)",
            generation_id=generation_id,
        )
    if sha256 is not None and sha256 != entry.sha256:
        raise GenerationCorrupt(
            Corruption.FILE_CHECKSUM,
            f"{name} sha256 {sha256[:16]}… != manifest {entry.sha256[:16]}…",
            generation_id=generation_id,
        )


def check_watermarks_advance(current: Expected, candidate: Expected) -> None:
    """A new generation of the same space never goes back behind the one it replaces.

    Raises `GenerationCorrupt(WATERMARK_MISMATCH)` when `candidate`'s source or tombstone
    watermark is lower than `current`'s. A space switch compares nothing (the spaces are
    unrelated); an explicit rollback is the caller's decision not to call this.
    """
    if candidate.space_id != current.space_id:
        return
    if (
        candidate.source_watermark < current.source_watermark
        or candidate.tombstone_watermark < current.tombstone_watermark
    ):
        raise GenerationCorrupt(
            Corruption.WATERMARK_MISMATCH,
            f"watermarks (source {candidate.source_watermark}, tombstone {candidate.tombstone_watermark}) "
            f"go back behind the current ({current.source_watermark}, {current.tombstone_watermark})",
            generation_id=candidate.generation_id,
        )
