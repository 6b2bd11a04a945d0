"""Supervision of actors: ordered start, restart policy and intensity, reverse-ordered stop.

OTP semantics (one_for_one / rest_for_one, permanent / transient / temporary children, at most
N restarts in T seconds, per-child shutdown timeouts) expressed with anyio task groups and cancel
scopes. All time comes from :func:`anyio.current_time`, so trio's ``MockClock`` drives restart
windows in tests.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

import anyio
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream


class Strategy(enum.Enum):
    """Which children restart when one of them fails."""

    ONE_FOR_ONE = "one_for_one"
    """Only the failed child."""
    REST_FOR_ONE = "rest_for_one"
    """The failed child and every child listed after it (they may depend on it)."""


class Restart(enum.Enum):
    """When a child that ended is started again."""

    PERMANENT = "permanent"
    """Always, whether it raised or returned."""
    TRANSIENT = "transient"
    """Only if it ended with an exception."""
    TEMPORARY = "temporary"
    """Never."""


class ChildState(enum.StrEnum):
    STARTING = "starting"
    """First start: called, has not signalled ready yet."""
    RUNNING = "running"
    RESTARTING = "restarting"
    """Down because of a failure (its own or, for rest_for_one, an earlier sibling's); coming back."""
    STOPPED = "stopped"
    """Not running and not coming back: ended normally, was stopped, or never started."""
    FAILED = "failed"
    """Ended with an exception and will not be restarted."""


class EventKind(enum.StrEnum):
    STARTED = "started"
    """The child signalled ready."""
    EXITED = "exited"
    """The child ended: crashed (``error`` set), returned, or was stopped by the supervisor."""
    RESTARTED = "restarted"
    """The child is being started again; ``error`` is the failure that caused it."""
    GAVE_UP = "gave_up"
    """Restart intensity exceeded; ``child`` is the one whose failure tipped it over."""


class ChildStart(Protocol):
    """How a child is started: ``await start(task_status=...)``; call ``task_status.started()`` when ready."""

    def __call__(self, *, task_status: TaskStatus[object]) -> Awaitable[object]: ...


@dataclass(frozen=True)
class ChildSpec:
    name: str
    start: ChildStart
    restart: Restart = Restart.PERMANENT
    shutdown_timeout: float = 5.0
    """Grace the child gets to return after :func:`stop_requested` fires, before it is cancelled."""


@dataclass(frozen=True)
class SupervisorOptions:
    strategy: Strategy = Strategy.ONE_FOR_ONE
    max_restarts: int = 3
    """More than this many restarts within ``max_seconds`` and the supervisor gives up."""
    max_seconds: float = 5.0


@dataclass(frozen=True)
class SupervisorEvent:
    kind: EventKind
    supervisor: str
    child: str
    error: BaseException | None = None


class SupervisorGaveUp(Exception):
    """Raised out of :meth:`Supervisor.run` once restart intensity was exceeded.

    All children have been stopped by the time it is raised. ``__cause__`` is ``error``.
    """

    reason = "supervisor_gave_up"

    def __init__(self, supervisor: str, child: str, error: BaseException | None, options: SupervisorOptions):
        super().__init__(
            f"supervisor {supervisor!r} gave up: child {child!r} needed more than "
            f"{options.max_restarts} restarts in {options.max_seconds}s (last error: {error!r})"
        )
        self.supervisor = supervisor
        self.child = child
        self.error = error


class _ChildRun:
    """One incarnation of a child: a restart makes a new one, so stale exit notices are recognisable."""

    def __init__(self, index: int, spec: ChildSpec) -> None:
        self.index = index
        self.spec = spec
        # Shielded so that cancelling the supervisor does not hit every child at once: the supervisor
        # stops them itself, one by one, in reverse order.
        self.scope = anyio.CancelScope(shield=True)
        self.settled = anyio.Event()  # ready, or ended before ready
        self.done = anyio.Event()
        self.stop_event = anyio.Event()
        self.ready = False
        self.graceful = False
        self.handled = False  # the supervisor has accounted for its end (or is ending it)
        self.error: Exception | None = None


class _ReadySignal:
    """The ``task_status`` a child receives."""

    def __init__(self, run: _ChildRun) -> None:
        self._run = run

    def started(self, value: object = None) -> None:
        if self._run.ready:
            raise RuntimeError(f"child {self._run.spec.name!r} called task_status.started() twice")
        self._run.ready = True
        self._run.settled.set()


_current_run: ContextVar[_ChildRun | None] = ContextVar("recalld_supervised_child", default=None)


def stop_requested() -> anyio.Event:
    """Opt the calling child in to a graceful stop and return the event that asks it to stop.

    A child that never calls this is cancelled as soon as the supervisor stops it. A child that
    calls it (from its start function or any task it spawned) is instead told to stop by this event
    being set; it then has its spec's ``shutdown_timeout`` to finish in-flight work and return. If it
    has not returned by then it is cancelled, so the grace is enforced without the child having to
    shield anything. Outside a supervised child this returns an event that nobody sets.
    """
    run = _current_run.get()
    if run is None:
        return anyio.Event()
    run.graceful = True
    return run.stop_event


class Supervisor:
    """Runs ``children`` under a restart policy.

    Guarantees of :meth:`run`:

    * Children start in list order; child *i + 1* is started only once child *i* called
      ``task_status.started()``. ``run``'s own ``task_status.started()`` is called once all are ready.
    * A child ending is handled per its :class:`Restart` and the :class:`Strategy`. A child that ends
      before signalling ready counts as a failure like any other. For rest_for_one, the later
      children that were still running are stopped in reverse order and, unless TEMPORARY, started
      again in order; the whole restart counts once towards the intensity.
    * More than ``max_restarts`` restarts within any ``max_seconds`` window: all children are stopped
      in reverse list order, :attr:`alive` turns false and :class:`SupervisorGaveUp` is raised.
    * When the scope around ``run`` is cancelled, children are stopped in reverse list order, each
      as described in :func:`stop_requested`; ``run`` returns (via the cancellation) once all have
      ended. A child that shields itself from cancellation can hold this up; nothing else can.

    ``on_event`` is called synchronously for every :class:`SupervisorEvent`; it must not block or raise.
    ``run`` may be called again after it returned (e.g. when this supervisor is itself a child), but
    not concurrently.
    """

    def __init__(
        self,
        children: Sequence[ChildSpec],
        options: SupervisorOptions | None = None,
        *,
        name: str = "root",
        on_event: Callable[[SupervisorEvent], None] | None = None,
    ) -> None:
        names = [spec.name for spec in children]
        if len(set(names)) != len(names):
            raise ValueError(f"supervisor {name!r}: child names must be unique, got {names}")
        self.name = name
        self._specs = tuple(children)
        self._options = options or SupervisorOptions()
        self._on_event = on_event
        self._states = dict.fromkeys(names, ChildState.STOPPED)
        self._runs: list[_ChildRun | None] = [None] * len(self._specs)
        self._restarts: deque[float] = deque()
        self._alive = True
        self._running = False

    @property
    def alive(self) -> bool:
        """False once the supervisor gave up; what a systemd watchdog ping should depend on."""
        return self._alive

    def status(self) -> Mapping[str, ChildState]:
        """A snapshot of every child's state, in list order."""
        return MappingProxyType(dict(self._states))

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Start the children and supervise them until cancelled or giving up (see the class docstring)."""
        if self._running:
            raise RuntimeError(f"supervisor {self.name!r} is already running")
        self._running = True
        self._alive = True
        self._restarts.clear()
        exits_send, exits_receive = anyio.create_memory_object_stream[_ChildRun](math.inf)
        gave_up: SupervisorGaveUp | None = None
        try:
            with exits_send, exits_receive:
                async with anyio.create_task_group() as tg:
                    try:
                        for index in range(len(self._specs)):
                            await self._start(tg, exits_send, index)
                        task_status.started()
                        await self._supervise(tg, exits_send, exits_receive)
                    except SupervisorGaveUp as exc:
                        gave_up = exc
                    finally:
                        # Shielded: our own cancellation must not cut the children's grace short.
                        with anyio.CancelScope(shield=True):
                            await self._stop_all()
        finally:
            self._running = False
        if gave_up is not None:
            raise gave_up from gave_up.error

    async def _supervise(
        self,
        tg: TaskGroup,
        exits_send: MemoryObjectSendStream[_ChildRun],
        exits_receive: MemoryObjectReceiveStream[_ChildRun],
    ) -> None:
        while True:
            run = await exits_receive.receive()
            if run.handled:
                continue  # stopped by us, or a crash before ready that _start already handled
            run.handled = True
            if not self._restarts_after_exit(run):
                continue
            if self._options.strategy is Strategy.ONE_FOR_ONE:
                await self._start(tg, exits_send, run.index, cause=run.error, restart=True)
                continue
            later = range(run.index + 1, len(self._specs))
            to_restart = []
            for index in reversed(later):
                if not await self._stop(index):
                    continue  # it had already ended on its own; its state says how
                if self._specs[index].restart is Restart.TEMPORARY:
                    self._states[self._specs[index].name] = ChildState.STOPPED
                else:
                    self._states[self._specs[index].name] = ChildState.RESTARTING
                    to_restart.append(index)
            await self._start(tg, exits_send, run.index, cause=run.error, restart=True)
            for index in reversed(to_restart):
                await self._start(tg, exits_send, index, cause=run.error, restart=True)

    async def _start(
        self,
        tg: TaskGroup,
        exits_send: MemoryObjectSendStream[_ChildRun],
        index: int,
        *,
        cause: BaseException | None = None,
        restart: bool = False,
    ) -> None:
        """Start one child and wait until it is ready, restarting it if it fails before that."""
        spec = self._specs[index]
        while True:
            self._states[spec.name] = ChildState.RESTARTING if restart else ChildState.STARTING
            if restart:
                self._emit(EventKind.RESTARTED, spec.name, cause)
            run = _ChildRun(index, spec)
            self._runs[index] = run
            tg.start_soon(self._run_child, run, exits_send, name=f"{self.name}/{spec.name}")
            await run.settled.wait()
            if run.ready:
                self._states[spec.name] = ChildState.RUNNING
                self._emit(EventKind.STARTED, spec.name)
                return
            run.handled = True
            if not self._restarts_after_exit(run):
                return
            cause, restart = run.error, True

    async def _run_child(self, run: _ChildRun, exits_send: MemoryObjectSendStream[_ChildRun]) -> None:
        # Set in this task's own context copy, so the child and the tasks it spawns see their run.
        _current_run.set(run)
        try:
            with run.scope:
                await run.spec.start(task_status=_ReadySignal(run))
        except Exception as exc:
            run.error = exc
        finally:
            run.settled.set()
            run.done.set()
            exits_send.send_nowait(run)

    async def _stop(self, index: int) -> bool:
        """Stop a child, honouring its grace; True if it was live (not yet accounted for)."""
        run = self._runs[index]
        if run is None or run.handled:
            return False
        run.handled = True
        # Shielded: once begun, a stop completes (it is bounded by shutdown_timeout anyway), so a
        # child is never left half-stopped when the supervisor itself is cancelled.
        with anyio.CancelScope(shield=True):
            run.stop_event.set()
            if run.graceful:
                with anyio.move_on_after(run.spec.shutdown_timeout):
                    await run.done.wait()
            run.scope.cancel()
            await run.done.wait()
        self._emit(EventKind.EXITED, run.spec.name, run.error)
        return True

    async def _stop_all(self) -> None:
        for index in reversed(range(len(self._specs))):
            await self._stop(index)
            name = self._specs[index].name
            if self._states[name] is not ChildState.FAILED:
                self._states[name] = ChildState.STOPPED

    def _restarts_after_exit(self, run: _ChildRun) -> bool:
        """The restart decision for a child that ended on its own, whether it was running or
        still starting: report the exit, then either settle its final state (False) or count
        one restart against the intensity (True; SupervisorGaveUp once it is exceeded)."""
        spec = run.spec
        self._emit(EventKind.EXITED, spec.name, run.error)
        if not self._should_restart(spec, run.error):
            self._states[spec.name] = ChildState.FAILED if run.error is not None else ChildState.STOPPED
            return False
        self._states[spec.name] = ChildState.RESTARTING
        self._count_restart(spec.name, run.error)
        return True

    def _should_restart(self, spec: ChildSpec, error: BaseException | None) -> bool:
        if spec.restart is Restart.PERMANENT:
            return True
        if spec.restart is Restart.TRANSIENT:
            return error is not None
        return False

    def _count_restart(self, child: str, error: BaseException | None) -> None:
        """Record one restart; raise SupervisorGaveUp if that exceeds the intensity."""
        now = anyio.current_time()
        self._restarts.append(now)
        while self._restarts[0] < now - self._options.max_seconds:
            self._restarts.popleft()
        if len(self._restarts) > self._options.max_restarts:
            self._alive = False
            self._states[child] = ChildState.FAILED
            self._emit(EventKind.GAVE_UP, child, error)
            raise SupervisorGaveUp(self.name, child, error, self._options)

    def _emit(self, kind: EventKind, child: str, error: BaseException | None = None) -> None:
        if self._on_event is not None:
            self._on_event(SupervisorEvent(kind, self.name, child, error))
