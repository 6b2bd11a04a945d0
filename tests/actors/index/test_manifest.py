from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from recalld.actors.index.manifest import (
    Corruption,
    Expected,
    FileEntry,
    GenerationCorrupt,
    Manifest,
    check_file,
    check_manifest,
    check_manifest_digest,
    check_watermarks_advance,
    decode_manifest,
    encode_manifest,
    index_family,
    is_valid_generation_id,
)
from tests.support.generations import space

SHA = "ab" * 32
VS = space(8)


def manifest(**changes: object) -> Manifest:
    base = Manifest(
        format_version=1,
        generation_id="g1",
        space=VS,
        space_id=VS.key,
        index_type="Flat",
        metric="ip",
        dimension=8,
        count=10,
        source_watermark=100,
        tombstone_watermark=7,
        built_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        builder_version="test",
        files={"index.faiss": FileEntry(SHA, 10), "idmap.npz": FileEntry(SHA, 20)},
    )
    return msgspec.structs.replace(base, **changes)


EXPECTED = Expected.from_manifest(manifest(), SHA)


def test_manifest_round_trips_through_its_bytes() -> None:
    data = encode_manifest(manifest())
    assert decode_manifest(data) == manifest()
    assert b'"bytes": 10' in data and b'"built_at": "2026-01-02T03:04:05Z"' in data


@pytest.mark.parametrize(
    ("expected", "kind"),
    [
        (msgspec.structs.replace(EXPECTED, generation_id="g2"), Corruption.GENERATION_MISMATCH),
        (msgspec.structs.replace(EXPECTED, count=11), Corruption.COUNT_MISMATCH),
        (msgspec.structs.replace(EXPECTED, space_id=space(8, model="other").key), Corruption.SPACE_MISMATCH),
        (msgspec.structs.replace(EXPECTED, source_watermark=101), Corruption.WATERMARK_MISMATCH),
        (msgspec.structs.replace(EXPECTED, source_watermark=99), Corruption.WATERMARK_MISMATCH),
        (msgspec.structs.replace(EXPECTED, tombstone_watermark=8), Corruption.WATERMARK_MISMATCH),
    ],
)
def test_every_pointer_row_mismatch_is_corrupt(expected: Expected, kind: Corruption) -> None:
    with pytest.raises(GenerationCorrupt) as caught:
        check_manifest(manifest(), expected)
    assert caught.value.reason == "vector_index_corrupt" and caught.value.kind == kind


def test_a_matching_pointer_row_passes() -> None:
    check_manifest(manifest(), EXPECTED)
    check_manifest_digest(SHA, EXPECTED)
    with pytest.raises(GenerationCorrupt, match="manifest_checksum"):
        check_manifest_digest("cd" * 32, EXPECTED)


@pytest.mark.parametrize(
    ("changes", "kind"),
    [
        ({"format_version": 2}, Corruption.MANIFEST_INVALID),
        ({"generation_id": ".tmp-g1-abcd"}, Corruption.MANIFEST_INVALID),
        ({"generation_id": "../escape"}, Corruption.MANIFEST_INVALID),
        ({"space_id": space(8, model="other").key}, Corruption.SPACE_MISMATCH),
        ({"dimension": 9}, Corruption.DIMENSION_MISMATCH),
        ({"index_type": "IVF100,PQ8"}, Corruption.MANIFEST_INVALID),
        ({"count": -1}, Corruption.COUNT_MISMATCH),
        ({"files": {"index.faiss": FileEntry(SHA, 10)}}, Corruption.MANIFEST_INVALID),
        (
            {"files": {"index.faiss": FileEntry(SHA, 1), "idmap.npz": FileEntry(SHA, 1), "x": FileEntry(SHA, 1)}},
            Corruption.MANIFEST_INVALID,
        ),
        ({"files": {"index.faiss": FileEntry("zz", 10), "idmap.npz": FileEntry(SHA, 20)}}, Corruption.MANIFEST_INVALID),
    ],
)
def test_a_manifest_that_contradicts_itself_is_corrupt(changes: dict[str, object], kind: Corruption) -> None:
    with pytest.raises(GenerationCorrupt) as caught:
        decode_manifest(encode_manifest(manifest(**changes)))
    assert caught.value.kind == kind


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"{",
        b"[]",
        b'{"format_version": 1}',
        b"\xff\xfe",
        encode_manifest(manifest())[:-20],
        encode_manifest(manifest()).replace(b'"count"', b'"extra": 1, "count"'),
    ],
)
def test_undecodable_manifests_are_corrupt(data: bytes) -> None:
    with pytest.raises(GenerationCorrupt) as caught:
        decode_manifest(data)
    assert caught.value.kind == Corruption.MANIFEST_INVALID


@pytest.mark.parametrize(
    ("size", "sha", "kind"),
    [
        (None, None, Corruption.MISSING_FILE),
        (9, None, Corruption.FILE_SIZE),
        (11, SHA, Corruption.FILE_SIZE),
        (10, "cd" * 32, Corruption.FILE_CHECKSUM),
    ],
)
def test_file_checks(size: int | None, sha: str | None, kind: Corruption) -> None:
    with pytest.raises(GenerationCorrupt) as caught:
        check_file("index.faiss", FileEntry(SHA, 10), size=size, sha256=sha, generation_id="g1")
    assert caught.value.kind == kind
    check_file("index.faiss", FileEntry(SHA, 10), size=10, sha256=SHA, generation_id="g1")
    check_file("index.faiss", FileEntry(SHA, 10), size=10, sha256=None, generation_id="g1")


@pytest.mark.parametrize(
    ("source", "tombstone", "space_id", "ok"),
    [
        (100, 7, VS.key, True),
        (150, 9, VS.key, True),
        (99, 7, VS.key, False),
        (100, 6, VS.key, False),
        (1, 0, "vs1-other", True),
    ],
)
def test_watermarks_never_go_backwards_within_a_space(source: int, tombstone: int, space_id: str, ok: bool) -> None:
    candidate = msgspec.structs.replace(
        EXPECTED, generation_id="g2", source_watermark=source, tombstone_watermark=tombstone, space_id=space_id
    )
    if ok:
        check_watermarks_advance(EXPECTED, candidate)
    else:
        with pytest.raises(GenerationCorrupt, match="watermark_mismatch"):
            check_watermarks_advance(EXPECTED, candidate)


@pytest.mark.parametrize(
    ("factory", "family"),
    [
        ("Flat", "flat"),
        ("HNSW32", "hnsw"),
        ("HNSW16,Flat", "hnsw"),
        ("IVF64,Flat", None),
        ("HNSW32,SQ8", None),
        ("flat", None),
        ("HNSW0", None),
    ],
)
def test_only_flat_and_hnsw_flat_are_generation_index_types(factory: str, family: str | None) -> None:
    if family is None:
        with pytest.raises(ValueError):
            index_family(factory)
    else:
        assert index_family(factory) == family


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("g1", True),
        ("2026-01-02T03-04-05_vs1-abc", True),
        (".tmp-g1-ab", False),
        ("", False),
        ("a/b", False),
        ("..", False),
        ("-x", False),
        ("x" * 129, False),
    ],
)
def test_generation_ids_are_plain_directory_names(name: str, ok: bool) -> None:
    assert is_valid_generation_id(name) is ok
