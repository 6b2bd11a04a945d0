"""`Carried`: which call embedding ahead carries a title, so that a check takes a concurrent
create's vector from it rather than embedding the title again. Pure logic over `Ahead` values;
tests/services/test_titles_ahead.py runs it through the record service over PostgreSQL."""

from __future__ import annotations

import anyio
import numpy as np
import pytest

from recalld.actors.embedding.errors import EmbeddingError, Reason
from recalld.actors.ports.embedding import VectorSpace
from recalld.services.duplicates_ahead import Ahead, Carried

pytestmark = [pytest.mark.anyio]

SPACE = VectorSpace(provider="local", model="titles", dimension=2, normalized=True, template_version=1)
OTHER = VectorSpace(provider="local", model="other", dimension=2, normalized=True, template_version=1)


def ended(ahead: Ahead, space: VectorSpace | None = SPACE, error: EmbeddingError | None = None) -> Ahead:
    """`ahead` as its call leaves it: each title's vector, or the error."""
    if error is None and space is not None:
        ahead.vectors = {norm: np.full(2, at, dtype=np.float32) for at, norm in enumerate(ahead.norms)}
        ahead.space = space
    ahead.error = error
    ahead.done.set()
    return ahead


async def test_a_title_is_carried_while_its_call_runs_and_after_it_gave_its_vector() -> None:
    carried = Carried()
    running, done = Ahead(["a", "b"]), Ahead(["c"])
    failed, gave_up = Ahead(["d"]), Ahead(["e"])
    for ahead in (running, done, failed, gave_up):
        carried.add(ahead)
    ended(done)
    ended(failed, error=EmbeddingError(Reason.PROVIDER_TIMEOUT, "late"))
    ended(gave_up, space=None)  # its write was refused: the call was cancelled
    assert [norm for norm in "abcdef" if norm in carried] == ["a", "b", "c"]


async def test_vectors_wait_for_a_running_call_and_only_until_the_deadline() -> None:
    carried = Carried()
    running, stuck = Ahead(["a"]), Ahead(["b"])
    carried.add(running)
    carried.add(stuck)
    async with anyio.create_task_group() as tasks:

        async def end_soon() -> None:
            await anyio.sleep(0.05)
            ended(running)

        tasks.start_soon(end_soon)
        with anyio.fail_after(5):
            found = await carried.vectors(["a", "b"], SPACE.key, anyio.current_time() + 0.5)
    assert list(found) == ["a"]  # `b`'s call never ended: left out at the deadline
    assert found["a"].tolist() == [0.0, 0.0]


async def test_only_vectors_of_the_space_asked_for_are_taken() -> None:
    carried = Carried()
    carried.add(ended(Ahead(["a"]), space=OTHER))
    assert await carried.vectors(["a"], SPACE.key, anyio.current_time() + 1) == {}
    assert carried.ready(SPACE.key)("a") is None
    assert carried.ready(OTHER.key)("a") is not None


async def test_ready_answers_without_waiting_for_a_call_that_runs() -> None:
    carried = Carried()
    running, done = Ahead(["a"]), Ahead(["b", "c"])
    carried.add(running)
    carried.add(ended(done))
    ready = carried.ready(SPACE.key)
    assert ready("a") is None and ready("x") is None
    assert [vector.tolist() for vector in (ready("b"), ready("c")) if vector is not None] == [[0.0, 0.0], [1.0, 1.0]]


async def test_the_oldest_titles_are_forgotten_past_the_capacity() -> None:
    carried = Carried(capacity=3)
    carried.add(ended(Ahead(["a", "b"])))
    carried.add(ended(Ahead(["c", "d"])))
    assert [norm for norm in "abcd" if norm in carried] == ["b", "c", "d"]
    carried.add(ended(Ahead(["b"])))  # carried again: the newest
    carried.add(ended(Ahead(["e"])))
    assert [norm for norm in "abcde" if norm in carried] == ["b", "d", "e"]
