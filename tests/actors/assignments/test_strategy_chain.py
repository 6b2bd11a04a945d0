"""The strategy chain trust_weighted → mode → latest (actors/assignments/strategy.py), ties at every level."""

from __future__ import annotations

import datetime as dt

import pytest

from recalld.actors.assignments.strategy import Source, Strategy, Vote, choose

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def v(supplier: str, value: str, trust: float, minute: int = 0) -> Vote:
    return Vote(supplier, value, value, trust, T0 + dt.timedelta(minutes=minute))


S = Strategy
CASES = [
    # (votes, value, source, tied)
    ([v("a", "x", 0.5)], "x", Source.TRUST_WEIGHTED, ()),
    ([v("a", "x", 0.9), v("b", "y", 0.5)], "x", Source.TRUST_WEIGHTED, ()),
    ([v("a", "x", 0.4), v("b", "x", 0.4), v("c", "y", 0.7)], "x", Source.TRUST_WEIGHTED, ()),  # summed
    ([v("a", "x", 0.1), v("b", "x", 0.2), v("c", "y", 0.3)], "x", Source.MODE, ()),  # 0.1+0.2 ties 0.3
    ([v("a", "x", 0.5), v("b", "x", 0.5), v("c", "y", 1.0)], "x", Source.MODE, ()),
    # a trust tie among the top two; a third, weaker value takes no part in the mode
    (
        [v("a", "x", 0.5), v("b", "x", 0.5), v("c", "y", 1.0), v("d", "z", 0.1), v("e", "z", 0.1), v("f", "z", 0.1)],
        "x",
        Source.MODE,
        (),
    ),
    ([v("a", "x", 0.5, 1), v("b", "y", 0.5, 2)], "y", Source.LATEST, (S.TRUST_WEIGHTED, S.MODE)),
    ([v("a", "x", 0.5, 3), v("b", "y", 0.5, 2)], "x", Source.LATEST, (S.TRUST_WEIGHTED, S.MODE)),
    # latest ties too: the smallest value, the same in every daemon
    ([v("a", "y", 0.5), v("b", "x", 0.5)], "x", Source.LATEST, (S.TRUST_WEIGHTED, S.MODE, S.LATEST)),
    ([v("b", "x", 0.5), v("a", "y", 0.5)], "x", Source.LATEST, (S.TRUST_WEIGHTED, S.MODE, S.LATEST)),
    ([v("a", "x", 0.0), v("b", "y", 0.0)], "x", Source.LATEST, (S.TRUST_WEIGHTED, S.MODE, S.LATEST)),
]


@pytest.mark.parametrize(("votes", "value", "source", "tied"), CASES)
def test_the_chain(votes: list[Vote], value: str, source: Source, tied: tuple[Strategy, ...]) -> None:
    choice = choose(votes)
    assert (choice.value, choice.source, choice.tied) == (value, source, tied)
    assert choice.disputed == bool(tied)


def test_candidates_carry_their_suppliers_and_summed_trust() -> None:
    choice = choose([v("a", "x", 0.25), v("b", "x", 0.5), v("c", "y", 0.5)])
    assert [(c.value, c.trust, c.suppliers) for c in choice.candidates] == [
        ("x", 0.75, ("a", "b")),
        ("y", 0.5, ("c",)),
    ]


def test_no_votes_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one"):
        choose([])
