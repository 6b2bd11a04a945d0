"""Building, verifying and loading vector index generations (one directory each).

A generation is `root/<generation_id>/` with `index.faiss` (an `IndexIDMap2` over a flat or
HNSW inner-product index whose ids are surrogates), `idmap.npz` (surrogate → record, revision,
namespace) and `manifest.json` (see `recalld.actors.index.manifest`). It is built in a `.tmp-` sibling,
verified by reading it back, fsynced and renamed into place in one step, so a directory named
after a generation is always complete. Loading accepts only what matches the pointer row.

Everything here is synchronous and CPU- or disk-bound: callers run it in a worker thread.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import stat
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import faiss
import numpy as np

from recalld.actors.embedding.validation import NORM_TOLERANCE, ZERO_NORM
from recalld.actors.index.idmap import IdMap as IdMap  # re-exported: callers build id maps with the rest
from recalld.actors.index.layout import inspect_index_file
from recalld.actors.index.manifest import (
    FORMAT_VERSION,
    ID_MAP_FILE,
    INDEX_FILE,
    MANIFEST_FILE,
    MAX_MANIFEST_BYTES,
    TEMP_PREFIX,
    Corruption,
    Expected,
    FileEntry,
    GenerationCorrupt,
    IndexReason,
    Manifest,
    check_file,
    check_manifest,
    check_manifest_digest,
    decode_manifest,
    encode_manifest,
    hnsw_m,
    index_family,
    is_valid_generation_id,
)
from recalld.actors.index.settings import HNSW_EF_SEARCH
from recalld.actors.index.vectors import BUILD_THREADS, Vectors, VectorSet, search_parameters
from recalld.actors.ports.embedding import VectorSpace

BUILDER_VERSION: Final = f"recalld-index/{FORMAT_VERSION} faiss/{faiss.__version__}"
HNSW_EF_CONSTRUCTION: Final = 80
"""Graph quality at build time (FAISS's default is 40; recall at 100k+ vectors needs more)."""
SAMPLE_SEARCHES: Final = 32
_ADD_BATCH = 16384
_HASH_CHUNK = 1 << 20
# The id map names every namespace and the index holds the vectors (partly invertible to text):
# the builder's account alone may read a generation, whatever umask the process runs under.
GENERATION_DIR_MODE: Final = 0o700
GENERATION_FILE_MODE: Final = 0o600


class GenerationBuildError(Exception):
    """A build was refused (bad input) or failed its own verification; nothing was installed.

    `reason` is always `vector_index_build_failed`; `detail` says what for people. When the
    written files failed verification, the `GenerationCorrupt` is the `__cause__`.
    """

    reason: Final[IndexReason] = IndexReason.VECTOR_INDEX_BUILD_FAILED

    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(f"{self.reason}: {detail}")


class Generation(VectorSet):
    """A verified generation as loaded from disk: its manifest, index and id map. Immutable.

    The FAISS index may be memory-mapped from `path/index.faiss`; the mapping lives as long as
    this object (generation directories are never modified in place, only removed whole, which
    leaves an open mapping intact).
    """

    __slots__ = ("_manifest", "_mmapped", "_path")

    def __init__(
        self,
        *,
        manifest: Manifest,
        path: Path,
        index: faiss.IndexIDMap2,
        id_map: IdMap,
        mmapped: bool,
        ef_search: int | None = None,
    ) -> None:
        super().__init__(index, id_map, family=index_family(manifest.index_type), ef_search=ef_search)
        self._manifest = manifest
        self._path = path
        self._mmapped = mmapped

    @property
    def manifest(self) -> Manifest:
        return self._manifest

    @property
    def path(self) -> Path:
        return self._path

    @property
    def mmapped(self) -> bool:
        return self._mmapped

    @property
    def generation_id(self) -> str:
        return self._manifest.generation_id

    @property
    def space_id(self) -> str:
        return self._manifest.space_id

    @property
    def dimension(self) -> int:
        return self._manifest.dimension

    @property
    def source_watermark(self) -> int:
        return self._manifest.source_watermark


# --- build -------------------------------------------------------------------------------------


def build_generation(
    root: Path,
    *,
    generation_id: str,
    space: VectorSpace,
    space_id: str,
    vectors: Vectors,
    id_map: IdMap,
    source_watermark: int,
    tombstone_watermark: int,
    factory: str = "Flat",
    progress: Callable[[int, int], None] | None = None,
    hnsw_ef_construction: int = HNSW_EF_CONSTRUCTION,
    hnsw_ef_search: int = HNSW_EF_SEARCH,
    before_install: Callable[[Manifest, str], None] = lambda manifest, digest: None,
) -> Manifest:
    """Build, verify and install `root/<generation_id>`; return its manifest.

    Refuses (GenerationBuildError, nothing written) vectors that are not finite, zero, of the
    wrong dimension or, in a normalised space, not unit length; duplicate or negative surrogates;
    surrogates above `source_watermark`; a vector count different from the id map's; an id that
    exists. Then builds in `root/.tmp-<id>-<random>/`, reads the files back through the same
    checks as `load_generation`, searches up to 32 known vectors (each must come back first, or
    among the first 3 for HNSW), fsyncs, renames the directory into place and fsyncs `root`.

    Any failure, including an exception raised by `progress(done, total)` (the way to cancel a
    build from outside the worker thread), removes the temporary directory and propagates; there
    is never a partial `root/<generation_id>`. Store the pointer row from the returned manifest
    and `manifest_sha256(root / generation_id)`, or record them in `before_install(manifest,
    digest)`, called just before the rename (if it raises, nothing is installed).
    """
    vectors = _checked_input(
        generation_id=generation_id,
        space=space,
        space_id=space_id,
        vectors=vectors,
        id_map=id_map,
        source_watermark=source_watermark,
        factory=factory,
    )
    root.mkdir(parents=True, exist_ok=True)
    final = root / generation_id
    if final.exists():
        raise GenerationBuildError(f"generation {generation_id} already exists")

    temp = root / f"{TEMP_PREFIX}{generation_id}-{secrets.token_hex(4)}"
    temp.mkdir(mode=GENERATION_DIR_MODE)  # renamed into place with this mode: no window for others
    try:
        order = np.argsort(id_map.surrogate, kind="stable")
        vectors = np.ascontiguousarray(vectors[order])
        id_map = id_map.take(order)
        index = new_index(space.dimension, factory, hnsw_ef_construction, hnsw_ef_search)
        faiss.omp_set_num_threads(BUILD_THREADS)  # this worker thread may have searched before
        total = len(id_map)
        for start in range(0, total, _ADD_BATCH):
            stop = min(start + _ADD_BATCH, total)
            index.add_with_ids(vectors[start:stop], id_map.surrogate[start:stop])
            # Touch the directory: the sweeper's grace period counts from its last change.
            os.utime(temp)
            if progress is not None:
                progress(stop, total)
        faiss.write_index(index, str(temp / INDEX_FILE))
        del index
        id_map.save(temp / ID_MAP_FILE)
        files = {name: _file_entry(temp / name) for name in (INDEX_FILE, ID_MAP_FILE)}
        manifest = Manifest(
            format_version=FORMAT_VERSION,
            generation_id=generation_id,
            space=space,
            space_id=space_id,
            index_type=factory,
            metric=space.metric,
            dimension=space.dimension,
            count=total,
            source_watermark=source_watermark,
            tombstone_watermark=tombstone_watermark,
            built_at=datetime.now(UTC),
            builder_version=BUILDER_VERSION,
            files=files,
        )
        (temp / MANIFEST_FILE).write_bytes(encode_manifest(manifest))

        expected = Expected.from_manifest(manifest, manifest_sha256(temp))
        try:
            written = _open_generation(temp, expected, mmap=False)
        except GenerationCorrupt as exc:
            raise GenerationBuildError(f"the written generation failed verification: {exc}") from exc
        _sample_search(written, vectors)
        del written

        for name in (INDEX_FILE, ID_MAP_FILE, MANIFEST_FILE):
            os.chmod(temp / name, GENERATION_FILE_MODE)
            _fsync_file(temp / name)
        _fsync_dir(temp)
        if final.exists():
            raise GenerationBuildError(f"generation {generation_id} appeared during the build")
        before_install(manifest, expected.manifest_sha256)
        temp.rename(final)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    _fsync_dir(root)
    return manifest


def _checked_input(
    *,
    generation_id: str,
    space: VectorSpace,
    space_id: str,
    vectors: Vectors,
    id_map: IdMap,
    source_watermark: int,
    factory: str,
) -> Vectors:
    if not is_valid_generation_id(generation_id):
        raise GenerationBuildError(f"generation id {generation_id!r} is not a plain directory name")
    if space.key != space_id:
        raise GenerationBuildError(f"space_id {space_id} is not the key of {space.describe()} ({space.key})")
    try:
        index_family(factory)
    except ValueError as exc:
        raise GenerationBuildError(str(exc)) from exc
    matrix = np.asarray(vectors)
    if matrix.ndim != 2 or matrix.shape[1] != space.dimension:
        raise GenerationBuildError(f"vectors have shape {matrix.shape}, the space needs (n, {space.dimension})")
    if matrix.dtype != np.float32:
        raise GenerationBuildError(f"vectors are {matrix.dtype}, not float32")
    if len(matrix) != len(id_map):
        raise GenerationBuildError(f"{len(matrix)} vectors for {len(id_map)} id-map rows")
    if len(matrix):
        finite = np.all(np.isfinite(matrix), axis=1)
        if not np.all(finite):
            raise GenerationBuildError(f"vector row {int(np.argmin(finite))} holds NaN or Inf")
        norms = np.linalg.norm(matrix.astype(np.float64), axis=1)
        if np.any(norms < ZERO_NORM):
            raise GenerationBuildError(f"vector row {int(np.argmax(norms < ZERO_NORM))} is zero")
        if space.normalized and np.any(np.abs(norms - 1.0) > NORM_TOLERANCE):
            row = int(np.argmax(np.abs(norms - 1.0) > NORM_TOLERANCE))
            raise GenerationBuildError(f"vector row {row} has norm {norms[row]:.6f} in a normalised space")
        surrogates = id_map.surrogate
        if surrogates.min() < 0:
            raise GenerationBuildError("negative surrogates (FAISS uses -1 for 'no result')")
        if len(np.unique(surrogates)) != len(surrogates):
            raise GenerationBuildError("duplicate surrogates in the id map")
        if surrogates.max() > source_watermark:
            raise GenerationBuildError(
                f"surrogate {int(surrogates.max())} is above the source watermark {source_watermark}"
            )
    return matrix


def new_index(dimension: int, factory: str, ef_construction: int, ef_search: int) -> faiss.IndexIDMap2:
    """An empty index as a generation holds it: `factory` (inner product) under an `IndexIDMap2`,
    an HNSW graph with these beams. Public for bench/flat_or_hnsw.py, which builds the same."""
    inner = faiss.index_factory(dimension, factory, faiss.METRIC_INNER_PRODUCT)
    if isinstance(inner, faiss.IndexHNSW):
        hnsw = inner.hnsw
        hnsw.efConstruction = ef_construction
        hnsw.efSearch = ef_search
    return faiss.IndexIDMap2(inner)


def _sample_search(generation: Generation, vectors: Vectors) -> None:
    """Known vectors must find themselves: proves the index answers, not only that it parses."""
    n = generation.count
    if n == 0:
        return
    rows = np.unique(np.linspace(0, n - 1, num=min(SAMPLE_SEARCHES, n)).round().astype(np.int64))
    within = 1 if generation.family == "flat" else 3
    k = min(n, within + 8)
    params = search_parameters(None, ef_search=max(HNSW_EF_SEARCH, k) if generation.family == "hnsw" else None)
    distances, labels = generation.index.search(vectors[rows], k, params=params)
    for i, row in enumerate(rows):
        own = generation.id_map.surrogate[row]
        self_score = float(vectors[row] @ vectors[row])
        if own in labels[i][:within]:
            continue
        # Identical vectors (one text in several chunks) tie and FAISS may return any of them,
        # and in a space that is not normalised a longer vector outscores a vector's own: then
        # the best hit must score at least the vector's own, and its surrogate must map to it.
        as_good = float(distances[i][0]) >= self_score - 1e-4
        if not (as_good and np.allclose(generation.index.reconstruct(int(own)), vectors[row], atol=1e-6)):
            raise GenerationBuildError(f"sample search for surrogate {int(own)} did not find it")


# --- load --------------------------------------------------------------------------------------


def load_generation(root: Path, expected: Expected, *, mmap: bool = True) -> Generation:
    """Load `root/<expected.generation_id>` if, and only if, it is exactly what `expected` names.

    Checks, in order and before FAISS reads anything: the manifest exists, hashes to
    `expected.manifest_sha256`, decodes, agrees with itself and with `expected` (id, count, space,
    watermarks); every listed file exists with the recorded size and SHA-256; the id map is sorted,
    unique and within the watermark; the index file's layout, ids and vectors (see
    `recalld.actors.index.layout`). Then FAISS reads it, memory-mapped and read-only when `mmap` (falling
    back to a normal read if mapping fails), and ntotal/d/metric are checked once more.

    Any failure is `GenerationCorrupt` (reason `vector_index_corrupt`); nothing is half-loaded,
    and temporary directories are never looked at.
    """
    if not is_valid_generation_id(expected.generation_id):
        raise GenerationCorrupt(
            Corruption.MANIFEST_INVALID,
            f"{expected.generation_id!r} is not a generation directory name",
            generation_id=expected.generation_id,
        )
    try:
        return _open_generation(root / expected.generation_id, expected, mmap=mmap)
    except OSError as exc:  # unreadable, vanished mid-load, I/O error: not servable either
        raise GenerationCorrupt(
            Corruption.LOAD_EXCEPTION, f"I/O error: {exc}", generation_id=expected.generation_id
        ) from exc


def _open_generation(directory: Path, expected: Expected, *, mmap: bool) -> Generation:
    gid = expected.generation_id
    manifest = _read_manifest(directory, expected)
    for name, entry in sorted(manifest.files.items()):
        check_file(name, entry, size=_regular_file_size(directory / name), sha256=None, generation_id=gid)
    for name, entry in sorted(manifest.files.items()):
        digest, size = _hash_file(directory / name)
        check_file(name, entry, size=size, sha256=digest, generation_id=gid)

    try:
        id_map = IdMap.load(directory / ID_MAP_FILE)
    except Exception as exc:  # whatever numpy/zipfile raise for a garbled archive
        raise GenerationCorrupt(Corruption.LOAD_EXCEPTION, f"{ID_MAP_FILE}: {exc!r}", generation_id=gid) from exc
    _check_id_map(id_map, manifest)

    family = index_family(manifest.index_type)
    layout = inspect_index_file(
        directory / INDEX_FILE,
        family=family,
        hnsw_m=hnsw_m(manifest.index_type),
        dimension=manifest.dimension,
        count=manifest.count,
        surrogates=id_map.surrogate,
        normalized=manifest.space.normalized,
        generation_id=gid,
    )
    index, mmapped = _read_index(directory / INDEX_FILE, mmap=mmap, generation_id=gid)
    if not isinstance(index, faiss.IndexIDMap2) or index.ntotal != manifest.count or index.d != manifest.dimension:
        raise GenerationCorrupt(
            Corruption.LOAD_EXCEPTION,
            f"FAISS read {type(index).__name__} with {index.ntotal} vectors of dimension {index.d}",
            generation_id=gid,
        )
    if index.metric_type != faiss.METRIC_INNER_PRODUCT:
        raise GenerationCorrupt(Corruption.SPACE_MISMATCH, "index metric is not inner product", generation_id=gid)
    return Generation(
        manifest=manifest, path=directory, index=index, id_map=id_map, mmapped=mmapped, ef_search=layout.ef_search
    )


def _read_manifest(directory: Path, expected: Expected) -> Manifest:
    gid = expected.generation_id
    path = directory / MANIFEST_FILE
    size = _regular_file_size(path)
    if size is None:
        raise GenerationCorrupt(Corruption.MISSING_MANIFEST, f"no {MANIFEST_FILE} in {directory}", generation_id=gid)
    if size > MAX_MANIFEST_BYTES:
        raise GenerationCorrupt(Corruption.MANIFEST_INVALID, f"{MANIFEST_FILE} has {size} bytes", generation_id=gid)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise GenerationCorrupt(Corruption.MISSING_MANIFEST, f"{MANIFEST_FILE}: {exc}", generation_id=gid) from exc
    check_manifest_digest(hashlib.sha256(data).hexdigest(), expected)
    manifest = decode_manifest(data, generation_id=gid)
    check_manifest(manifest, expected)
    return manifest


def _check_id_map(id_map: IdMap, manifest: Manifest) -> None:
    gid = manifest.generation_id
    if len(id_map) != manifest.count:
        raise GenerationCorrupt(
            Corruption.COUNT_MISMATCH,
            f"id map has {len(id_map)} rows, the manifest {manifest.count}",
            generation_id=gid,
        )
    surrogates = id_map.surrogate
    if len(surrogates) and (surrogates[0] < 0 or np.any(np.diff(surrogates) <= 0)):
        raise GenerationCorrupt(
            Corruption.ID_MAP_MISMATCH, "id map surrogates are not sorted, unique and >= 0", generation_id=gid
        )
    if len(surrogates) and surrogates[-1] > manifest.source_watermark:
        raise GenerationCorrupt(
            Corruption.WATERMARK_MISMATCH,
            f"surrogate {int(surrogates[-1])} is above the source watermark {manifest.source_watermark}",
            generation_id=gid,
        )


def _read_index(path: Path, *, mmap: bool, generation_id: str) -> tuple[faiss.Index, bool]:
    # IO_FLAG_MMAP_IFC maps flat codes and HNSW graphs in place; IO_FLAG_MMAP only applies to IVF.
    attempts = [(faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY, True)] if mmap else []
    attempts.append((0, False))
    error: Exception | None = None
    for flags, mapped in attempts:
        try:
            # read_index already returns the most derived type; wrapping it again with
            # downcast_index would let the owning proxy (and the C++ index) be freed.
            return faiss.read_index(str(path), flags), mapped
        except Exception as exc:  # FAISS raises RuntimeError; anything else is as fatal here
            error = exc
    raise GenerationCorrupt(
        Corruption.LOAD_EXCEPTION, f"FAISS could not read {INDEX_FILE}: {error}", generation_id=generation_id
    ) from error


# --- files -------------------------------------------------------------------------------------


def manifest_sha256(path: Path) -> str:
    """SHA-256 (hex) of a generation's `manifest.json`; `path` is the directory or the file.

    This is the value the pointer row stores and `Expected.manifest_sha256` carries.
    """
    file = path / MANIFEST_FILE if path.is_dir() else path
    return hashlib.sha256(file.read_bytes()).hexdigest()


def _file_entry(path: Path) -> FileEntry:
    digest, size = _hash_file(path)
    return FileEntry(sha256=digest, size=size)


def _hash_file(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _regular_file_size(path: Path) -> int | None:
    """The size of a regular file (symlinks not followed); None when there is none."""
    try:
        st = path.lstat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
