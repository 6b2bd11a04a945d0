from __future__ import annotations

import math

import anyio
import pytest
from anyio.abc import TaskStatus

from recalld.actors.kernel import (
    ActorUnavailable,
    ChildSpec,
    EventKind,
    Mailbox,
    ReplyAlreadySent,
    Supervisor,
    SupervisorEvent,
    serve,
)

pytestmark = [pytest.mark.anyio, pytest.mark.anyio_backends("asyncio", "trio")]


async def double(request: int) -> int:
    if request < 0:
        raise ValueError(f"negative: {request}")
    return 2 * request


async def test_call_returns_the_actors_reply_to_each_caller(unit: float) -> None:
    mailbox: Mailbox[int, int] = Mailbox()
    replies: dict[int, int] = {}

    async def caller(n: int) -> None:
        replies[n] = await mailbox.call(n, timeout=10 * unit)

    async with anyio.create_task_group() as tg:
        await tg.start(serve, mailbox, double)
        async with anyio.create_task_group() as callers:
            for n in range(5):
                callers.start_soon(caller, n)
        tg.cancel_scope.cancel()

    assert replies == {n: 2 * n for n in range(5)}


async def test_a_handler_error_is_raised_in_the_caller_and_the_actor_keeps_serving(unit: float) -> None:
    mailbox: Mailbox[int, int] = Mailbox()

    async with anyio.create_task_group() as tg:
        await tg.start(serve, mailbox, double)
        with pytest.raises(ValueError, match="negative: -1"):
            await mailbox.call(-1, timeout=10 * unit)
        assert await mailbox.call(4, timeout=10 * unit) == 8
        tg.cancel_scope.cancel()


async def test_cast_is_handled_in_order_without_waiting(unit: float) -> None:
    mailbox: Mailbox[str, list[str]] = Mailbox()
    seen: list[str] = []

    async def record(request: str) -> list[str]:
        if request != "get":
            seen.append(request)
        return list(seen)

    # No actor yet: casts only queue, so returning proves they did not wait for handling.
    await mailbox.cast("one")
    await mailbox.cast("two")
    assert seen == []
    async with anyio.create_task_group() as tg:
        await tg.start(serve, mailbox, record)
        assert await mailbox.call("get", timeout=10 * unit) == ["one", "two"]
        tg.cancel_scope.cancel()


async def test_a_failing_cast_ends_serve_because_nobody_else_would_see_it(unit: float) -> None:
    mailbox: Mailbox[int, int] = Mailbox()
    await mailbox.cast(-1)

    with anyio.fail_after(10 * unit), pytest.raises(ValueError, match="negative"):
        await serve(mailbox, double)


async def test_call_times_out_and_the_actor_survives_the_abandoned_call(unit: float) -> None:
    mailbox: Mailbox[str, str] = Mailbox()
    release = anyio.Event()
    handled: list[str] = []

    async def slow(request: str) -> str:
        if request == "slow":
            await release.wait()
        handled.append(request)
        return request

    async with anyio.create_task_group() as tg:
        await tg.start(serve, mailbox, slow)
        with pytest.raises(TimeoutError):
            await mailbox.call("slow", timeout=unit)
        release.set()
        # The late reply to the caller that gave up is dropped, not an error in the actor.
        assert await mailbox.call("next", timeout=10 * unit) == "next"
        assert handled == ["slow", "next"]
        tg.cancel_scope.cancel()


async def test_timeout_covers_waiting_for_room_in_a_full_mailbox(unit: float) -> None:
    mailbox: Mailbox[int, int] = Mailbox(capacity=1)
    await mailbox.cast(1)

    began = anyio.current_time()
    # The outer deadline only catches a call that ignores its own timeout.
    with anyio.fail_after(10 * unit), pytest.raises(TimeoutError):
        await mailbox.call(2, timeout=unit)
    assert anyio.current_time() - began >= unit * 0.9


async def test_a_call_in_flight_when_the_actor_is_cancelled_gets_actor_unavailable(unit: float) -> None:
    mailbox: Mailbox[str, str] = Mailbox(name="embedder")
    taken = anyio.Event()

    async def hang(request: str) -> str:
        taken.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async with anyio.create_task_group() as tg:
        actor = anyio.CancelScope()

        async def run_actor(*, task_status: TaskStatus[None]) -> None:
            with actor:
                await serve(mailbox, hang, task_status=task_status)

        await tg.start(run_actor)

        async def kill_when_taken() -> None:
            await taken.wait()
            actor.cancel()

        tg.start_soon(kill_when_taken)
        with pytest.raises(ActorUnavailable, match="embedder") as unavailable:
            await mailbox.call("work", timeout=10 * unit)
        assert unavailable.value.__cause__ is None


async def test_a_crashed_actor_fails_its_in_flight_call_and_its_restart_serves_the_same_mailbox(
    unit: float,
) -> None:
    mailbox: Mailbox[str, str] = Mailbox()
    restarted = anyio.Event()
    incarnations = 0

    def on_event(event: SupervisorEvent) -> None:
        if event.kind is EventKind.STARTED and incarnations == 2:
            restarted.set()

    async def actor(*, task_status: TaskStatus[object]) -> None:
        nonlocal incarnations
        incarnations += 1
        async with mailbox.receiving() as inbox:
            task_status.started()
            async for envelope in inbox:
                if envelope.request == "poison":
                    raise RuntimeError("poisoned")
                envelope.reply(f"{envelope.request} from #{incarnations}")

    supervisor = Supervisor([ChildSpec("actor", actor)], on_event=on_event)
    async with anyio.create_task_group() as tg:
        await tg.start(supervisor.run)
        with pytest.raises(ActorUnavailable) as unavailable:
            await mailbox.call("poison", timeout=10 * unit)
        assert isinstance(unavailable.value.__cause__, RuntimeError)
        with anyio.fail_after(10 * unit):
            await restarted.wait()
        assert await mailbox.call("ping", timeout=10 * unit) == "ping from #2"
        tg.cancel_scope.cancel()


async def test_a_call_sent_while_no_actor_is_receiving_waits_for_the_next_one(unit: float) -> None:
    mailbox: Mailbox[int, int] = Mailbox()

    async def actor_arrives_later() -> None:
        await anyio.sleep(unit)
        await serve(mailbox, double)

    async with anyio.create_task_group() as tg:
        tg.start_soon(actor_arrives_later)
        began = anyio.current_time()
        assert await mailbox.call(21, timeout=10 * unit) == 42
        assert anyio.current_time() - began >= unit * 0.9
        tg.cancel_scope.cancel()


async def test_replying_twice_is_an_error_and_the_first_reply_stands(unit: float) -> None:
    mailbox: Mailbox[str, str] = Mailbox()
    second_reply: list[BaseException] = []

    async def actor(*, task_status: TaskStatus[None]) -> None:
        async with mailbox.receiving() as inbox:
            task_status.started()
            async for envelope in inbox:
                envelope.reply("first")
                try:
                    envelope.reply("second")
                except ReplyAlreadySent as exc:
                    second_reply.append(exc)

    async with anyio.create_task_group() as tg:
        await tg.start(actor)
        assert await mailbox.call("x", timeout=10 * unit) == "first"
        assert len(second_reply) == 1
        tg.cancel_scope.cancel()


async def test_a_call_withdrawn_while_queued_is_never_delivered_and_frees_its_room(unit: float) -> None:
    mailbox: Mailbox[str, str] = Mailbox(capacity=1)
    with pytest.raises(TimeoutError):
        await mailbox.call("gave up", timeout=unit)  # nobody receives: it times out while queued
    assert mailbox.queued == 0
    await mailbox.cast("next")  # the room is free again: this does not block

    async with mailbox.receiving() as inbox:
        taken = await inbox.receive()
    assert taken.request == "next"


async def test_the_actor_sees_a_caller_that_gave_up_after_the_call_was_taken(unit: float) -> None:
    mailbox: Mailbox[str, str] = Mailbox()
    gave_up = anyio.Event()
    async with anyio.create_task_group() as tg, mailbox.receiving() as inbox:

        async def impatient() -> None:
            with pytest.raises(TimeoutError):
                await mailbox.call("work", timeout=unit)
            gave_up.set()

        tg.start_soon(impatient)
        envelope = await inbox.receive()
        assert not envelope.caller_gone
        with anyio.fail_after(10 * unit):
            await gave_up.wait()
        assert envelope.caller_gone
        envelope.reply("late")  # dropped, not an error


@pytest.mark.parametrize(
    ("queued", "limit", "taken", "left"),
    [
        ([1, 1, 1], 10, [[1, 1, 1]], []),
        ([3, 3, 3], 7, [[3, 3]], [3]),
        ([2, 5, 1], 6, [[2]], [5, 1]),  # the heavy one is not overtaken by the light one behind it
        ([5], 4, [[]], [5]),  # the first alone does not fit: nothing taken, it stays first
        ([1, 1, 1, 1, 1], 2, [[1, 1], [1, 1], [1]], []),
    ],
)
async def test_receive_batch_takes_in_order_while_the_weight_fits(
    queued: list[int], limit: int, taken: list[list[int]], left: list[int]
) -> None:
    mailbox: Mailbox[int, None] = Mailbox(capacity=math.inf)
    for weight in queued:
        await mailbox.cast(weight)
    async with mailbox.receiving() as inbox:
        for expected in taken:
            batch = await inbox.receive_batch(limit, weight=lambda n: n)
            assert [e.request for e in batch] == expected
        mailbox.close()
        rest = [e.request for e in inbox.receive_batch_nowait(math.inf)]
    assert rest == left


async def test_receive_batch_waits_for_the_first_request_then_takes_only_what_is_queued(unit: float) -> None:
    mailbox: Mailbox[int, None] = Mailbox()
    async with anyio.create_task_group() as tg, mailbox.receiving() as inbox:

        async def send_later() -> None:
            await anyio.sleep(unit)
            await mailbox.cast(1)
            await mailbox.cast(2)

        tg.start_soon(send_later)
        with anyio.fail_after(10 * unit):
            batch = await inbox.receive_batch(10)
        assert [e.request for e in batch] == [1, 2]


async def test_lanes_earlier_lane_first_fifo_within_a_lane() -> None:
    mailbox: Mailbox[str, None] = Mailbox(lanes=3)
    for request, lane in [("bulk 1", 2), ("check 1", 1), ("bulk 2", 2), ("query 1", 0), ("query 2", 0)]:
        await mailbox.cast(request, lane=lane)
    async with mailbox.receiving() as inbox:
        first = await inbox.receive()
        rest = await inbox.receive_batch(10)
    assert [first.request] + [e.request for e in rest] == ["query 1", "query 2", "check 1", "bulk 1", "bulk 2"]


async def test_a_batch_does_not_pass_a_heavy_request_for_a_later_lane() -> None:
    mailbox: Mailbox[int, None] = Mailbox(lanes=2)
    await mailbox.cast(1, lane=0)
    await mailbox.cast(5, lane=0)
    await mailbox.cast(1, lane=1)
    async with mailbox.receiving() as inbox:
        batch = await inbox.receive_batch(3, weight=lambda n: n)
    assert [e.request for e in batch] == [1]
    assert mailbox.queued == 2


async def test_receive_lane_takes_one_lane_only_its_head_whatever_it_weighs() -> None:
    mailbox: Mailbox[int, None] = Mailbox(lanes=3)
    for request, lane in [(7, 2), (1, 2), (1, 1), (9, 1), (2, 2)]:
        await mailbox.cast(request, lane=lane)
    async with mailbox.receiving() as inbox:
        check = await inbox.receive_lane([10, 10, 3], weight=lambda n: n)
        bulk = await inbox.receive_lane([10, 10, 3], weight=lambda n: n)
        bulk_rest = await inbox.receive_lane([10, 10, 3], weight=lambda n: n)
    # lane 1 first, never mixed with lane 2; lane 2's heavy head goes alone, the rest after it
    assert (check[0], [e.request for e in check[1]]) == (1, [1, 9])
    assert (bulk[0], [e.request for e in bulk[1]]) == (2, [7])
    assert (bulk_rest[0], [e.request for e in bulk_rest[1]]) == (2, [1, 2])
    assert mailbox.queued == 0


async def test_receive_batch_of_one_lane_leaves_the_others() -> None:
    mailbox: Mailbox[str, None] = Mailbox(lanes=2)
    await mailbox.cast("bulk", lane=1)
    async with mailbox.receiving() as inbox:
        assert await inbox.receive_batch(5, lane=0) == []
        await mailbox.cast("query", lane=0)
        assert [e.request for e in await inbox.receive_batch(5, lane=0)] == ["query"]
    assert mailbox.queued == 1


async def test_an_unknown_lane_is_refused_before_anything_is_queued() -> None:
    mailbox: Mailbox[str, None] = Mailbox(lanes=2)
    with pytest.raises(ValueError, match="no lane 2"):
        await mailbox.cast("x", lane=2)
    assert mailbox.queued == 0


async def test_blocked_senders_get_room_in_the_order_they_came(unit: float) -> None:
    mailbox: Mailbox[int, None] = Mailbox(capacity=1)
    await mailbox.cast(0)
    async with anyio.create_task_group() as tg:
        for n in (1, 2, 3):
            tg.start_soon(mailbox.cast, n)
            await anyio.wait_all_tasks_blocked()  # so that they block in this order
        received: list[int] = []
        async with mailbox.receiving() as inbox:
            with anyio.fail_after(10 * unit):
                while len(received) < 4:
                    received.append((await inbox.receive()).request)
    assert received == [0, 1, 2, 3]


async def test_close_delivers_what_is_queued_then_ends_receiving_and_refuses_senders(unit: float) -> None:
    mailbox: Mailbox[int, None] = Mailbox(capacity=2)
    await mailbox.cast(1)
    await mailbox.cast(2)
    blocked: list[BaseException] = []

    async def blocked_sender() -> None:
        try:
            await mailbox.cast(3)
        except anyio.ClosedResourceError as exc:
            blocked.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(blocked_sender)
        await anyio.wait_all_tasks_blocked()
        mailbox.close()
    assert len(blocked) == 1
    with anyio.fail_after(10 * unit), pytest.raises(anyio.ClosedResourceError):
        await mailbox.cast(4)
    async with mailbox.receiving() as inbox:
        assert [e.request async for e in inbox] == [1, 2]
        with pytest.raises(anyio.EndOfStream):
            await inbox.receive_batch(10)


async def test_fail_queued_fails_waiting_callers_with_the_actors_error(unit: float) -> None:
    mailbox: Mailbox[str, str] = Mailbox()
    errors: list[BaseException] = []

    async def caller() -> None:
        try:
            await mailbox.call("work", timeout=10 * unit)
        except LookupError as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(caller)
        await anyio.wait_all_tasks_blocked()
        mailbox.close()
        mailbox.fail_queued(LookupError("not serving"))
    assert [str(e) for e in errors] == ["not serving"]
    assert mailbox.queued == 0


async def test_post_keeps_several_calls_in_flight_and_serve_skips_withdrawn_ones(unit: float) -> None:
    mailbox: Mailbox[int, int] = Mailbox()
    first = await mailbox.post(1)
    second = await mailbox.post(-5)
    dropped = await mailbox.post(3)
    mailbox.withdraw(dropped)
    handled: list[int] = []

    async def record(request: int) -> int:
        handled.append(request)
        return await double(request)

    async with anyio.create_task_group() as tg:
        await tg.start(serve, mailbox, record)
        with anyio.fail_after(10 * unit):
            await first.wait()
            await second.wait()
        tg.cancel_scope.cancel()
    assert first.result() == 2
    with pytest.raises(ValueError, match="negative"):
        second.result()
    assert handled == [1, -5]


async def test_cast_nowait_coalesces_wake_ups_in_a_mailbox_of_one() -> None:
    mailbox: Mailbox[str, None] = Mailbox(capacity=1)
    mailbox.cast_nowait("changed")
    with pytest.raises(anyio.WouldBlock):
        mailbox.cast_nowait("changed again")  # one wake-up pending is enough
    async with mailbox.receiving() as inbox:
        assert [e.request for e in await inbox.receive_batch(math.inf)] == ["changed"]
    mailbox.cast_nowait("later")
    assert mailbox.queued == 1
