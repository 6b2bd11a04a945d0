"""Mailboxes: how callers reach an actor, across the actor's restarts.

A :class:`Mailbox` is created once (by whoever wires the actors together) and handed to both the
actor and its callers; the actor holds it only while it is receiving, so a restarted actor picks up
the same queue.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Generic, TypeVar

import anyio
from anyio.abc import TaskStatus

RequestT = TypeVar("RequestT")
ReplyT = TypeVar("ReplyT")


class ActorUnavailable(Exception):
    """The actor ended (crashed, was stopped or restarted) after taking a call and before replying.

    ``__cause__`` is the actor's exception when it crashed with one.
    """

    reason = "actor_unavailable"


class ReplyAlreadySent(RuntimeError):
    """An envelope was replied to (or failed) a second time."""

    reason = "reply_already_sent"


class Envelope(Generic[RequestT, ReplyT]):
    """One request as the actor sees it, with a one-shot reply slot.

    For a cast (``expects_reply`` false) a reply is accepted and dropped, so one handler can serve
    both. Replying after the caller gave up (timeout, cancellation) is not an error; the reply is
    dropped. Replying twice raises :class:`ReplyAlreadySent`.
    """

    _value: ReplyT

    def __init__(self, request: RequestT, *, expects_reply: bool) -> None:
        self.request = request
        self.expects_reply = expects_reply
        self._replied = False
        self._error: BaseException | None = None
        self._event = anyio.Event() if expects_reply else None
        self._on_settle: Callable[[Envelope[RequestT, ReplyT]], None] | None = None

    @property
    def replied(self) -> bool:
        return self._replied

    def reply(self, value: ReplyT) -> None:
        self._settle()
        self._value = value
        self._wake()

    def fail(self, error: BaseException) -> None:
        """Make the caller's ``call`` raise ``error``."""
        self._settle()
        self._error = error
        self._wake()

    def _settle(self) -> None:
        if self._replied:
            raise ReplyAlreadySent(f"request {self.request!r} was already replied to")
        self._replied = True

    def _wake(self) -> None:
        if self._on_settle is not None:
            self._on_settle(self)
        if self._event is not None:
            self._event.set()

    async def _outcome(self) -> ReplyT:
        assert self._event is not None, "only calls carry a reply slot"
        await self._event.wait()
        if self._error is not None:
            raise self._error
        return self._value


class Inbox(Generic[RequestT, ReplyT]):
    """The actor's side of a mailbox, valid inside :meth:`Mailbox.receiving`.

    Iterating yields envelopes in the order they were sent. Calls taken from it and not replied to
    when the ``receiving`` block ends (for whatever reason) are failed with :class:`ActorUnavailable`.
    """

    def __init__(self, mailbox: Mailbox[RequestT, ReplyT]) -> None:
        self._mailbox = mailbox
        self._outstanding: set[Envelope[RequestT, ReplyT]] = set()

    def __aiter__(self) -> Inbox[RequestT, ReplyT]:
        return self

    async def __anext__(self) -> Envelope[RequestT, ReplyT]:
        envelope = await self._mailbox._receive.receive()
        if envelope.expects_reply:
            self._outstanding.add(envelope)
            envelope._on_settle = self._outstanding.discard
        return envelope

    def _abandon(self, cause: BaseException | None) -> None:
        for envelope in list(self._outstanding):
            error = ActorUnavailable(f"actor {self._mailbox.name!r} ended before replying")
            # Only real errors are worth chaining; a Cancelled belongs to the actor's task, not the caller.
            error.__cause__ = cause if isinstance(cause, Exception) else None
            envelope.fail(error)


class Mailbox(Generic[RequestT, ReplyT]):
    """A bounded queue of requests for one actor, with request/reply (``call``) and ``cast``.

    Requests are delivered in the order they were sent. Senders wait while the mailbox is full
    (``capacity`` requests), which is the actor's backpressure. A request sent while no actor is
    receiving (e.g. during a restart) waits for the next one.
    """

    def __init__(self, capacity: int = 64, *, name: str = "actor") -> None:
        self.name = name
        self._send, self._receive = anyio.create_memory_object_stream[Envelope[RequestT, ReplyT]](capacity)

    # A timeout parameter on purpose: every caller of an actor needs a bound, so the API offers one.
    async def call(self, request: RequestT, *, timeout: float | None = None) -> ReplyT:  # noqa: ASYNC109
        """Send ``request`` and return the actor's reply.

        Raises what the actor's handler raised (the actor keeps running), :class:`ActorUnavailable`
        if the actor ended after taking the request and before replying, and :class:`TimeoutError`
        if ``timeout`` seconds pass first (waiting for room in the mailbox included). A caller that
        gives up, by timeout or cancellation, leaves the request with the actor; its reply is dropped.
        """
        envelope: Envelope[RequestT, ReplyT] = Envelope(request, expects_reply=True)
        with anyio.fail_after(timeout):
            await self._send.send(envelope)
            return await envelope._outcome()

    async def cast(self, request: RequestT) -> None:
        """Queue ``request`` and return without waiting for the actor (only for room in the mailbox)."""
        await self._send.send(Envelope(request, expects_reply=False))

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


async def serve(
    mailbox: Mailbox[RequestT, ReplyT],
    handler: Callable[[RequestT], Awaitable[ReplyT]],
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Handle requests one at a time until cancelled; ready (``task_status``) once receiving.

    A call's reply is what ``handler`` returns; if ``handler`` raises an ``Exception`` the caller
    gets it and serving goes on. A cast has nobody to report to, so a cast whose handler raises
    ends ``serve`` with that exception: the supervisor logs it and restarts the actor.
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
