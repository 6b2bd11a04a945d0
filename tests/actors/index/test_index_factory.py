"""Which FAISS index a new generation gets (`recalld.actors.index.settings.factory_for`): a configured
factory as it is, and for `auto` a flat index below the threshold and an HNSW graph from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from recalld.actors.index.manifest import index_family
from recalld.actors.index.settings import AUTO, AUTO_HNSW, AUTO_HNSW_FROM, IndexSettings, factory_for

CASES = [
    # (factory, vectors, expected)
    (AUTO, 0, "Flat"),
    (AUTO, AUTO_HNSW_FROM - 1, "Flat"),
    (AUTO, AUTO_HNSW_FROM, AUTO_HNSW),
    (AUTO, 10 * AUTO_HNSW_FROM, AUTO_HNSW),
    ("Flat", 10 * AUTO_HNSW_FROM, "Flat"),
    ("HNSW16", 1, "HNSW16"),
]


@pytest.mark.parametrize(("factory", "vectors", "expected"), CASES)
def test_a_configured_factory_stands_and_auto_turns_to_a_graph_at_its_threshold(
    factory: str, vectors: int, expected: str
) -> None:
    assert factory_for(factory, vectors) == expected


def test_auto_is_the_default_and_names_a_flat_index_or_a_graph_a_generation_may_use() -> None:
    assert IndexSettings(root=Path("/generations")).factory == AUTO
    assert {index_family(factory_for(AUTO, n)) for n in (0, AUTO_HNSW_FROM)} == {"flat", "hnsw"}


def test_the_threshold_may_be_lowered() -> None:
    assert factory_for(AUTO, 5, hnsw_from=5) == AUTO_HNSW
    assert factory_for(AUTO, 4, hnsw_from=5) == "Flat"
