"""The roles one daemon of those sharing a database holds at a time, and who holds them now
(docs/OPERATIONS.md, "Running a fleet"): the builder (`recalld.store.builder_lock`), and the
roles held for one step at a time, an assignment tick, a resolver tick, a pass of the sweeper's
database work, under the advisory locks taken here."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import asyncpg

from recalld.actors.assignments.resolver import LOCK as RESOLVER_LOCK
from recalld.actors.assignments.ticker import LOCK as TICKER_LOCK
from recalld.actors.gc.sweeper import SWEEPER_ROLE
from recalld.store import db
from recalld.store.builder_lock import BUILDER_LOCK_KEY
from recalld.wire.service import Role, RoleHolder


def lock_key(name: str) -> int:
    """The advisory lock key of a role held for one step: a signed 64-bit number from its name."""
    return int.from_bytes(hashlib.sha256(f"recalld:{name}".encode()).digest()[:8], "big", signed=True)


class PgTickLocks:
    """Implements `recalld.actors.ports.roles.TickLocks`: a session-level advisory lock on a pooled
    connection, held for the block and released (or the connection dropped) when it ends."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self.held: set[str] = set()
        """The names this daemon holds now (one instance is shared by the daemon's actors)."""

    @asynccontextmanager
    async def hold(self, name: str) -> AsyncIterator[bool]:
        key = lock_key(name)
        async with db.connection(self._pool) as conn:
            held = bool(await conn.fetchval("SELECT pg_try_advisory_lock($1)", key))
            if held:
                self.held.add(name)
            try:
                yield held
            finally:
                self.held.discard(name)
                if held:
                    try:
                        await conn.execute("SELECT pg_advisory_unlock($1)", key)
                    except BaseException:
                        conn.terminate()  # the session's end releases the lock
                        raise


ROLES: tuple[tuple[str, str, int], ...] = (
    ("builder", "builder", BUILDER_LOCK_KEY),
    ("assignment ticker", TICKER_LOCK, lock_key(TICKER_LOCK)),
    ("resolver ticker", RESOLVER_LOCK, lock_key(RESOLVER_LOCK)),
    ("sweeper's database work", SWEEPER_ROLE, lock_key(SWEEPER_ROLE)),
)
"""Each role: its name for people, its lock's name, the lock's key."""

HOLDERS_SQL = """SELECT l.classid::bigint AS high, l.objid::bigint AS low, a.pid, a.application_name,
       host(a.client_addr) AS client_addr, a.backend_start
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"""
"""The advisory locks on 64-bit keys granted in this database: PostgreSQL shows a key as its high
and low 32 bits."""


def _key(high: int, low: int) -> int:
    key = (high << 32) | low
    return key - (1 << 64) if key >= 1 << 63 else key


class RoleHolders:
    """Who holds each role now: this daemon (`here`), another session (`holder`: its
    `application_name`, client address, backend pid and since when), or nobody. A role held for
    one step at a time is mostly free between steps."""

    def __init__(self, pool: asyncpg.Pool, locks: PgTickLocks, is_builder: Callable[[], bool]) -> None:
        self._pool = pool
        self._locks = locks
        self._is_builder = is_builder

    async def roles(self) -> list[Role]:
        async with db.connection(self._pool) as conn:
            rows = await conn.fetch(HOLDERS_SQL)
        holders = {_key(row["high"], row["low"]): row for row in rows}
        answer: list[Role] = []
        for role, lock, key in ROLES:
            here = self._is_builder() if lock == "builder" else lock in self._locks.held
            row = holders.get(key)
            holder = None
            if row is not None:
                holder = RoleHolder(
                    application_name=row["application_name"],
                    client_addr=row["client_addr"],
                    pid=row["pid"],
                    since=row["backend_start"],
                )
            answer.append(Role(role=role, lock=lock, here=here, holder=holder))
        return answer
