from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from recalld.actors.kernel.breaker import BreakerState, CircuitBreaker, CircuitOpen
from tests.support.clock import FakeClock

pytestmark = pytest.mark.anyio_backends("asyncio", "trio")


def fail(breaker: CircuitBreaker, times: int = 1) -> None:
    for _ in range(times):
        breaker.failed(breaker.acquire(), "provider_error")


def test_opens_after_n_consecutive_failures(clock: FakeClock) -> None:
    breaker = CircuitBreaker(3, 10.0, clock=clock)
    fail(breaker, 2)
    assert breaker.state is BreakerState.CLOSED
    fail(breaker)
    assert breaker.state is BreakerState.OPEN
    with pytest.raises(CircuitOpen) as caught:
        breaker.acquire()
    assert caught.value.retry_in_s == pytest.approx(10.0)
    with pytest.raises(CircuitOpen):
        breaker.check()
    snap = breaker.snapshot()
    assert snap.opened_total == 1 and snap.last_failure == "provider_error"
    assert snap.retry_in_s == pytest.approx(10.0)


def test_a_success_resets_the_count(clock: FakeClock) -> None:
    breaker = CircuitBreaker(3, 10.0, clock=clock)
    fail(breaker, 2)
    breaker.succeeded(breaker.acquire())
    fail(breaker, 2)
    assert breaker.state is BreakerState.CLOSED


def test_half_open_after_reset_lets_exactly_one_probe_through(clock: FakeClock) -> None:
    breaker = CircuitBreaker(1, 10.0, clock=clock)
    fail(breaker)
    clock.advance(9.99)
    assert breaker.state is BreakerState.OPEN
    clock.advance(0.01)
    assert breaker.state is BreakerState.HALF_OPEN
    breaker.check()  # a probe may go
    probe = breaker.acquire()
    assert probe.probe
    for _ in range(5):
        with pytest.raises(CircuitOpen) as caught:
            breaker.acquire()
        assert caught.value.retry_in_s is None  # the probe is out: no time to wait for
    breaker.succeeded(probe)
    assert breaker.state is BreakerState.CLOSED
    assert not breaker.acquire().probe


def test_failed_probe_reopens_for_another_reset_period(clock: FakeClock) -> None:
    breaker = CircuitBreaker(2, 5.0, clock=clock)
    fail(breaker, 2)
    clock.advance(5.0)
    probe = breaker.acquire()
    breaker.failed(probe, "provider_timeout")
    assert breaker.state is BreakerState.OPEN
    clock.advance(4.9)
    assert breaker.state is BreakerState.OPEN
    clock.advance(0.1)
    assert breaker.state is BreakerState.HALF_OPEN
    assert breaker.snapshot().opened_total == 2


def test_abandoned_probe_frees_the_slot_without_a_verdict(clock: FakeClock) -> None:
    breaker = CircuitBreaker(1, 5.0, clock=clock)
    fail(breaker)
    clock.advance(5.0)
    breaker.abandoned(breaker.acquire())
    assert breaker.state is BreakerState.HALF_OPEN
    assert breaker.acquire().probe


def test_outcomes_of_calls_from_before_the_opening_are_ignored(clock: FakeClock) -> None:
    breaker = CircuitBreaker(2, 5.0, clock=clock)
    old = breaker.acquire()  # in flight while others fail
    fail(breaker, 2)
    breaker.succeeded(old)  # says nothing about the provider now
    assert breaker.state is BreakerState.OPEN
    clock.advance(5.0)
    stale = breaker.acquire()
    breaker.failed(old, "provider_error")
    assert breaker.state is BreakerState.HALF_OPEN
    breaker.succeeded(stale)
    assert breaker.state is BreakerState.CLOSED


@pytest.mark.anyio
async def test_one_probe_under_concurrency() -> None:
    """Many tasks race for the half-open slot at the same instant: exactly one gets through."""
    now = [0.0]
    breaker = CircuitBreaker(1, 1.0, clock=lambda: now[0])
    fail(breaker)
    now[0] = 1.0
    granted: list[bool] = []
    refused: list[CircuitOpen] = []
    release = anyio.Event()

    async def caller() -> None:
        await anyio.lowlevel.checkpoint()
        try:
            permit = breaker.acquire()
        except CircuitOpen as refusal:
            refused.append(refusal)
            return
        granted.append(permit.probe)
        await release.wait()
        breaker.succeeded(permit)

    async with anyio.create_task_group() as tasks:
        for _ in range(50):
            tasks.start_soon(caller)
        await anyio.sleep(0.01)
        assert granted == [True]
        assert len(refused) == 49
        release.set()
    assert breaker.state is BreakerState.CLOSED


def test_rejects_nonsense_settings() -> None:
    with pytest.raises(ValueError):
        CircuitBreaker(0, 1.0)
    with pytest.raises(ValueError):
        CircuitBreaker(1, 0.0)
