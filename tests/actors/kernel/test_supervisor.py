from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest
from anyio.abc import TaskGroup, TaskStatus

from recalld.actors.kernel import (
    ChildSpec,
    ChildState,
    EventKind,
    Restart,
    Strategy,
    Supervisor,
    SupervisorEvent,
    SupervisorGaveUp,
    SupervisorOptions,
    stop_requested,
)

pytestmark = [pytest.mark.anyio, pytest.mark.anyio_backends("asyncio", "trio")]


class Boom(Exception):
    pass


class Recorder:
    """An ``on_event`` sink the test can wait on."""

    def __init__(self, patience: float) -> None:
        self.events: list[SupervisorEvent] = []
        self._patience = patience
        self._changed = anyio.Event()

    def __call__(self, event: SupervisorEvent) -> None:
        self.events.append(event)
        self._changed.set()
        self._changed = anyio.Event()

    def count(self, kind: EventKind, child: str) -> int:
        return sum(1 for e in self.events if e.kind is kind and e.child == child)

    def of(self, child: str) -> list[EventKind]:
        return [e.kind for e in self.events if e.child == child]

    async def wait_for(self, kind: EventKind, child: str, count: int = 1) -> None:
        with anyio.fail_after(self._patience):
            while self.count(kind, child) < count:
                await self._changed.wait()


class Child:
    """A child that logs its life ("start", "ready", "stop" when cancelled) and ends on cue.

    ``fail_first``: that many runs raise Boom before signalling ready. ``crash_after``: the first
    ``crash_runs`` runs raise Boom that long after ready. ``gate``: when set, a run waits on it
    before signalling ready.
    """

    def __init__(
        self,
        name: str,
        log: list[str],
        *,
        ready_delay: float = 0.0,
        fail_first: int = 0,
        crash_after: float | None = None,
        crash_runs: int = 1_000_000,
    ) -> None:
        self.name = name
        self.log = log
        self.ready_delay = ready_delay
        self.fail_first = fail_first
        self.crash_after = crash_after
        self.crash_runs = crash_runs
        self.gate: anyio.Event | None = None
        self.starts = 0
        self._end: anyio.Event | None = None
        self._raise = False

    def spec(self, **kwargs: Any) -> ChildSpec:
        return ChildSpec(self.name, self, **kwargs)

    def crash(self) -> None:
        assert self._end is not None, f"{self.name} is not running"
        self._raise = True
        self._end.set()

    def finish(self) -> None:
        assert self._end is not None, f"{self.name} is not running"
        self._raise = False
        self._end.set()

    async def __call__(self, *, task_status: TaskStatus[object]) -> None:
        self.starts += 1
        run = self.starts
        self.log.append(f"start {self.name}")
        self._end = anyio.Event()
        try:
            await anyio.sleep(self.ready_delay)
            if self.gate is not None:
                await self.gate.wait()
            if run <= self.fail_first:
                raise Boom(f"{self.name} failed to start")
            task_status.started()
            self.log.append(f"ready {self.name}")
            if self.crash_after is not None and run <= self.crash_runs:
                await anyio.sleep(self.crash_after)
                raise Boom(f"{self.name} crashed")
            await self._end.wait()
            if self._raise:
                raise Boom(f"{self.name} crashed")
        except anyio.get_cancelled_exc_class():
            self.log.append(f"stop {self.name}")
            raise


def children(log: list[str], *names: str, **kwargs: Any) -> list[Child]:
    return [Child(name, log, **kwargs) for name in names]


# The deadlines below turn a broken supervisor into a failing test instead of a hanging one.


async def start(tg: TaskGroup, supervisor: Supervisor, unit: float) -> None:
    with anyio.fail_after(100 * unit):
        await tg.start(supervisor.run)


async def run_until_it_gives_up(supervisor: Supervisor, unit: float) -> SupervisorGaveUp:
    with anyio.fail_after(100 * unit), pytest.raises(SupervisorGaveUp) as gave_up:
        await supervisor.run()
    return gave_up.value


async def test_children_start_in_order_each_after_the_previous_is_ready(unit: float) -> None:
    log: list[str] = []
    a, b, c = children(log, "a", "b", "c", ready_delay=unit)
    supervisor = Supervisor([a.spec(), b.spec(), c.spec()])

    async with anyio.create_task_group() as tg:
        await start(tg, supervisor, unit)
        log.append("supervisor ready")
        tg.cancel_scope.cancel()

    assert log[:7] == [
        "start a",
        "ready a",
        "start b",
        "ready b",
        "start c",
        "ready c",
        "supervisor ready",
    ]


async def test_status_shows_starting_then_restarting_while_a_child_is_down(unit: float) -> None:
    log: list[str] = []
    a, b = children(log, "a", "b")
    b.gate = anyio.Event()
    events = Recorder(100 * unit)
    supervisor = Supervisor([a.spec(), b.spec()], on_event=events)
    assert supervisor.status() == {"a": ChildState.STOPPED, "b": ChildState.STOPPED}

    async with anyio.create_task_group() as tg:
        tg.start_soon(supervisor.run)
        await events.wait_for(EventKind.STARTED, "a")
        assert supervisor.status() == {"a": ChildState.RUNNING, "b": ChildState.STARTING}

        b.gate.set()
        await events.wait_for(EventKind.STARTED, "b")
        assert supervisor.status() == {"a": ChildState.RUNNING, "b": ChildState.RUNNING}

        b.gate = anyio.Event()
        b.crash()
        await events.wait_for(EventKind.RESTARTED, "b")
        assert supervisor.status() == {"a": ChildState.RUNNING, "b": ChildState.RESTARTING}

        b.gate.set()
        await events.wait_for(EventKind.STARTED, "b", 2)
        assert supervisor.status() == {"a": ChildState.RUNNING, "b": ChildState.RUNNING}
        assert supervisor.alive
        tg.cancel_scope.cancel()

    assert supervisor.status() == {"a": ChildState.STOPPED, "b": ChildState.STOPPED}


def draining_child(name: str, log: list[str], drain: float) -> ChildSpec:
    """Opts in to a graceful stop and spends ``drain`` finishing in-flight work once asked."""

    async def start(*, task_status: TaskStatus[object]) -> None:
        stop = stop_requested()
        task_status.started()
        await stop.wait()
        log.append(f"draining {name}")
        await anyio.sleep(drain)
        log.append(f"drained {name}")

    return ChildSpec(name, start, shutdown_timeout=3 * drain)


async def test_cancellation_stops_children_one_at_a_time_in_reverse_order(
    unit: float, lasted: Callable[[float, float], bool]
) -> None:
    log: list[str] = []
    supervisor = Supervisor([draining_child(name, log, unit) for name in ("a", "b", "c")])

    async with anyio.create_task_group() as tg:
        await start(tg, supervisor, unit)
        stop_began = anyio.current_time()
        tg.cancel_scope.cancel()
    elapsed = anyio.current_time() - stop_began

    # Each finished its in-flight work within its grace, and the next began only after.
    assert log == [
        "draining c",
        "drained c",
        "draining b",
        "drained b",
        "draining a",
        "drained a",
    ]
    assert lasted(elapsed, 3 * unit), elapsed
    assert supervisor.status() == dict.fromkeys("abc", ChildState.STOPPED)


async def test_shutdown_timeout_bounds_each_childs_grace(unit: float, lasted: Callable[[float, float], bool]) -> None:
    cancelled_at: dict[str, float] = {}

    def child(name: str, *, graceful: bool, timeout: float) -> ChildSpec:
        async def start(*, task_status: TaskStatus[object]) -> None:
            if graceful:
                stop_requested()  # opts in, then ignores the request
            task_status.started()
            try:
                await anyio.sleep_forever()
            finally:
                cancelled_at[name] = anyio.current_time()

        return ChildSpec(name, start, shutdown_timeout=timeout)

    supervisor = Supervisor(
        [
            child("a", graceful=True, timeout=2 * unit),
            child("b", graceful=False, timeout=50 * unit),
            child("c", graceful=True, timeout=1 * unit),
        ]
    )
    async with anyio.create_task_group() as tg:
        await start(tg, supervisor, unit)
        stop_began = anyio.current_time()
        tg.cancel_scope.cancel()

    after = {name: at - stop_began for name, at in cancelled_at.items()}
    # c waits out its 1 s grace; b never asked for one so goes at once; then a's 2 s.
    assert lasted(after["c"], 1 * unit) and lasted(after["b"], 1 * unit) and lasted(after["a"], 3 * unit), after


async def test_one_for_one_restarts_only_the_failed_child(unit: float) -> None:
    log: list[str] = []
    a, b, c = children(log, "a", "b", "c")
    events = Recorder(100 * unit)
    supervisor = Supervisor([a.spec(), b.spec(), c.spec()], on_event=events)

    async with anyio.create_task_group() as tg:
        await start(tg, supervisor, unit)
        del log[:]
        b.crash()
        await events.wait_for(EventKind.STARTED, "b", 2)
        assert log == ["start b", "ready b"]
        assert (a.starts, b.starts, c.starts) == (1, 2, 1)
        assert events.of("b") == [EventKind.STARTED, EventKind.EXITED, EventKind.RESTARTED, EventKind.STARTED]
        exited = next(e for e in events.events if e.kind is EventKind.EXITED)
        assert isinstance(exited.error, Boom)
        tg.cancel_scope.cancel()


async def test_rest_for_one_restarts_the_failed_child_and_later_ones_in_order(unit: float) -> None:
    log: list[str] = []
    a, b, c, d, e = children(log, "a", "b", "c", "d", "e")
    events = Recorder(100 * unit)
    supervisor = Supervisor(
        [a.spec(), b.spec(), c.spec(), d.spec(), e.spec(restart=Restart.TEMPORARY)],
        SupervisorOptions(strategy=Strategy.REST_FOR_ONE),
        on_event=events,
    )

    async with anyio.create_task_group() as tg:
        await start(tg, supervisor, unit)
        del log[:]
        b.crash()
        await events.wait_for(EventKind.STARTED, "d", 2)
        # Later children stop in reverse order, then restart in order; a temporary one stays down.
        assert log == [
            "stop e",
            "stop d",
            "stop c",
            "start b",
            "ready b",
            "start c",
            "ready c",
            "start d",
            "ready d",
        ]
        assert (a.starts, b.starts, c.starts, d.starts, e.starts) == (1, 2, 2, 2, 1)
        assert supervisor.status() == {
            "a": ChildState.RUNNING,
            "b": ChildState.RUNNING,
            "c": ChildState.RUNNING,
            "d": ChildState.RUNNING,
            "e": ChildState.STOPPED,
        }
        assert events.count(EventKind.RESTARTED, "b") == 1
        tg.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("restart", "crashes", "restarted", "final"),
    [
        (Restart.PERMANENT, False, True, ChildState.RUNNING),
        (Restart.PERMANENT, True, True, ChildState.RUNNING),
        (Restart.TRANSIENT, False, False, ChildState.STOPPED),
        (Restart.TRANSIENT, True, True, ChildState.RUNNING),
        (Restart.TEMPORARY, False, False, ChildState.STOPPED),
        (Restart.TEMPORARY, True, False, ChildState.FAILED),
    ],
)
async def test_restart_type_decides_whether_an_ended_child_comes_back(
    unit: float, restart: Restart, crashes: bool, restarted: bool, final: ChildState
) -> None:
    log: list[str] = []
    (a,) = children(log, "a")
    events = Recorder(100 * unit)
    supervisor = Supervisor([a.spec(restart=restart)], on_event=events)

    async with anyio.create_task_group() as tg:
        await start(tg, supervisor, unit)
        if crashes:
            a.crash()
        else:
            a.finish()
        await events.wait_for(EventKind.EXITED, "a")
        if restarted:
            await events.wait_for(EventKind.STARTED, "a", 2)
        # A restart is decided synchronously with the exit, so its absence here is final.
        assert events.count(EventKind.RESTARTED, "a") == (1 if restarted else 0)
        assert a.starts == (2 if restarted else 1)
        assert supervisor.status() == {"a": final}
        tg.cancel_scope.cancel()


async def test_too_many_restarts_in_the_window_stops_everything_in_reverse_and_raises(
    unit: float, lasted: Callable[[float, float], bool]
) -> None:
    log: list[str] = []
    a, c = children(log, "a", "c")
    b = Child("b", log, crash_after=unit)
    events = Recorder(100 * unit)
    supervisor = Supervisor(
        [a.spec(), b.spec(), c.spec()],
        SupervisorOptions(max_restarts=3, max_seconds=5 * unit),
        on_event=events,
    )

    began = anyio.current_time()
    gave_up = await run_until_it_gives_up(supervisor, unit)

    # Crashes at 1, 2, 3 and 4 s: the fourth restart inside 5 s is one too many.
    assert lasted(anyio.current_time() - began, 4 * unit)
    assert b.starts == 4
    assert gave_up.child == "b"
    assert isinstance(gave_up.error, Boom)
    assert gave_up.__cause__ is gave_up.error
    assert [line for line in log if line.startswith("stop")] == ["stop c", "stop a"]
    assert not supervisor.alive
    assert supervisor.status() == {"a": ChildState.STOPPED, "b": ChildState.FAILED, "c": ChildState.STOPPED}
    assert events.count(EventKind.GAVE_UP, "b") == 1


@pytest.mark.parametrize(("crash_every", "gives_up"), [(3, False), (1, True)])
async def test_only_restarts_within_max_seconds_count(unit: float, crash_every: int, gives_up: bool) -> None:
    log: list[str] = []
    (a,) = children(log, "a")
    b = Child("b", log, crash_after=crash_every * unit, crash_runs=4)
    events = Recorder(100 * unit)
    # At most one restart in any 2 s: crashes 3 s apart never put two in one window.
    supervisor = Supervisor(
        [a.spec(), b.spec()], SupervisorOptions(max_restarts=1, max_seconds=2 * unit), on_event=events
    )

    async with anyio.create_task_group() as tg:
        if gives_up:
            await run_until_it_gives_up(supervisor, unit)
            assert b.starts == 2
        else:
            await start(tg, supervisor, unit)
            await events.wait_for(EventKind.STARTED, "b", 5)
            assert events.count(EventKind.RESTARTED, "b") == 4
            assert supervisor.alive
            assert supervisor.status() == {"a": ChildState.RUNNING, "b": ChildState.RUNNING}
            tg.cancel_scope.cancel()


async def test_crash_during_start_is_a_failure_and_later_children_wait_for_the_retry(unit: float) -> None:
    log: list[str] = []
    a, c = children(log, "a", "c")
    b = Child("b", log, fail_first=2)
    events = Recorder(100 * unit)
    supervisor = Supervisor([a.spec(), b.spec(), c.spec()], on_event=events)

    async with anyio.create_task_group() as tg:
        await start(tg, supervisor, unit)
        assert log == ["start a", "ready a", "start b", "start b", "start b", "ready b", "start c", "ready c"]
        assert events.of("b") == [
            EventKind.EXITED,
            EventKind.RESTARTED,
            EventKind.EXITED,
            EventKind.RESTARTED,
            EventKind.STARTED,
        ]
        assert all(isinstance(e.error, Boom) for e in events.events if e.kind is EventKind.EXITED)
        tg.cancel_scope.cancel()


async def test_a_child_that_never_starts_makes_the_supervisor_give_up_before_ready(unit: float) -> None:
    log: list[str] = []
    a, c = children(log, "a", "c")
    b = Child("b", log, fail_first=1_000)
    supervisor = Supervisor([a.spec(), b.spec(), c.spec()], SupervisorOptions(max_restarts=3))

    gave_up = await run_until_it_gives_up(supervisor, unit)

    assert gave_up.child == "b"
    assert b.starts == 4
    assert c.starts == 0
    assert [line for line in log if line.startswith("stop")] == ["stop a"]


async def test_a_temporary_child_failing_to_start_is_skipped(unit: float) -> None:
    log: list[str] = []
    a, c = children(log, "a", "c")
    b = Child("b", log, fail_first=1)
    supervisor = Supervisor([a.spec(), b.spec(restart=Restart.TEMPORARY), c.spec()])

    async with anyio.create_task_group() as tg:
        await start(tg, supervisor, unit)
        assert (b.starts, c.starts) == (1, 1)
        assert supervisor.status() == {
            "a": ChildState.RUNNING,
            "b": ChildState.FAILED,
            "c": ChildState.RUNNING,
        }
        tg.cancel_scope.cancel()


def test_child_names_must_be_unique() -> None:
    log: list[str] = []
    with pytest.raises(ValueError, match="unique"):
        Supervisor([Child("a", log).spec(), Child("a", log).spec()])


async def test_a_nested_supervisor_stops_its_own_children_in_turn(unit: float) -> None:
    log: list[str] = []
    a, x, y, b = children(log, "a", "x", "y", "b")
    nested = Supervisor([x.spec(), y.spec()], name="nested")
    root = Supervisor([a.spec(), ChildSpec("nested", nested.run), b.spec()])

    async with anyio.create_task_group() as tg:
        await start(tg, root, unit)
        assert nested.status() == {"x": ChildState.RUNNING, "y": ChildState.RUNNING}
        tg.cancel_scope.cancel()

    assert [line for line in log if line.startswith("stop")] == ["stop b", "stop y", "stop x", "stop a"]
