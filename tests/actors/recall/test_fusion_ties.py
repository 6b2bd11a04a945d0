"""Fused ties settled by a label stable across re-indexing (the source path), never by the random
record ids alone; and pages cut so that no tie is split between two of them. Table-driven."""

from __future__ import annotations

import random

import pytest

from recalld.actors.recall.fusion import Fused, reciprocal_rank, settle_ties, tie_end, tied


def entry(key: str, score: float, **ranks: int) -> Fused[str]:
    return Fused(key, score, dict(ranks))


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (entry("a", 0.5, fts=1, vector=3), entry("b", 0.5, fts=3, vector=1), True),  # mirror images
        (entry("a", 0.5, fts=1), entry("b", 0.5, fts=1), True),  # a rank full text shared
        (entry("a", 0.5, fts=1), entry("b", 0.5, vector=2), False),  # the best rank decides
        (entry("a", 0.5, fts=1), entry("b", 0.4, fts=1), False),  # the score decides
    ],
)
def test_tied_means_only_the_key_told_them_apart(a: Fused[str], b: Fused[str], expected: bool) -> None:
    assert tied(a, b) is expected
    assert tied(b, a) is expected


# Keys play the random record ids: their order is the opposite of the labels' in every row.
TIED = [entry("k1", 0.5, fts=1), entry("k2", 0.5, fts=1), entry("k3", 0.5, fts=1)]


@pytest.mark.parametrize(
    ("fused", "labels", "expected"),
    [
        # a run of ties goes by label, whatever the ids say
        (TIED, {"k1": "c.txt", "k2": "b.txt", "k3": "a.txt"}, ["k3", "k2", "k1"]),
        # no label (a record stored without a source path): after the labelled, then by key
        (TIED, {"k1": None, "k2": "b.txt", "k3": "a.txt"}, ["k3", "k2", "k1"]),
        (TIED, {"k2": "b.txt"}, ["k2", "k1", "k3"]),
        # equal labels (one file in two namespaces): the key decides, as before
        (TIED, {"k1": "x", "k2": "x", "k3": "a"}, ["k3", "k1", "k2"]),
        # what the score or the best rank ordered keeps its place, labels notwithstanding
        (
            [entry("k1", 0.9, fts=1), entry("k2", 0.5, vector=1), entry("k3", 0.5, vector=2)],
            {"k1": "z", "k2": "y", "k3": "a"},
            ["k1", "k2", "k3"],
        ),
        # two runs, each settled on its own; the entry between them stays
        (
            [
                entry("k1", 0.9, fts=1),
                entry("k2", 0.9, vector=1),
                entry("k3", 0.6, fts=2),
                entry("k4", 0.5, fts=3),
                entry("k5", 0.5, vector=3),
            ],
            {"k1": "b", "k2": "a", "k3": "a", "k4": "d", "k5": "c"},
            ["k2", "k1", "k3", "k5", "k4"],
        ),
        ([], {}, []),
    ],
)
def test_settle_ties_orders_each_run_by_label(
    fused: list[Fused[str]], labels: dict[str, str | None], expected: list[str]
) -> None:
    assert [f.key for f in settle_ties(fused, labels)] == expected


@pytest.mark.parametrize(
    ("end", "expected"),
    [
        (0, 0),
        (1, 1),  # a | b=b=b: not in a run
        (2, 4),  # would cut the run b, c, d
        (3, 4),
        (4, 4),
        (5, 5),
        (9, 5),  # past the end
    ],
)
def test_tie_end_never_cuts_a_run(end: int, expected: int) -> None:
    fused = [
        entry("a", 0.9, fts=1),
        entry("b", 0.5, fts=2),
        entry("c", 0.5, fts=2),
        entry("d", 0.5, vector=2),
        entry("e", 0.1, vector=3),
    ]
    assert tie_end(fused, end) == expected


def test_the_same_files_indexed_again_answer_alike() -> None:
    # Full text scores three pages holding an identifier in their title alike (ts_rank saturates)
    # and the vector route missed them: fusion can tell them apart only by id. Each "ingest"
    # draws new ids; the settled order is the same every time.
    paths = ["pg_stat.txt", "monitoring.txt", "runtime-config.txt"]
    orders = set()
    rng = random.Random(7)
    for _ in range(20):
        ids = {path: f"{rng.random():.12f}" for path in paths}
        fused = reciprocal_rank(
            {"fts": [(ids[p], 2.5) for p in paths], "vector": [(f"other{i}", 0.9 - i / 10) for i in range(3)]},
            k=30,
        )
        labels = {ids[p]: p for p in paths} | {f"other{i}": f"other{i}.txt" for i in range(3)}
        orders.add(tuple(labels[f.key] for f in settle_ties(fused, labels)))
    # other0.txt, the vector route's first, ties with them too (1 / (k + 1) each)
    assert orders == {("monitoring.txt", "other0.txt", "pg_stat.txt", "runtime-config.txt", "other1.txt", "other2.txt")}
