from __future__ import annotations

import os
import time
from pathlib import Path

import faiss
import numpy as np
import pytest

import recalld.actors.index.generation as generation_module
from recalld.actors.index.generation import (
    GenerationBuildError,
    build_generation,
    load_generation,
    manifest_sha256,
)
from recalld.actors.index.idmap import IdMap
from recalld.actors.index.listing import list_generation_dirs, orphaned_temp_dirs
from recalld.actors.index.manifest import Corruption, Expected, GenerationCorrupt
from tests.support.generations import build, id_map_for, record_uuid, space, unit_vectors


def leftovers(root: Path) -> list[str]:
    return sorted(os.listdir(root)) if root.exists() else []


@pytest.mark.parametrize("factory", ["Flat", "HNSW16"])
@pytest.mark.parametrize("mmap", [True, False])
def test_build_then_load_round_trip(tmp_path: Path, factory: str, mmap: bool) -> None:
    rng = np.random.default_rng(7)
    vectors = unit_vectors(rng, 500, 16)
    surrogates = rng.permutation(500) * 3 + 10  # unordered, with gaps, as a sequence leaves them
    namespaces = ["a" if s % 2 else "b" for s in surrogates]
    id_map = IdMap.from_rows(surrogates, [record_uuid(int(s)) for s in surrogates], list(range(500)), namespaces)

    manifest, expected = build(tmp_path, "gen-1", vectors, id_map, factory=factory, tombstone_watermark=4)
    assert leftovers(tmp_path) == ["gen-1"]
    assert sorted(os.listdir(tmp_path / "gen-1")) == ["idmap.npz", "index.faiss", "manifest.json"]
    assert (manifest.count, manifest.dimension, manifest.index_type, manifest.metric) == (500, 16, factory, "ip")
    assert (manifest.source_watermark, manifest.tombstone_watermark) == (int(surrogates.max()), 4)
    assert manifest.space == space(16) and manifest.space_id == space(16).key
    assert expected.manifest_sha256 == manifest_sha256(tmp_path / "gen-1" / "manifest.json")

    generation = load_generation(tmp_path, expected, mmap=mmap)
    assert generation.mmapped is mmap  # IO_FLAG_MMAP_IFC maps flat and HNSW indexes alike
    assert generation.count == generation.index.ntotal == 500
    assert generation.manifest == manifest
    # Rows are stored sorted by surrogate; each keeps its record, revision and namespace.
    order = np.argsort(surrogates)
    assert np.array_equal(generation.id_map.surrogate, surrogates[order])
    assert np.array_equal(generation.id_map.revision, np.arange(500)[order])
    for row in (0, 250, 499):
        s = int(generation.id_map.surrogate[row])
        assert generation.id_map.record_uuid(row) == record_uuid(s)
        assert generation.id_map.namespace(row) == ("a" if s % 2 else "b")
    # Every stored vector is found as itself, at the id-map row of its surrogate.
    for i in range(0, 500, 50):
        ns = namespaces[i]
        scores, rows, _ = generation.search(vectors[i], 1, namespace=ns, exclude=None)
        assert generation.id_map.surrogate[rows[0]] == surrogates[i] and scores[0] == pytest.approx(1.0, abs=1e-5)


def test_an_empty_generation_builds_and_loads(tmp_path: Path) -> None:
    _, expected = build(tmp_path, "empty", np.empty((0, 8), np.float32), IdMap.empty(), vector_space=space(8))
    generation = load_generation(tmp_path, expected)
    assert generation.count == 0 and generation.namespaces == frozenset()


def refuse(tmp_path: Path, **overrides: object) -> str:
    rng = np.random.default_rng(1)
    args: dict[str, object] = {
        "generation_id": "g",
        "space": space(8),
        "space_id": space(8).key,
        "vectors": unit_vectors(rng, 20, 8),
        "id_map": id_map_for(np.arange(20)),
        "source_watermark": 19,
        "tombstone_watermark": 0,
    }
    args.update(overrides)
    with pytest.raises(GenerationBuildError) as caught:
        build_generation(tmp_path, **args)  # type: ignore[arg-type]
    assert caught.value.reason == "vector_index_build_failed"
    assert leftovers(tmp_path) == [], "a refused build left files behind"
    return caught.value.detail


def with_row(value: float, row: int = 3) -> np.ndarray:
    vectors = unit_vectors(np.random.default_rng(1), 20, 8)
    vectors[row] = value
    return vectors


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"vectors": with_row(np.nan)}, "NaN or Inf"),
        ({"vectors": with_row(np.inf, 19)}, "NaN or Inf"),
        ({"vectors": with_row(-np.inf, 0)}, "NaN or Inf"),
        ({"vectors": with_row(0.0)}, "is zero"),
        ({"vectors": with_row(2.0)}, "norm"),
        ({"vectors": unit_vectors(np.random.default_rng(1), 20, 8).astype(np.float64)}, "not float32"),
        ({"vectors": unit_vectors(np.random.default_rng(1), 20, 9)}, "shape"),
        ({"vectors": unit_vectors(np.random.default_rng(1), 19, 8)}, "19 vectors for 20"),
        ({"id_map": id_map_for([*range(19), 5])}, "duplicate surrogates"),
        ({"id_map": id_map_for(np.arange(20) - 1)}, "negative"),
        ({"source_watermark": 18}, "above the source watermark"),
        ({"space_id": space(8, model="other").key}, "space_id"),
        ({"factory": "IVF4,Flat"}, "unsupported index type"),
        ({"generation_id": ".tmp-sneaky"}, "not a plain directory name"),
        ({"generation_id": "../up"}, "not a plain directory name"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(
    tmp_path: Path, overrides: dict[str, object], says: str
) -> None:
    root = tmp_path / "root"
    assert says in refuse(root, **overrides)


def test_an_existing_generation_is_never_overwritten(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    _, expected = build(tmp_path, "g", unit_vectors(rng, 10, 8), id_map_for(np.arange(10)))
    before = manifest_sha256(tmp_path / "g")
    with pytest.raises(GenerationBuildError, match="already exists"):
        build(tmp_path, "g", unit_vectors(rng, 10, 8), id_map_for(np.arange(10)))
    assert manifest_sha256(tmp_path / "g") == before and leftovers(tmp_path) == ["g"]
    load_generation(tmp_path, expected)


class Boom(Exception):
    pass


@pytest.mark.parametrize("fail_at", [1, 2, 3])
def test_a_build_failing_midway_leaves_nothing(tmp_path: Path, fail_at: int) -> None:
    """An exception from the progress callback (how a caller cancels) removes the temp dir."""
    rng = np.random.default_rng(3)
    n = 16384 * 3
    calls: list[tuple[int, int]] = []

    def progress(done: int, total: int) -> None:
        calls.append((done, total))
        assert any(name.startswith(".tmp-g-") for name in os.listdir(tmp_path)), "builds happen in a temp dir"
        if len(calls) == fail_at:
            raise Boom

    with pytest.raises(Boom):
        build_generation(
            tmp_path,
            generation_id="g",
            space=space(8),
            space_id=space(8).key,
            vectors=unit_vectors(rng, n, 8),
            id_map=id_map_for(np.arange(n)),
            source_watermark=n,
            tombstone_watermark=0,
            progress=progress,
        )
    assert calls[-1] == (16384 * fail_at, n)
    assert leftovers(tmp_path) == []


def test_a_build_whose_written_files_fail_verification_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer bug (here: a garbled index file) is caught by reading the build back."""
    real_write = faiss.write_index

    def garbling_write(index: faiss.Index, path: str) -> None:
        real_write(index, path)
        with open(path, "r+b") as f:
            f.seek(4)
            f.write(b"\x7f\x7f\x7f\x7f")

    monkeypatch.setattr(faiss, "write_index", garbling_write)
    rng = np.random.default_rng(4)
    with pytest.raises(GenerationBuildError, match="failed verification") as caught:
        build(tmp_path, "g", unit_vectors(rng, 50, 8), id_map_for(np.arange(50)))
    assert getattr(caught.value.__cause__, "reason", None) == "vector_index_corrupt"
    assert leftovers(tmp_path) == []


def test_a_failed_sample_search_fails_the_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    vectors = unit_vectors(rng, 50, 8)
    real = generation_module._sample_search
    # Verify against other vectors than the ones indexed: no sample finds itself.
    monkeypatch.setattr(generation_module, "_sample_search", lambda g, v: real(g, unit_vectors(rng, 50, 8)))
    with pytest.raises(GenerationBuildError, match="sample search"):
        build(tmp_path, "g", vectors, id_map_for(np.arange(50)))
    assert leftovers(tmp_path) == []


def test_identical_vectors_pass_the_sample_search(tmp_path: Path) -> None:
    """Two chunks with the same text have the same vector; either may rank first."""
    vectors = np.repeat(unit_vectors(np.random.default_rng(6), 1, 8), 40, axis=0)
    _, expected = build(tmp_path, "g", vectors, id_map_for(np.arange(40)))
    assert load_generation(tmp_path, expected).count == 40


def test_listing_sees_generations_and_old_temp_dirs_only(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    build(tmp_path, "g-2", unit_vectors(rng, 5, 8), id_map_for(np.arange(5)))
    build(tmp_path, "g-1", unit_vectors(rng, 5, 8), id_map_for(np.arange(5)))
    (tmp_path / ".tmp-g-3-abcd").mkdir()
    (tmp_path / ".tmp-g-4-ef01").mkdir()
    (tmp_path / ".tmp-file").write_text("not a dir")
    (tmp_path / "stray-file").write_text("x")
    old = time.time() - 7200
    os.utime(tmp_path / ".tmp-g-3-abcd", (old, old))

    assert list_generation_dirs(tmp_path) == ["g-1", "g-2"]
    assert orphaned_temp_dirs(tmp_path, older_than_s=3600) == [tmp_path / ".tmp-g-3-abcd"]
    assert orphaned_temp_dirs(tmp_path, older_than_s=-1, now=time.time() + 1) == [
        tmp_path / ".tmp-g-3-abcd",
        tmp_path / ".tmp-g-4-ef01",
    ]
    # With the ids that have pointer rows, a generation no row names is an orphan too (a build
    # renamed into place whose row was never written), once it is older than the grace period.
    os.utime(tmp_path / "g-2", (old, old))
    assert orphaned_temp_dirs(tmp_path, older_than_s=3600, known={"g-1"}) == [
        tmp_path / ".tmp-g-3-abcd",
        tmp_path / "g-2",
    ]
    assert orphaned_temp_dirs(tmp_path, older_than_s=3600, known={"g-1", "g-2"}) == [tmp_path / ".tmp-g-3-abcd"]
    assert list_generation_dirs(tmp_path / "missing") == [] and orphaned_temp_dirs(tmp_path / "missing", 0) == []


def test_expected_comes_from_the_manifest_and_its_digest(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    _, expected = build(tmp_path, "g", unit_vectors(rng, 5, 8), id_map_for(np.arange(5)))
    assert expected == Expected(
        generation_id="g",
        manifest_sha256=manifest_sha256(tmp_path / "g"),
        count=5,
        space_id=space(8).key,
        source_watermark=4,
        tombstone_watermark=0,
    )


def test_a_failed_memory_map_falls_back_to_a_normal_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(10)
    _, expected = build(tmp_path, "g", unit_vectors(rng, 20, 8), id_map_for(np.arange(20)))
    real = faiss.read_index
    flags_seen: list[int] = []

    def no_mmap(path: str, flags: int = 0) -> faiss.Index:
        flags_seen.append(flags)
        if flags & faiss.IO_FLAG_MMAP_IFC:
            raise RuntimeError("mmap not supported here")
        return real(path, flags)

    monkeypatch.setattr(faiss, "read_index", no_mmap)
    generation = load_generation(tmp_path, expected)
    assert flags_seen == [faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY, 0]
    assert not generation.mmapped and generation.count == 20


def test_io_errors_while_loading_are_corrupt_not_crashes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(11)
    _, expected = build(tmp_path, "g", unit_vectors(rng, 20, 8), id_map_for(np.arange(20)))

    def failing(path: Path) -> tuple[str, int]:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(generation_module, "_hash_file", failing)
    with pytest.raises(GenerationCorrupt) as caught:
        load_generation(tmp_path, expected)
    assert caught.value.kind == Corruption.LOAD_EXCEPTION and "Input/output" in caught.value.detail
