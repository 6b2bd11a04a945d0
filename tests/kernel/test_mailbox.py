from __future__ import annotations

import anyio
import pytest
from anyio.abc import TaskStatus

from actors.kernel import (
    ActorUnavailable,
    ChildSpec,
    EventKind,
    Mailbox,
    ReplyAlreadySent,
    Supervisor,
    SupervisorEvent,
    serve,
)

pytestmark = pytest.mark.anyio


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
