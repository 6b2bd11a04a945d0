"""bench/lib/second_model.py's ranking of pages from chunk scores: the quality step's USE and
averaged routes rest on it, so a page must count once, by its best chunk, ties by record id."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from bench.lib import second_model
from bench.lib.routes import Corpus

A, B, C = (uuid.UUID(int=i) for i in (1, 2, 3))


def corpus_of(chunk_pages: list[uuid.UUID]) -> Corpus:
    record_ids = sorted(set(chunk_pages), key=str)
    return Corpus(
        pages={rid: f"page-{rid.int}" for rid in record_ids},
        chunk_record=np.array([record_ids.index(r) for r in chunk_pages], dtype=np.int64),
        record_ids=record_ids,
        chunk_text=["" for _ in chunk_pages],
        vectors=np.zeros((len(chunk_pages), 2), dtype=np.float32),
        template_version=1,
    )


@pytest.mark.parametrize(
    ("chunk_pages", "scores", "expected"),
    [
        # a page's best chunk ranks it; its weaker chunks do not list it twice
        ([A, A, B], [0.9, 0.1, 0.5], [(A, 0.9), (B, 0.5)]),
        # a page whose best chunk comes later in the matrix still counts by that chunk
        ([A, B, B], [0.4, 0.2, 0.8], [(B, 0.8), (A, 0.4)]),
        # equal best scores: by record id, as faiss_run orders them
        ([C, A, B], [0.5, 0.5, 0.5], [(A, 0.5), (B, 0.5), (C, 0.5)]),
    ],
)
def test_pages_rank_by_their_best_chunk(
    chunk_pages: list[uuid.UUID], scores: list[float], expected: list[tuple[uuid.UUID, float]]
) -> None:
    ranked = second_model.best_per_page(corpus_of(chunk_pages), np.array(scores, dtype=np.float32))
    assert [(rid, round(s, 6)) for rid, s in ranked] == expected


def test_a_route_stops_at_the_depth_the_fusion_reads() -> None:
    pages = [uuid.UUID(int=i) for i in range(1, second_model.DEPTH + 20)]
    ranked = second_model.best_per_page(corpus_of(pages), np.linspace(1, 0, len(pages), dtype=np.float32))
    assert [rid for rid, _ in ranked] == pages[: second_model.DEPTH]


def test_pages_tied_at_the_depth_are_cut_by_record_id_not_chunk_order() -> None:
    depth = second_model.DEPTH
    above = [uuid.UUID(int=i) for i in range(10, 10 + depth - 1)]
    # two pages tie for the last place; the one with the higher id comes first in the matrix
    low, high = uuid.UUID(int=1), uuid.UUID(int=2)
    chunk_pages = [*above, high, low]
    scores = np.array([*np.linspace(1, 0.5, depth - 1), 0.25, 0.25], dtype=np.float32)
    ranked = second_model.best_per_page(corpus_of(chunk_pages), scores)
    assert [rid for rid, _ in ranked] == [*above, low]
