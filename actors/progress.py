"""What a progress bar over a backlog shows: how much is done of how much, the rate, and the time
left; pure, each poll a new value from the last one.

The bar is fed a count of what is still pending, polled now and then, and work may be added
while it waits. So the total grows when pending rises beyond it, and `done` never goes back.
The rate is the progress over a moving window (the last `WINDOW_S`), not since the start, so a
slow start is forgotten. The estimate counts down between polls and moves toward the window's
own estimate a part of the way each poll (`SMOOTHING`), never by more than `MOST_CHANGE` of
itself plus the time elapsed: a burst of work landing at once, or a pause, bends it, never
makes it jump.
"""

from __future__ import annotations

from dataclasses import dataclass

WINDOW_S = 30.0
"""The rate is the progress over the last this many seconds."""
MIN_SPAN_S = 3.0
"""No rate, and so no estimate, from less than this much time."""
SMOOTHING = 0.3
"""How far one poll moves the shown estimate toward the window's own."""
MOST_CHANGE = 0.1
"""The most one poll changes the shown estimate beyond counting down: this share of it, plus
the seconds since the last poll (so one that has counted down to 0 can rise again)."""


@dataclass(frozen=True, slots=True)
class Estimate:
    total: int
    done: int
    """Never less than at the poll before; equal to `total` once nothing is pending."""
    at: float
    """When this poll was made (any monotonic clock, in seconds)."""
    samples: tuple[tuple[float, int], ...]
    """(time, done) of the polls in the window, and the last one at or before its start."""
    rate: float | None
    """Done per second over the window; None until the window spans `MIN_SPAN_S`."""
    eta_s: float | None
    """Seconds left, smoothed; None while there is no rate, or when nothing moved in the window."""


def begin(pending: int, now: float) -> Estimate:
    """The first poll: nothing done yet of `pending`."""
    pending = max(0, pending)
    return Estimate(pending, 0, now, ((now, 0),), None, 0.0 if pending == 0 else None)


def advance(previous: Estimate, pending: int, now: float) -> Estimate:
    """The next poll: `pending` still to do at time `now` (not before `previous.at`)."""
    pending = max(0, pending)
    # Work added meanwhile grows the total; since it is at least the last `done` plus what is
    # pending now, `done` never falls, whatever pending does.
    total = max(previous.total, previous.done + pending)
    done = total - pending
    # the polls inside the window, and the last at or before its start: the rate spans it whole
    kept = [sample for sample in previous.samples if sample[0] > now - WINDOW_S]
    older = [sample for sample in previous.samples if sample[0] <= now - WINDOW_S]
    samples = (*older[-1:], *kept, (now, done))
    first_at, first_done = samples[0]
    span = now - first_at
    rate = (done - first_done) / span if span >= MIN_SPAN_S else None
    left = total - done
    eta: float | None
    if left == 0:
        eta = 0.0
    elif not rate:
        eta = None
    else:
        window = left / rate
        if previous.eta_s is None:
            eta = window
        else:
            elapsed = now - previous.at
            counted_down = max(0.0, previous.eta_s - elapsed)
            bound = MOST_CHANGE * counted_down + elapsed
            eta = counted_down + max(-bound, min(bound, SMOOTHING * (window - counted_down)))
    return Estimate(total, done, now, samples, rate, eta)
