"""Where a vector search runs (actors/index/placement.py), table-driven: only an ordinary search
(unfiltered, answered by FAISS's own top-k, an ordinary k) may run on the loop; a handle's first
search in a thread, cheap handles on the loop, one costly search sends the next ones to threads,
and a new handle starts unknown."""

from __future__ import annotations

import pytest

from recalld.actors.index.placement import (
    INLINE_MAX_K_RECORDS,
    INLINE_MAX_S,
    SearchPlacement,
    ordinary_search,
    scored_exactly,
)

A, B = object(), object()
CHEAP = INLINE_MAX_S / 2
COSTLY = INLINE_MAX_S * 10


@pytest.mark.parametrize(
    ("observed", "handle", "inline"),
    [
        ([], A, False),  # nothing known: a thread
        ([(A, CHEAP)], A, True),
        ([(A, INLINE_MAX_S)], A, True),  # the bound itself is allowed
        ([(A, INLINE_MAX_S * 1.01)], A, False),
        ([(A, CHEAP)], B, False),  # a new handle starts unknown
        ([(A, CHEAP), (B, CHEAP)], A, False),  # only the latest handle is remembered
        ([(A, CHEAP), (A, COSTLY)], A, False),  # one costly search: threads at once
        ([(A, COSTLY), (A, CHEAP)], A, False),  # and not forgotten by the next cheap one
        ([(A, COSTLY)] + [(A, CHEAP)] * 22, A, True),  # ten times the bound, forgotten after 22 searches
        ([(A, COSTLY)] + [(A, CHEAP)] * 21, A, False),
        ([(A, 0.005)] + [(A, CHEAP)] * 9, A, True),  # 5 ms: 9 searches in threads (DECAY's docstring)
        ([(A, 0.005)] + [(A, CHEAP)] * 8, A, False),
        ([(A, COSTLY), (B, CHEAP)], B, True),  # a new handle does not inherit the old cost
    ],
)
def test_placement(observed: list[tuple[object, float]], handle: object, inline: bool) -> None:
    placement = SearchPlacement()
    for seen, cost in observed:
        placement.observe(seen, cost)
    assert placement.inline(handle) is inline


def test_estimate_never_below_the_latest_cost() -> None:
    placement = SearchPlacement()
    for cost in (0.0001, 0.002, 0.0001, 0.0003, 0.004):
        placement.observe(A, cost)
        estimate = placement.estimate_s
        assert estimate is not None and estimate >= cost


@pytest.mark.parametrize("decay", [-0.1, 1.0, 1.5])
def test_decay_out_of_range_is_refused(decay: float) -> None:
    with pytest.raises(ValueError, match="decay"):
        SearchPlacement(decay=decay)


@pytest.mark.parametrize(
    ("exact", "k_records", "ordinary"),
    [
        (False, 1, True),
        (False, 30, True),  # the vector route's default cap
        (False, INLINE_MAX_K_RECORDS, True),
        (False, INLINE_MAX_K_RECORDS + 1, False),  # a large k or an over-fetch round
        (False, 120, False),  # the default cap's first over-fetch round (4x)
        (True, 1, False),  # filtered to `within` records, or a small namespace scored exactly
        (True, 30, False),
    ],
)
def test_only_an_ordinary_search_may_run_on_the_loop(exact: bool, k_records: int, ordinary: bool) -> None:
    assert ordinary_search(exact=exact, k_records=k_records) is ordinary


class Part:
    """A handle's part as `scored_exactly` reads it: scored exactly or not, fetching 2 x k."""

    def __init__(self, exact_below: int) -> None:
        self.exact_below = exact_below  # scored exactly while the fetch is under this
        self.fetched: list[int] = []

    def first_fetch(self, namespace: str, k_records: int, *, exact: bool = False) -> int:
        return 2 * k_records

    def scored_exactly(self, namespace: str, k: int) -> bool:
        self.fetched.append(k)
        return k < self.exact_below


WALKED, SCANNED = 0, 10**9


@pytest.mark.parametrize(
    ("parts", "exact"),
    [
        ([], False),
        ([None], False),  # a handle without a base
        ([Part(WALKED)], False),
        ([Part(SCANNED)], True),
        ([Part(WALKED), Part(SCANNED)], True),  # any part scored exactly makes the search exact
        ([None, Part(WALKED), Part(WALKED)], False),
    ],
)
def test_a_search_is_exact_when_any_part_scores_its_namespace_exactly(parts: list[Part | None], exact: bool) -> None:
    assert scored_exactly(parts, "ns", 7) is exact


def test_a_part_is_asked_about_its_first_fetch() -> None:
    part = Part(WALKED)
    scored_exactly([part], "ns", 7)
    assert part.fetched == [14]
