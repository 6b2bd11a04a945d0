"""The port of a role one daemon of those sharing a database holds at a time: a tick of the
assignment or the resolver ticker, a pass of the sweeper's database work (implemented in
`daemon/store/roles.py`). The builder's role is held for as long as the daemon can, on a connection
of its own (`recalld.actors.ports.index.BuilderLock`)."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Protocol


class TickLocks(Protocol):
    def hold(self, name: str) -> AbstractAsyncContextManager[bool]:
        """Try the advisory lock `name` for the block: True when this daemon holds it, False when
        another one does (the block must then do nothing). Released when the block ends."""
        ...
