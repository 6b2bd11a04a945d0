"""Mailboxes: how an actor receives work that it must do itself, one request (or batch) at a time.

Not every call to an actor goes through one. The rule the actors follow: work that needs the
actor's own task (a provider call the embedder batches, a resolver call under its breaker) is
a request in its mailbox. What an actor publishes for readers is read in the caller's task:
the index manager's search takes a lease on the current copy-on-write handle, which no writer
changes under it. A change whose order another part already keeps is made in the caller's task
too, then the actor is woken through its mailbox: `IndexManager.activate` moves the generation
pointer in PostgreSQL (the row is the serialisation point; a concurrent move is refused),
`request_rebuild` sets a flag; the manager's loop acts on both at its next step.

A :class:`Mailbox` is created by whoever wires the actors together (or by the actor for itself) and
handed to both the actor and its callers. Callers use :meth:`Mailbox.call` (request and reply),
:meth:`Mailbox.cast` (request only; :meth:`Mailbox.cast_nowait` from a callback) or
:meth:`Mailbox.post` (several calls in flight at once); the actor takes requests inside
:meth:`Mailbox.receiving`, one at a time (:meth:`Inbox.receive`, or iterating) or in batches
(:meth:`Inbox.receive_batch`). The actor holds the mailbox only while it is receiving, so a
restarted actor picks up the same queue.

The guarantees, in the manner of trio's ``_channel.py``:

**Ordering.** Requests in one lane are delivered in the order they were queued. A mailbox has one
or more lanes (``lanes``); lane 0 comes first: a receive takes from the first non-empty lane, so a
request in a later lane waits while an earlier lane has work (priorities: queries ahead of bulk
work). With one lane, delivery is the order of sending.

**Back-pressure.** At most ``capacity`` requests are queued (across lanes; ``math.inf`` for no
bound). A sender that finds the mailbox full waits, and blocked senders get room in the order they
came. Sending does not yield when there is room, so queueing a request costs no trip through the
event loop; receiving always yields (a checkpoint), as trio's does.

**Cancellation of a caller.** A call whose caller gives up (cancellation or timeout) while the
request is still queued is withdrawn: it is never delivered, and its room is freed at once. One
that the actor has already taken stays with the actor; the actor can see
(:attr:`Envelope.caller_gone`) that nobody waits for it any more and skip the work, and a reply to
it is dropped, not an error. A cast cannot be withdrawn.

**Close.** :meth:`Mailbox.close` ends sending: later sends, and senders still blocked on a full
mailbox, raise :class:`anyio.ClosedResourceError`; what was queued is still delivered, and then
receiving ends (iteration stops, :meth:`Inbox.receive` raises :class:`anyio.EndOfStream`).
:meth:`Mailbox.fail_queued` fails the calls still queued, for an actor that will not serve them.

**Actor ends.** Calls the actor took and did not reply to when its ``receiving`` block ends (for
whatever reason) fail with :class:`ActorUnavailable`; requests still queued wait for the next
actor to receive.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Generic, TypeVar

import anyio
import anyio.lowlevel
from anyio.abc import TaskStatus

RequestT = TypeVar("RequestT")
ReplyT = TypeVar("ReplyT")


class ActorUnavailable(Exception):
    """The actor ended (crashed, was stopped or restarted) after taking a call and before replying.

    ``__cause__`` is the actor's exception when it crashed with one.
    """


class ReplyAlreadySent(RuntimeError):
    """An envelope was replied to (or failed) a second time."""


class Envelope(Generic[RequestT, ReplyT]):
    """One request with a one-shot reply slot: the actor's side of a call and the caller's handle.

    The actor answers with :meth:`reply` or :meth:`fail`, once; a second answer raises
    :class:`ReplyAlreadySent`. For a cast (``expects_reply`` false) a reply is accepted and dropped,
    so one handler can serve both. Answering after the caller gave up is not an error; the answer
    is dropped. The caller waits with :meth:`wait` and reads the answer with :meth:`result`.
    """

    __slots__ = ("_error", "_event", "_on_settle", "_replied", "_value", "caller_gone", "expects_reply", "request")

    _value: ReplyT

    def __init__(self, request: RequestT, *, expects_reply: bool) -> None:
        self.request = request
        self.expects_reply = expects_reply
        self.caller_gone = False
        """True once the caller stopped waiting (cancelled, timed out, or withdrew the call)."""
        self._replied = False
        self._error: BaseException | None = None
        self._event = anyio.Event() if expects_reply else None
        self._on_settle: Callable[[Envelope[RequestT, ReplyT]], None] | None = None

    @property
    def replied(self) -> bool:
        """Whether the actor has answered (replied or failed)."""
        return self._replied

    def reply(self, value: ReplyT) -> None:
        self._settle()
        self._value = value
        self._wake()

    def fail(self, error: BaseException) -> None:
        """Make the caller's ``call`` (or :meth:`result`) raise ``error``."""
        self._settle()
        self._error = error
        self._wake()

    async def wait(self) -> None:
        """Wait until the actor has answered (it does not raise the actor's error; see :meth:`result`)."""
        assert self._event is not None, "only calls carry a reply slot"
        await self._event.wait()

    def result(self) -> ReplyT:
        """The reply, or the error the actor failed the call with; only once :attr:`replied`."""
        if not self._replied:
            raise RuntimeError(f"request {self.request!r} has no reply yet")
        if self._error is not None:
            raise self._error
        return self._value

    def _settle(self) -> None:
        if self._replied:
            raise ReplyAlreadySent(f"request {self.request!r} was already replied to")
        self._replied = True

    def _wake(self) -> None:
        if self._on_settle is not None:
            self._on_settle(self)
        if self._event is not None:
            self._event.set()


def _one(request: object) -> int:
    return 1


class Inbox(Generic[RequestT, ReplyT]):
    """The actor's side of a mailbox, valid inside :meth:`Mailbox.receiving`.

    Iterating yields envelopes one at a time until the mailbox is closed and empty. Calls taken
    from it and not replied to when the ``receiving`` block ends are failed with
    :class:`ActorUnavailable`.
    """

    def __init__(self, mailbox: Mailbox[RequestT, ReplyT]) -> None:
        self._mailbox = mailbox
        self._outstanding: set[Envelope[RequestT, ReplyT]] = set()

    def __aiter__(self) -> Inbox[RequestT, ReplyT]:
        return self

    async def __anext__(self) -> Envelope[RequestT, ReplyT]:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def receive(self) -> Envelope[RequestT, ReplyT]:
        """The next request (first non-empty lane, oldest first), waiting for one if need be.

        Raises :class:`anyio.EndOfStream` once the mailbox is closed and nothing is queued.
        """
        taken = await self.receive_batch(1)
        return taken[0]

    async def receive_batch(
        self, limit: float, *, weight: Callable[[RequestT], int] = _one, lane: int | None = None
    ) -> list[Envelope[RequestT, ReplyT]]:
        """Wait until a request is queued, then take queued requests while their total weight
        stays within ``limit`` (by default each weighs 1, so ``limit`` counts requests).

        Takes from the first non-empty lane and goes on into the next lanes in order, but stops at
        the first request that does not fit: it stays queued, first in line, so a heavy request is
        never overtaken in its lane. The result is empty only when that first request alone weighs
        more than ``limit``. With ``lane``, takes from that lane only, and is also empty when that
        lane is while another has work. Raises :class:`anyio.EndOfStream` once the mailbox is
        closed and nothing is queued.
        """
        await anyio.lowlevel.checkpoint()
        while True:
            taken = self.receive_batch_nowait(limit, weight=weight, lane=lane)
            if taken or self._mailbox._queued:
                return taken
            if self._mailbox._closed:
                raise anyio.EndOfStream
            await self._mailbox._wait_queued()

    def receive_batch_nowait(
        self, limit: float, *, weight: Callable[[RequestT], int] = _one, lane: int | None = None
    ) -> list[Envelope[RequestT, ReplyT]]:
        """What :meth:`receive_batch` would take now, without waiting or yielding (maybe nothing).
        With ``lane``, only from that lane (empty when it is)."""
        mailbox = self._mailbox
        taken: list[Envelope[RequestT, ReplyT]] = []
        total = 0
        for queue in mailbox._lanes if lane is None else [mailbox._lanes[lane]]:
            while queue:
                head = queue[0]
                if head.caller_gone:  # withdrawn while queued; its room was freed then
                    queue.popleft()
                    continue
                size = weight(head.request)
                if total + size > limit:
                    return taken
                self._take(queue)
                total += size
                taken.append(head)
        return taken

    async def receive_lane(
        self, limits: Sequence[float], *, weight: Callable[[RequestT], int] = _one
    ) -> tuple[int, list[Envelope[RequestT, ReplyT]]]:
        """Wait until a request is queued, then take from the first non-empty lane only: its head
        whatever it weighs, then the requests behind it in that lane while their total weight
        stays within ``limits[lane]``. Returns the lane and what was taken (never empty).

        Requests of two lanes never come back together: an actor that batches its work keeps
        priorities apart (a query is never merged into bulk work). Raises
        :class:`anyio.EndOfStream` once the mailbox is closed and nothing is queued.
        """
        await anyio.lowlevel.checkpoint()
        mailbox = self._mailbox
        while True:
            for number, queue in enumerate(mailbox._lanes):
                while queue and queue[0].caller_gone:
                    queue.popleft()
                if not queue:
                    continue
                total = weight(queue[0].request)
                taken = [self._take(queue)]
                rest = self.receive_batch_nowait(limits[number] - total, weight=weight, lane=number)
                return number, taken + rest
            if mailbox._closed:
                raise anyio.EndOfStream
            await mailbox._wait_queued()

    def _take(self, queue: deque[Envelope[RequestT, ReplyT]]) -> Envelope[RequestT, ReplyT]:
        head = queue.popleft()
        self._mailbox._took()
        if head.expects_reply:
            self._outstanding.add(head)
            head._on_settle = self._outstanding.discard
        return head

    def _abandon(self, cause: BaseException | None) -> None:
        for envelope in list(self._outstanding):
            error = ActorUnavailable(f"actor {self._mailbox.name!r} ended before replying")
            # Only real errors are worth chaining; a Cancelled belongs to the actor's task, not the caller.
            error.__cause__ = cause if isinstance(cause, Exception) else None
            envelope.fail(error)


class Mailbox(Generic[RequestT, ReplyT]):
    """A bounded, laned queue of requests for one actor; see the module docstring for what it
    guarantees on ordering, back-pressure, cancellation and close."""

    def __init__(self, capacity: float = 64, *, name: str = "actor", lanes: int = 1) -> None:
        if capacity != math.inf and (capacity < 1 or capacity != int(capacity)):
            raise ValueError("capacity must be a positive whole number or math.inf")
        if lanes < 1:
            raise ValueError("a mailbox needs at least one lane")
        self.name = name
        self.capacity = capacity
        self._lanes: list[deque[Envelope[RequestT, ReplyT]]] = [deque() for _ in range(lanes)]
        self._queued = 0  # live requests in the lanes (withdrawn ones no longer count)
        self._closed = False
        self._queued_event: anyio.Event | None = None  # set by a send; receivers wait on it
        self._blocked: deque[anyio.Event] = deque()  # senders waiting for room, oldest first

    @property
    def queued(self) -> int:
        """Requests waiting to be taken (calls withdrawn by their callers not counted)."""
        return self._queued

    @property
    def closed(self) -> bool:
        return self._closed

    # A timeout parameter on purpose: every caller of an actor needs a bound, so the API offers one.
    async def call(self, request: RequestT, *, lane: int = 0, timeout: float | None = None) -> ReplyT:  # noqa: ASYNC109
        """Send ``request`` and return the actor's reply.

        Raises what the actor's handler raised (the actor keeps running), :class:`ActorUnavailable`
        if the actor ended after taking the request and before replying, and :class:`TimeoutError`
        if ``timeout`` seconds pass first (waiting for room in the mailbox included). A caller that
        gives up, by timeout or cancellation, withdraws a request still queued; one already taken
        stays with the actor and its reply is dropped.
        """
        with anyio.fail_after(timeout):
            envelope = await self.post(request, lane=lane)
            try:
                await envelope.wait()
            finally:
                self.withdraw(envelope)
        return envelope.result()

    async def cast(self, request: RequestT, *, lane: int = 0) -> None:
        """Queue ``request`` and return without waiting for the actor (only for room in the mailbox)."""
        await self._send(Envelope(request, expects_reply=False), lane)

    def cast_nowait(self, request: RequestT, *, lane: int = 0) -> None:
        """Queue ``request`` from code that cannot wait (a callback); raises
        :class:`anyio.WouldBlock` when the mailbox is full (or other senders are blocked on it).

        With ``capacity=1`` this is a coalescing wake-up: while one is queued, more add nothing.
        """
        self._check(lane)
        if self._queued >= self.capacity or self._blocked:
            raise anyio.WouldBlock
        self._enqueue(Envelope(request, expects_reply=False), lane)

    async def post(self, request: RequestT, *, lane: int = 0) -> Envelope[RequestT, ReplyT]:
        """Queue a call and return its envelope without waiting for the reply: for a caller with
        several calls in flight. The caller waits with :meth:`Envelope.wait`, reads
        :meth:`Envelope.result`, and must :meth:`withdraw` what it stops waiting for."""
        envelope: Envelope[RequestT, ReplyT] = Envelope(request, expects_reply=True)
        await self._send(envelope, lane)
        return envelope

    def withdraw(self, envelope: Envelope[RequestT, ReplyT]) -> None:
        """The caller no longer waits for ``envelope``: if still queued it will not be delivered.
        Nothing happens to one already answered."""
        if envelope.replied or envelope.caller_gone:
            return
        envelope.caller_gone = True
        if envelope._on_settle is None:  # not taken yet (taking a call sets it): free its room
            self._took()

    def close(self) -> None:
        """End sending; what is queued is still delivered (see the module docstring)."""
        self._closed = True
        self._wake_receivers()
        while self._blocked:
            self._blocked.popleft().set()

    def fail_queued(self, error: BaseException) -> None:
        """Fail every call still queued with ``error`` (casts are dropped): for an actor that will
        not serve them."""
        for lane in self._lanes:
            while lane:
                envelope = lane.popleft()
                if envelope.caller_gone:
                    continue
                self._took()
                if envelope.expects_reply:
                    envelope.fail(error)

    @asynccontextmanager
    async def receiving(self) -> AsyncIterator[Inbox[RequestT, ReplyT]]:
        """Take requests for the duration of the block; see :class:`Inbox`."""
        inbox = Inbox(self)
        try:
            yield inbox
        except BaseException as exc:
            inbox._abandon(exc)
            raise
        inbox._abandon(None)

    # --- internals ----------------------------------------------------------------------------

    async def _send(self, envelope: Envelope[RequestT, ReplyT], lane: int) -> None:
        self._check(lane)
        if self._queued >= self.capacity or self._blocked:
            await self._wait_for_room()
        self._enqueue(envelope, lane)

    def _check(self, lane: int) -> None:
        if not 0 <= lane < len(self._lanes):
            raise ValueError(f"mailbox of {self.name!r} has no lane {lane}")
        if self._closed:
            raise anyio.ClosedResourceError(f"mailbox of {self.name!r} is closed")

    def _enqueue(self, envelope: Envelope[RequestT, ReplyT], lane: int) -> None:
        self._lanes[lane].append(envelope)
        self._queued += 1
        self._wake_receivers()

    async def _wait_for_room(self) -> None:
        room = anyio.Event()
        self._blocked.append(room)
        try:
            while True:
                await room.wait()
                if self._closed:
                    raise anyio.ClosedResourceError(f"mailbox of {self.name!r} is closed")
                if self._queued < self.capacity:
                    return
                room = anyio.Event()  # woken, but another sender took the room: keep our place
                self._blocked.appendleft(room)
        except BaseException:
            if room in self._blocked:
                self._blocked.remove(room)
            elif room.is_set():
                self._wake_sender()  # the wake-up was meant for a sender that is leaving: pass it on
            raise

    def _took(self) -> None:
        self._queued -= 1
        self._wake_sender()

    def _wake_sender(self) -> None:
        if self._blocked and self._queued < self.capacity:
            self._blocked.popleft().set()

    def _wake_receivers(self) -> None:
        if self._queued_event is not None:
            self._queued_event.set()
            self._queued_event = None

    async def _wait_queued(self) -> None:
        if self._queued_event is None:
            self._queued_event = anyio.Event()
        await self._queued_event.wait()


async def serve(
    mailbox: Mailbox[RequestT, ReplyT],
    handler: Callable[[RequestT], Awaitable[ReplyT]],
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Handle requests one at a time until cancelled or the mailbox is closed and drained; ready
    (``task_status``) once receiving.

    A call's reply is what ``handler`` returns; if ``handler`` raises an ``Exception`` the caller
    gets it and serving goes on. A call whose caller gave up before it was taken is not handled. A
    cast has nobody to report to, so a cast whose handler raises ends ``serve`` with that
    exception: the supervisor logs it and restarts the actor.
    """
    async with mailbox.receiving() as inbox:
        task_status.started()
        async for envelope in inbox:
            if not envelope.expects_reply:
                await handler(envelope.request)
                continue
            try:
                reply = await handler(envelope.request)
            except Exception as exc:
                envelope.fail(exc)
            else:
                envelope.reply(reply)
