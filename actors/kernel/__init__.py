"""The actor kernel: supervision and mailboxes, on anyio only."""

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
