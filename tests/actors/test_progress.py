"""The progress a bar shows while a backlog is embedded (actors/progress.py): counts that never go
back and end at the total, a rate over a moving window, and an estimate that counts down and
does not jump when a burst of work lands at once."""

from __future__ import annotations

import itertools

import pytest

from recalld.actors.progress import MIN_SPAN_S, MOST_CHANGE, WINDOW_S, Estimate, advance, begin


def run(pendings: list[tuple[float, int]]) -> list[Estimate]:
    """The estimates after each (time, pending) poll, the first one beginning."""
    (start, first), *rest = pendings
    estimates = [begin(first, start)]
    for now, pending in rest:
        estimates.append(advance(estimates[-1], pending, now))
    return estimates


@pytest.mark.parametrize(
    ("polls", "shown"),
    [
        # pending falls: done rises by as much, and the last poll ends at the total
        ([(0, 100), (1, 90), (2, 40), (3, 0)], [(0, 100), (10, 100), (60, 100), (100, 100)]),
        # pending rises (records written meanwhile): the total grows, done never goes back
        ([(0, 100), (1, 90), (2, 95), (3, 40), (4, 0)], [(0, 100), (10, 100), (10, 105), (65, 105), (105, 105)]),
        # nothing pending at all: done at once
        ([(0, 0)], [(0, 0)]),
        # a count that falls below what it was and comes back: the bar holds still
        ([(0, 50), (1, 20), (2, 30), (3, 20), (4, 0)], [(0, 50), (30, 50), (30, 60), (40, 60), (60, 60)]),
    ],
)
def test_counts_never_go_back_and_end_at_the_total(
    polls: list[tuple[float, int]], shown: list[tuple[int, int]]
) -> None:
    estimates = run(polls)
    assert [(e.done, e.total) for e in estimates] == shown


def steady(rate: int, seconds: int, start: int = 6000, t0: float = 0.0) -> list[tuple[float, int]]:
    return [(t0 + t, start - rate * t) for t in range(seconds + 1)]


def test_a_steady_rate_gives_the_exact_estimate_once_there_is_enough_to_go_on() -> None:
    estimates = run(steady(10, 10))
    early = [e.eta_s for e in estimates if e.at < MIN_SPAN_S]
    assert early == [None] * len(early), "no estimate from the first seconds alone"
    for e in estimates[int(MIN_SPAN_S) :]:
        assert e.rate == pytest.approx(10.0)
        assert e.eta_s == pytest.approx((e.total - e.done) / 10.0)


def test_a_burst_moves_the_estimate_a_little_where_the_windows_own_estimate_jumps() -> None:
    polls = steady(10, 10)  # 10 chunks a second: 5,900 left at t=10, 590 s
    polls.append((11.0, polls[-1][1] - 1000))  # a thousand land at once
    *_, before, after = run(polls)
    raw = (after.total - after.done) / after.rate
    counted_down = before.eta_s - 1.0
    assert raw < 0.5 * counted_down, "the window's own estimate halves"
    assert abs(after.eta_s - counted_down) <= MOST_CHANGE * counted_down + 1.0 + 1e-9
    assert after.eta_s < counted_down, "and the shown one does move toward it"


def test_the_rate_is_the_windows_the_slow_start_forgotten() -> None:
    polls = steady(1, 60)  # 1 a second for a minute
    polls += [(60.0 + t, polls[-1][1] - 10 * t) for t in range(1, int(WINDOW_S) + 1)]  # then 10 a second
    last = run(polls)[-1]
    assert last.rate == pytest.approx(10.0)
    # the shown estimate has come down toward left / 10 a step at a time, never jumping
    estimates = run(polls)
    for before, after in itertools.pairwise(estimates[61:]):
        assert before.eta_s is not None and after.eta_s is not None
        counted_down = max(0.0, before.eta_s - (after.at - before.at))
        assert abs(after.eta_s - counted_down) <= MOST_CHANGE * counted_down + (after.at - before.at) + 1e-9


def test_no_progress_over_the_whole_window_gives_no_estimate() -> None:
    polls = steady(10, 5) + [(5.0 + t, 6000 - 50) for t in range(1, int(WINDOW_S) + 2)]
    last = run(polls)[-1]
    assert last.rate == 0.0 and last.eta_s is None


def test_done_is_zero_seconds_left() -> None:
    *_, last = run([(0, 30), (1, 20), (2, 10), (3, 0)])
    assert (last.done, last.total, last.eta_s) == (30, 30, 0.0)
