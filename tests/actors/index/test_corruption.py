"""Every kind of damage to a generation, injected at least 20 times with fixed seeds.

Each time the outcome must be a clean `GenerationCorrupt` with reason `vector_index_corrupt`
(never a crash, never a partially loaded index), and the undamaged generation next to it must
still load. "Re-blessed" cases model a buggy or hostile writer: the damage is recorded in the
manifest and the pointer row, so checksums match and only the content checks can catch it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import numpy as np
import pytest

import recalld.actors.index.generation as generation_module
from recalld.actors.index.generation import load_generation, manifest_sha256
from recalld.actors.index.layout import inspect_index_file
from recalld.actors.index.listing import list_generation_dirs
from recalld.actors.index.manifest import Corruption, Expected, GenerationCorrupt
from tests.support.generations import build, id_map_for, rebless, space, unit_vectors

SEEDS = range(20)
GOOD = "good"
N, D = 120, 16


@pytest.fixture(scope="module", params=["Flat", "HNSW8"])
def pristine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Expected]:
    root = tmp_path_factory.mktemp("pristine")
    rng = np.random.default_rng(0)
    namespaces = ["a" if i % 3 else "b" for i in range(N)]
    _, expected = build(
        root,
        GOOD,
        unit_vectors(rng, N, D),
        id_map_for(np.arange(N) * 2 + 1, namespaces=namespaces),
        factory=request.param,
    )
    return root, expected


@pytest.fixture
def fresh(pristine: tuple[Path, Expected], tmp_path: Path) -> Callable[[str], tuple[Path, Path, Expected]]:
    """A fresh copy of the good generation per injection: (root, its directory, pointer row)."""
    source_root, expected = pristine

    def copy(name: str) -> tuple[Path, Path, Expected]:
        root = tmp_path / name
        shutil.copytree(source_root, root)
        return root, root / GOOD, expected

    return copy


def payload_offsets(directory: Path, expected: Expected) -> tuple[int, int]:
    manifest = msgspec.json.decode((directory / "manifest.json").read_bytes())
    surrogates = np.load(directory / "idmap.npz")["surrogate"]
    layout = inspect_index_file(
        directory / "index.faiss",
        family="hnsw" if manifest["index_type"].startswith("HNSW") else "flat",
        hnsw_m=None,
        dimension=D,
        count=N,
        surrogates=surrogates,
        normalized=True,
        generation_id=GOOD,
    )
    return layout.vectors_offset, layout.id_map_offset


def assert_corrupt(root: Path, expected: Expected, *kinds: Corruption) -> GenerationCorrupt:
    with pytest.raises(GenerationCorrupt) as caught:
        load_generation(root, expected)
    error = caught.value
    assert error.reason == "vector_index_corrupt"
    assert str(error).startswith("vector_index_corrupt: ")
    if kinds:
        assert error.kind in kinds, f"{error.kind}: {error.detail}"
    return error


def flip(path: Path, rng: np.random.Generator, *, start: int = 0, stop: int | None = None, size: int = 1) -> None:
    data = bytearray(path.read_bytes())
    stop = len(data) if stop is None else stop
    offset = int(rng.integers(start, max(start + 1, stop - size + 1)))
    for i in range(offset, min(offset + size, len(data))):
        data[i] ^= int(rng.integers(1, 256))
    path.write_bytes(bytes(data))


@pytest.fixture(autouse=True)
def good_generation_still_loads(pristine: tuple[Path, Expected]) -> Iterator[None]:
    yield
    root, expected = pristine
    assert load_generation(root, expected).count == N


@pytest.mark.parametrize("seed", SEEDS)
def test_missing_manifest(fresh: Callable[[str], tuple[Path, Path, Expected]], seed: int) -> None:
    root, directory, expected = fresh(f"m{seed}")
    variant = seed % 5
    if variant == 0:
        (directory / "manifest.json").unlink()
    elif variant == 1:
        (directory / "manifest.json").rename(directory / "manifest.json.bak")
    elif variant == 2:
        (directory / "manifest.json").unlink()
        (directory / "manifest.json").mkdir()
    elif variant == 3:
        # A symlink is not a manifest, even to a real one.
        (directory / "manifest.json").rename(root / "elsewhere.json")
        (directory / "manifest.json").symlink_to(root / "elsewhere.json")
    else:
        shutil.rmtree(directory)
    assert_corrupt(root, expected, Corruption.MISSING_MANIFEST)


@pytest.mark.parametrize("seed", SEEDS)
def test_manifest_checksum_mismatch(fresh: Callable[[str], tuple[Path, Path, Expected]], seed: int) -> None:
    root, directory, expected = fresh(f"c{seed}")
    rng = np.random.default_rng(seed)
    path = directory / "manifest.json"
    if seed % 4 == 3:
        path.write_bytes(path.read_bytes()[: int(rng.integers(0, path.stat().st_size))])
    elif seed % 4 == 2:
        path.write_bytes(path.read_bytes() + b" " * int(rng.integers(1, 10)))
    else:
        flip(path, rng, size=int(rng.integers(1, 4)))
    assert_corrupt(root, expected, Corruption.MANIFEST_CHECKSUM)


@pytest.mark.parametrize("seed", SEEDS)
def test_file_checksum_mismatch(fresh: Callable[[str], tuple[Path, Path, Expected]], seed: int) -> None:
    root, directory, expected = fresh(f"f{seed}")
    rng = np.random.default_rng(seed)
    name = ("index.faiss", "idmap.npz")[seed % 2]
    flip(directory / name, rng, size=int(rng.integers(1, 9)))
    assert_corrupt(root, expected, Corruption.FILE_CHECKSUM)


@pytest.mark.parametrize("seed", SEEDS)
def test_truncated_or_missing_data_file(fresh: Callable[[str], tuple[Path, Path, Expected]], seed: int) -> None:
    root, directory, expected = fresh(f"t{seed}")
    rng = np.random.default_rng(seed)
    name = ("index.faiss", "idmap.npz")[seed % 2]
    path = directory / name
    if seed % 5 == 4:
        path.unlink()
        assert_corrupt(root, expected, Corruption.MISSING_FILE)
        return
    cut = int(rng.integers(0, path.stat().st_size))
    with open(path, "r+b") as f:
        f.truncate(cut)
    assert_corrupt(root, expected, Corruption.FILE_SIZE)


@pytest.mark.parametrize("seed", SEEDS)
def test_truncated_index_file_recorded_as_if_complete(
    fresh: Callable[[str], tuple[Path, Path, Expected]], seed: int
) -> None:
    """A writer that stopped midway but still wrote a manifest for what it had."""
    root, directory, _ = fresh(f"tr{seed}")
    rng = np.random.default_rng(seed)
    path = directory / ("index.faiss", "idmap.npz")[seed % 4 == 3]
    cut = int(rng.integers(0, path.stat().st_size))
    with open(path, "r+b") as f:
        f.truncate(cut)
    assert_corrupt(root, rebless(directory))


@pytest.mark.parametrize("seed", SEEDS)
def test_count_mismatch(fresh: Callable[[str], tuple[Path, Path, Expected]], seed: int) -> None:
    root, directory, expected = fresh(f"n{seed}")
    rng = np.random.default_rng(seed)
    wrong = N + int(rng.choice([-N, -5, -1, 1, 7, 10**6]))
    if seed % 2:
        # The pointer row disagrees with an intact generation.
        assert_corrupt(root, msgspec.structs.replace(expected, count=wrong), Corruption.COUNT_MISMATCH)
    else:
        # The manifest (and the row made from it) claims another count than the files hold.
        assert_corrupt(root, rebless(directory, count=wrong), Corruption.COUNT_MISMATCH)


@pytest.mark.parametrize("seed", SEEDS)
def test_wrong_dimension(fresh: Callable[[str], tuple[Path, Path, Expected]], seed: int) -> None:
    root, directory, _ = fresh(f"d{seed}")
    rng = np.random.default_rng(seed)
    other = int(rng.choice([1, 8, 15, 17, 32, 384]))
    if seed % 2:
        # Manifest and row say another space of another dimension; the index file disagrees.
        vs = space(other)
        assert_corrupt(
            root, rebless(directory, space=vs, space_id=vs.key, dimension=other), Corruption.DIMENSION_MISMATCH
        )
    else:
        # The manifest's dimension contradicts its own space.
        assert_corrupt(root, rebless(directory, dimension=other), Corruption.DIMENSION_MISMATCH)


@pytest.mark.parametrize("seed", SEEDS)
def test_space_mismatch(fresh: Callable[[str], tuple[Path, Path, Expected]], seed: int) -> None:
    root, directory, expected = fresh(f"s{seed}")
    other = space(D, model=f"model-{seed}", template_version=seed + 2)
    if seed % 2:
        assert_corrupt(root, msgspec.structs.replace(expected, space_id=other.key), Corruption.SPACE_MISMATCH)
    else:
        # A manifest whose space_id is not its space's key.
        assert_corrupt(root, rebless(directory, space=other), Corruption.SPACE_MISMATCH)


@pytest.mark.parametrize("seed", SEEDS)
def test_non_finite_vectors(fresh: Callable[[str], tuple[Path, Path, Expected]], seed: int) -> None:
    root, directory, expected = fresh(f"nan{seed}")
    rng = np.random.default_rng(seed)
    vectors_offset, _ = payload_offsets(directory, expected)
    row, col = int(rng.integers(0, N)), int(rng.integers(0, D))
    value = np.array([[np.nan, np.inf, -np.inf][seed % 3]], dtype="<f4").tobytes()
    data = bytearray((directory / "index.faiss").read_bytes())
    at = vectors_offset + (row * D + col) * 4
    data[at : at + 4] = value
    (directory / "index.faiss").write_bytes(bytes(data))
    assert_corrupt(root, rebless(directory), Corruption.NON_FINITE_VECTORS)


@pytest.mark.parametrize("seed", SEEDS)
def test_garbage_with_a_correct_checksum(fresh: Callable[[str], tuple[Path, Path, Expected]], seed: int) -> None:
    """Garbled structure (type codes, headers, lengths, ids) recorded with matching checksums."""
    root, directory, expected = fresh(f"g{seed}")
    rng = np.random.default_rng(seed)
    path = directory / "index.faiss"
    vectors_offset, id_map_offset = payload_offsets(directory, expected)
    size = path.stat().st_size
    variant = seed % 5
    if variant == 0:
        path.write_bytes(rng.integers(0, 256, int(rng.integers(1, 2 * size)), dtype=np.uint8).tobytes())
    elif variant == 1:
        flip(path, rng, start=0, stop=vectors_offset, size=int(rng.integers(1, 9)))  # headers, graph, lengths
    elif variant == 2:
        flip(path, rng, start=id_map_offset - 8, stop=size, size=int(rng.integers(1, 9)))  # id map
    elif variant == 3:
        path.write_bytes(path.read_bytes() + rng.integers(0, 256, int(rng.integers(1, 64)), dtype=np.uint8).tobytes())
    else:
        path = directory / "idmap.npz"
        flip(path, rng, size=int(rng.integers(1, 64)))
    assert_corrupt(root, rebless(directory))


@pytest.mark.parametrize("seed", SEEDS)
def test_faiss_read_exceptions_become_corrupt(
    fresh: Callable[[str], tuple[Path, Path, Expected]], seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should FAISS reject a file our layout check passed (a format change), that is corrupt too."""
    root, directory, _ = fresh(f"x{seed}")
    rng = np.random.default_rng(seed)
    monkeypatch.setattr(generation_module, "inspect_index_file", lambda *a, **k: None)
    data = bytearray((directory / "index.faiss").read_bytes())
    # A wrong type code: FAISS refuses before it allocates anything.
    data[0:4] = bytes(rng.integers(0, 256, 4, dtype=np.uint8))
    (directory / "index.faiss").write_bytes(bytes(data))
    assert_corrupt(root, rebless(directory), Corruption.LOAD_EXCEPTION)


@pytest.mark.parametrize("seed", SEEDS)
def test_watermark_mismatch(fresh: Callable[[str], tuple[Path, Path, Expected]], seed: int) -> None:
    root, directory, expected = fresh(f"w{seed}")
    rng = np.random.default_rng(seed)
    delta = int(rng.choice([-1000, -3, -1, 1, 2, 999]))
    variant = seed % 3
    if variant == 0:
        bad = msgspec.structs.replace(expected, source_watermark=expected.source_watermark + delta)
    elif variant == 1:
        bad = msgspec.structs.replace(expected, tombstone_watermark=expected.tombstone_watermark + delta)
    else:
        # A manifest whose watermark is below surrogates it contains.
        bad = rebless(directory, source_watermark=expected.source_watermark - abs(delta))
    assert_corrupt(root, bad, Corruption.WATERMARK_MISMATCH)


@pytest.mark.parametrize("seed", SEEDS)
def test_orphaned_temp_dirs_never_affect_loading(
    fresh: Callable[[str], tuple[Path, Path, Expected]], seed: int
) -> None:
    root, directory, expected = fresh(f"o{seed}")
    rng = np.random.default_rng(seed)
    # A build killed at some step: a temp dir with a partial (or even complete) copy, garbage,
    # and for some seeds a temp dir named after the very generation that must load.
    temp = root / f".tmp-{GOOD if seed % 2 else 'next'}-{seed:04x}"
    shutil.copytree(directory, temp)
    for name in sorted(os.listdir(temp))[: seed % 4]:
        (temp / name).unlink()
    if seed % 3 == 0 and (temp / "index.faiss").exists():
        flip(temp / "index.faiss", rng, size=64)
    (root / f".tmp-junk-{seed}").write_bytes(rng.integers(0, 256, 100, dtype=np.uint8).tobytes())

    generation = load_generation(root, expected)
    assert generation.path == directory and generation.count == N
    assert GOOD in list_generation_dirs(root)
    assert not any(n.startswith(".tmp-") for n in list_generation_dirs(root))
    # A pointer row can never name a temp dir.
    assert_corrupt(root, msgspec.structs.replace(expected, generation_id=temp.name), Corruption.MANIFEST_INVALID)
    assert manifest_sha256(directory) == expected.manifest_sha256
