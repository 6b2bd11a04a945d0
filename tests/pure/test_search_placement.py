"""Where a vector search runs (actors/index/placement.py), table-driven: a handle's first search
in a thread, cheap handles on the loop, one costly search sends the next ones to threads, and a
new handle starts unknown."""

from __future__ import annotations

import pytest

from actors.index.placement import INLINE_MAX_S, SearchPlacement

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
        ([(A, COSTLY)] + [(A, CHEAP)] * 22, A, True),  # ten times the bound, forgotten after about 22 searches
        ([(A, COSTLY)] + [(A, CHEAP)] * 20, A, False),
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
