"""Shared builders for the index tests: spaces, unit vectors, id maps and generations."""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid
from pathlib import Path

import msgspec
import numpy as np
import numpy.typing as npt

from recalld.actors.index.generation import build_generation, manifest_sha256
from recalld.actors.index.idmap import IdMap
from recalld.actors.index.manifest import MANIFEST_FILE, Expected, FileEntry, Manifest, encode_manifest
from recalld.actors.ports.embedding import VectorSpace
from recalld.actors.ports.index import GenerationRow


def space(dimension: int = 16, model: str = "test-model", template_version: int = 1) -> VectorSpace:
    return VectorSpace(
        provider="test", model=model, dimension=dimension, normalized=True, template_version=template_version
    )


def unit_vectors(rng: np.random.Generator, n: int, d: int) -> npt.NDArray[np.float32]:
    x = rng.standard_normal((n, d)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def record_uuid(record: int) -> uuid.UUID:
    return uuid.UUID(int=record + 1)


def id_map_for(
    surrogates: npt.ArrayLike, *, records: npt.ArrayLike | None = None, namespaces: list[str] | str = "ns"
) -> IdMap:
    surr = np.asarray(surrogates, dtype=np.int64)
    recs = surr if records is None else np.asarray(records)
    names = [namespaces] * len(surr) if isinstance(namespaces, str) else namespaces
    return IdMap.from_rows(surr, [record_uuid(int(r)) for r in recs], [1] * len(surr), names)


def build(
    root: Path,
    generation_id: str,
    vectors: npt.NDArray[np.float32],
    id_map: IdMap,
    *,
    vector_space: VectorSpace | None = None,
    factory: str = "Flat",
    tombstone_watermark: int = 0,
) -> tuple[Manifest, Expected]:
    vs = vector_space or space(vectors.shape[1])
    watermark = int(id_map.surrogate.max()) if len(id_map) else 0
    manifest = build_generation(
        root,
        generation_id=generation_id,
        space=vs,
        space_id=vs.key,
        vectors=vectors,
        id_map=id_map,
        source_watermark=watermark,
        tombstone_watermark=tombstone_watermark,
        factory=factory,
    )
    return manifest, Expected.from_manifest(manifest, manifest_sha256(root / generation_id))


def rebless(directory: Path, **changes: object) -> Expected:
    """Rewrite a generation's manifest as a careless writer would: record whatever the files now
    are (sizes and digests), apply `changes`, and return the pointer row for the result."""
    manifest = msgspec.json.decode((directory / MANIFEST_FILE).read_bytes(), type=Manifest)
    files = {}
    for name in manifest.files:
        data = (directory / name).read_bytes()
        files[name] = FileEntry(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    manifest = msgspec.structs.replace(manifest, files=files, **changes)
    (directory / MANIFEST_FILE).write_bytes(encode_manifest(manifest))
    return Expected.from_manifest(manifest, manifest_sha256(directory))


def generation_row(root: Path, manifest: Manifest) -> GenerationRow:
    """The catalogue row of a generation just built under `root`, as the builder records it."""
    return GenerationRow(
        id=manifest.generation_id,
        space_id=manifest.space_id,
        directory=str(root / manifest.generation_id),
        manifest_sha256=manifest_sha256(root / manifest.generation_id),
        index_type=manifest.index_type,
        count=manifest.count,
        source_watermark=manifest.source_watermark,
        tombstone_watermark=manifest.tombstone_watermark,
        built_at=dt.datetime.now(dt.UTC),
    )
