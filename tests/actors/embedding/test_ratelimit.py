from __future__ import annotations

import anyio
import pytest

from recalld.actors.embedding.errors import EmbeddingError, Reason
from recalld.actors.embedding.ratelimit import TokenBucket
from tests.support.clock import FakeClock

pytestmark = pytest.mark.anyio_backends("asyncio", "trio")


def test_burst_then_evenly_spaced_reservations(clock: FakeClock) -> None:
    bucket = TokenBucket(2.0, clock=clock)  # 2 calls/s, burst of 2
    waits = [bucket.reserve() for _ in range(5)]
    assert waits == pytest.approx([0.0, 0.0, 0.5, 1.0, 1.5])


def test_tokens_refill_with_time_up_to_the_burst(clock: FakeClock) -> None:
    bucket = TokenBucket(1.0, burst=3.0, clock=clock)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    clock.advance(10.0)  # refills to the burst, not beyond
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve() == pytest.approx(1.0)


def test_refuses_without_taking_when_the_wait_is_too_long(clock: FakeClock) -> None:
    bucket = TokenBucket(1.0, clock=clock)
    assert bucket.reserve() == 0.0
    assert bucket.reserve(max_wait=0.5) is None
    assert bucket.reserve(max_wait=1.0) == pytest.approx(1.0)  # the refusal took nothing


def test_zero_rate_is_unlimited(clock: FakeClock) -> None:
    bucket = TokenBucket(0.0, clock=clock)
    assert all(bucket.reserve() == 0.0 for _ in range(1000))


@pytest.mark.anyio
@pytest.mark.anyio_backends("trio")  # trio's MockClock: the waits are exact, not a real-clock window
async def test_acquire_waits_its_turn_and_refuses_past_the_deadline() -> None:
    bucket = TokenBucket(10.0, burst=1.0)
    start = anyio.current_time()
    for _ in range(3):
        await bucket.acquire()
    assert anyio.current_time() - start == pytest.approx(0.2, abs=1e-9)
    with pytest.raises(EmbeddingError) as caught:
        await bucket.acquire(deadline=anyio.current_time() + 0.01)
    assert caught.value.reason is Reason.RATE_LIMITED
