"""The actor kernel, on anyio only and free of domain types: supervision, mailboxes, batching,
tickers and the circuit breaker."""

from __future__ import annotations

from recalld.actors.kernel.mailbox import ActorUnavailable, Envelope, Inbox, Mailbox, ReplyAlreadySent, serve
from recalld.actors.kernel.supervisor import (
    ChildSpec,
    ChildStart,
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

__all__ = [
    "ActorUnavailable",
    "ChildSpec",
    "ChildStart",
    "ChildState",
    "Envelope",
    "EventKind",
    "Inbox",
    "Mailbox",
    "ReplyAlreadySent",
    "Restart",
    "Strategy",
    "Supervisor",
    "SupervisorEvent",
    "SupervisorGaveUp",
    "SupervisorOptions",
    "serve",
    "stop_requested",
]
