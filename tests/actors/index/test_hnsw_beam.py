"""The HNSW beam (`[index] hnsw_ef_search`) reaches FAISS: a narrow one finds less of the exact
top k than a wide one, on real FAISS HNSW graphs; a search given no beam uses the default, never
a narrower one stored in the generation file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from recalld.actors.index.generation import build_generation, load_generation, manifest_sha256
from recalld.actors.index.handle import Handle
from recalld.actors.index.manifest import Expected
from recalld.actors.index.settings import HNSW_EF_SEARCH
from tests.support.generations import id_map_for, space, unit_vectors

STORED_BEAM = 16
"""The beam the fixture's generation file stores: narrower than HNSW_EF_SEARCH, so that a search
with no beam of its own tells the stored one and the default apart."""


def _recall_at_10(handle: Handle, queries: np.ndarray, exact: list[set[int]], ef_search: int | None) -> float:
    found = [
        {hit.surrogate for hit in handle.search(q, k_records=10, namespace="ns", ef_search=ef_search)} for q in queries
    ]
    return float(np.mean([len(f & e) / 10 for f, e in zip(found, exact, strict=True)]))


@pytest.fixture(scope="module")
def hnsw(tmp_path_factory: pytest.TempPathFactory) -> tuple[Handle, np.ndarray, list[set[int]]]:
    # Random directions in 48 dimensions have no clusters to follow: the graph walk needs its
    # beam, so recall tells the beams apart (6,000 vectors: above the exact-scoring threshold).
    rng = np.random.default_rng(24)
    vectors = unit_vectors(rng, 6_000, 48)
    queries = unit_vectors(rng, 60, 48)
    surrogates = np.arange(1, len(vectors) + 1, dtype=np.int64)
    root: Path = tmp_path_factory.mktemp("beam")
    manifest = build_generation(
        root,
        generation_id="g",
        space=space(48),
        space_id=space(48).key,
        vectors=vectors,
        id_map=id_map_for(surrogates),
        source_watermark=len(vectors),
        tombstone_watermark=0,
        factory="HNSW8",
        hnsw_ef_search=STORED_BEAM,
    )
    expected = Expected.from_manifest(manifest, manifest_sha256(root / "g"))
    handle = Handle.of(load_generation(root, expected))
    exact = [set(surrogates[np.argsort(-(vectors @ q), kind="stable")[:10]].tolist()) for q in queries]
    return handle, queries, exact


def test_a_wider_beam_finds_more_of_the_exact_top_10(hnsw: tuple[Handle, np.ndarray, list[set[int]]]) -> None:
    handle, queries, exact = hnsw
    narrow = _recall_at_10(handle, queries, exact, ef_search=1)  # the beam is never below the hits asked for
    wide = _recall_at_10(handle, queries, exact, ef_search=1_000)
    assert wide >= 0.97
    assert wide - narrow >= 0.1, (narrow, wide)


def test_without_a_beam_the_default_one_applies(hnsw: tuple[Handle, np.ndarray, list[set[int]]]) -> None:
    handle, queries, exact = hnsw
    unasked = _recall_at_10(handle, queries, exact, ef_search=None)
    assert unasked == _recall_at_10(handle, queries, exact, ef_search=HNSW_EF_SEARCH)
    # the stored beam finds less, so a search that took it would fail the line above
    assert unasked > _recall_at_10(handle, queries, exact, ef_search=STORED_BEAM)
