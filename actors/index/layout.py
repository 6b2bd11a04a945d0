"""Field-by-field check of an index file's FAISS layout before FAISS itself reads it.

FAISS trusts the lengths and ids it reads: a garbled length makes it allocate (and zero) up to a
terabyte, a garbled HNSW neighbour id makes a search read out of bounds. A checksum only proves
the file is what some writer recorded, so a buggy or hostile writer could still hand over such a
file. This module walks the exact layout `faiss.write_index` produces for the two index types a
generation may use, `IndexIDMap2` over `IndexFlatIP` or over `IndexHNSWFlat` (inner product),
checks every length against the file size and the manifest, and every id against its bounds.
What passes can be read by FAISS without surprises; what does not is `GenerationCorrupt`.

Pure except for reading the file through a read-only memory map.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

from recalld.actors.embedding.validation import NORM_TOLERANCE, ZERO_NORM
from recalld.actors.index.manifest import Corruption, GenerationCorrupt

METRIC_INNER_PRODUCT: Final = 0
"""faiss.METRIC_INNER_PRODUCT (stable across FAISS versions; the file stores this integer)."""

_HEADER = struct.Struct("<iqqqBi")  # d, ntotal, two unused int64, is_trained, metric_type
_MAX_EF = 1 << 16
_MAX_LEVELS = 64
# Rows checked per block when scanning vectors: bounds the float64 scratch to ~32 MiB.
_SCAN_ELEMENTS = 4 << 20


@dataclass(frozen=True, slots=True)
class IndexLayout:
    """Where the payloads of a checked index file are, in bytes from the file's start."""

    family: Literal["flat", "hnsw"]
    dimension: int
    ntotal: int
    vectors_offset: int
    """float32 (ntotal, dimension): the stored vectors, in id-map order."""
    id_map_offset: int
    """int64 (ntotal,): the external ids (surrogates), in storage order."""
    hnsw_m: int | None
    ef_search: int | None


class _Reader:
    def __init__(self, buf: npt.NDArray[np.uint8], generation_id: str) -> None:
        self.buf = buf
        self.raw = buf.data
        self.pos = 0
        self.generation_id = generation_id

    def fail(self, detail: str) -> GenerationCorrupt:
        return GenerationCorrupt(
            Corruption.INDEX_STRUCTURE, f"index.faiss at byte {self.pos}: {detail}", generation_id=self.generation_id
        )

    def need(self, size: int) -> None:
        if size < 0 or self.pos + size > len(self.buf):
            raise self.fail(f"needs {size} bytes, {len(self.buf) - self.pos} left")

    def unpack(self, layout: struct.Struct) -> tuple[int, ...]:
        self.need(layout.size)
        values = layout.unpack_from(self.raw, self.pos)
        self.pos += layout.size
        return tuple(int(v) for v in values)

    def int32(self) -> int:
        return self.unpack(_I32)[0]

    def fourcc(self, *allowed: bytes) -> bytes:
        self.need(4)
        code = bytes(self.raw[self.pos : self.pos + 4])
        if code not in allowed:
            raise self.fail(f"type {code!r} where {b' or '.join(allowed)!r} belongs")
        self.pos += 4
        return code

    def vector(self, dtype: str, *, multiplier: int = 1, expected: int | None = None) -> tuple[int, int]:
        """A length-prefixed array: returns (offset, element count) after checking it fits."""
        (count,) = self.unpack(_U64)
        count *= multiplier
        if expected is not None and count != expected:
            raise self.fail(f"array of {count} where {expected} belong")
        size = count * np.dtype(dtype).itemsize
        self.need(size)
        offset = self.pos
        self.pos += size
        return offset, count

    def view(self, dtype: str, offset: int, count: int) -> npt.NDArray[np.generic]:
        return np.ndarray((count,), dtype=np.dtype(dtype).newbyteorder("<"), buffer=self.buf, offset=offset)

    def header(self, *, dimension: int, ntotal: int) -> None:
        d, n, _, _, is_trained, metric = self.unpack(_HEADER)
        if d != dimension:
            raise GenerationCorrupt(
                Corruption.DIMENSION_MISMATCH,
                f"index.faiss has dimension {d}, the manifest {dimension}",
                generation_id=self.generation_id,
            )
        if n != ntotal:
            raise GenerationCorrupt(
                Corruption.COUNT_MISMATCH,
                f"index.faiss holds {n} vectors, the manifest {ntotal}",
                generation_id=self.generation_id,
            )
        if metric != METRIC_INNER_PRODUCT:
            raise GenerationCorrupt(
                Corruption.SPACE_MISMATCH,
                f"index.faiss uses metric {metric}, not inner product",
                generation_id=self.generation_id,
            )
        if is_trained != 1:
            raise self.fail("index is not trained")


_I32 = struct.Struct("<i")
_U64 = struct.Struct("<Q")


def inspect_index_file(
    path: Path,
    *,
    family: Literal["flat", "hnsw"],
    hnsw_m: int | None,
    dimension: int,
    count: int,
    surrogates: npt.NDArray[np.int64],
    normalized: bool,
    generation_id: str,
) -> IndexLayout:
    """Check `path` completely; return where its payloads are.

    Guarantees on return: the file is exactly `IndexIDMap2` over the expected inner index, with
    `dimension` and `count`, inner product, every length consistent and the file ending right
    after the id map; the id map equals `surrogates` element by element; every vector is finite
    and non-zero (unit length within the embedder's tolerance when `normalized`); for HNSW every
    neighbour id, level and offset is in bounds. Anything else raises `GenerationCorrupt`.
    """
    try:
        buf: npt.NDArray[np.uint8] = np.memmap(path, dtype=np.uint8, mode="r")
    except (OSError, ValueError) as exc:  # ValueError: an empty file cannot be mapped
        raise GenerationCorrupt(
            Corruption.INDEX_STRUCTURE, f"index.faiss cannot be mapped: {exc}", generation_id=generation_id
        ) from exc
    reader = _Reader(buf, generation_id)
    reader.fourcc(b"IxM2")
    reader.header(dimension=dimension, ntotal=count)
    ef_search = None
    if family == "flat":
        reader.fourcc(b"IxFI")
        reader.header(dimension=dimension, ntotal=count)
        vectors_offset, _ = reader.vector("<f4", expected=count * dimension)
    else:
        reader.fourcc(b"IHNf")
        reader.header(dimension=dimension, ntotal=count)
        ef_search = _check_hnsw(reader, count=count, hnsw_m=hnsw_m)
        reader.fourcc(b"IxFI")
        reader.header(dimension=dimension, ntotal=count)
        vectors_offset, _ = reader.vector("<f4", expected=count * dimension)
    id_map_offset, _ = reader.vector("<i8", expected=count)
    if reader.pos != len(buf):
        raise reader.fail(f"{len(buf) - reader.pos} unexpected bytes after the id map")

    stored_ids = reader.view("i8", id_map_offset, count)
    if not np.array_equal(stored_ids, surrogates):
        raise GenerationCorrupt(
            Corruption.ID_MAP_MISMATCH,
            "index.faiss's ids differ from the id map's surrogates",
            generation_id=generation_id,
        )
    _check_vectors(reader, vectors_offset, count=count, dimension=dimension, normalized=normalized)
    return IndexLayout(
        family=family,
        dimension=dimension,
        ntotal=count,
        vectors_offset=vectors_offset,
        id_map_offset=id_map_offset,
        hnsw_m=hnsw_m,
        ef_search=ef_search,
    )


def _check_hnsw(reader: _Reader, *, count: int, hnsw_m: int | None) -> int:
    """The HNSW graph's arrays, in `write_HNSW`'s order; returns the stored efSearch."""
    probas_offset, n_probas = reader.vector("<f8")
    cum_offset, n_cum = reader.vector("<i4")
    levels_offset, _ = reader.vector("<i4", expected=count)
    offsets_offset, _ = reader.vector("<u8", expected=count + 1)
    neighbors_offset, n_neighbors = reader.vector("<i4")
    entry_point, max_level, ef_construction, ef_search, _ = (reader.int32() for _ in range(5))

    if not 2 <= n_cum <= _MAX_LEVELS + 1 or n_probas > _MAX_LEVELS:
        raise reader.fail(f"HNSW has {n_cum} level bounds and {n_probas} level probabilities")
    if not np.all(np.isfinite(reader.view("f8", probas_offset, n_probas))):
        raise reader.fail("HNSW level probabilities are not finite")
    cum = reader.view("i4", cum_offset, n_cum).astype(np.int64)
    if cum[0] != 0 or np.any(np.diff(cum) < 0):
        raise reader.fail("HNSW neighbour counts per level are not cumulative")
    if hnsw_m is not None and cum[1] != 2 * hnsw_m:
        raise reader.fail(f"HNSW level 0 has {cum[1]} neighbours, HNSW{hnsw_m} has {2 * hnsw_m}")
    if not (1 <= ef_construction <= _MAX_EF and 1 <= ef_search <= _MAX_EF):
        raise reader.fail(f"HNSW efConstruction {ef_construction} / efSearch {ef_search} out of range")

    levels = reader.view("i4", levels_offset, count).astype(np.int64)
    if count and (levels.min() < 1 or levels.max() >= n_cum):
        raise reader.fail("HNSW node levels out of range")
    offsets = reader.view("u8", offsets_offset, count + 1)
    if offsets[0] != 0 or int(offsets[-1]) != n_neighbors:
        raise reader.fail("HNSW neighbour offsets do not span the neighbour table")
    if count and not np.array_equal(np.diff(offsets.astype(np.int64)), cum[levels]):
        raise reader.fail("HNSW neighbour offsets disagree with the node levels")
    neighbors = reader.view("i4", neighbors_offset, n_neighbors)
    if n_neighbors and (neighbors.min() < -1 or neighbors.max() >= count):
        raise reader.fail("HNSW neighbour ids out of range")
    if count == 0:
        if entry_point != -1 or max_level != -1:
            raise reader.fail("empty HNSW has an entry point")
    elif not (0 <= entry_point < count and max_level == levels.max() - 1):
        raise reader.fail(f"HNSW entry point {entry_point} / max level {max_level} out of range")
    return ef_search


def _check_vectors(reader: _Reader, offset: int, *, count: int, dimension: int, normalized: bool) -> None:
    vectors = np.ndarray((count, dimension), dtype="<f4", buffer=reader.buf, offset=offset)
    block = max(1, _SCAN_ELEMENTS // max(dimension, 1))
    for start in range(0, count, block):
        part = np.asarray(vectors[start : start + block], dtype=np.float64)
        if not np.all(np.isfinite(part)):
            row = start + int(np.argmin(np.all(np.isfinite(part), axis=1)))
            raise GenerationCorrupt(
                Corruption.NON_FINITE_VECTORS,
                f"vector row {row} holds NaN or Inf",
                generation_id=reader.generation_id,
            )
        norms = np.sqrt(np.einsum("ij,ij->i", part, part))
        bad = norms < ZERO_NORM
        if normalized:
            bad |= np.abs(norms - 1.0) > NORM_TOLERANCE
        if np.any(bad):
            row = start + int(np.argmax(bad))
            raise GenerationCorrupt(
                Corruption.BAD_VECTOR_NORM,
                f"vector row {row} has norm {norms[row - start]:.6g}",
                generation_id=reader.generation_id,
            )
