"""Numbered, forward-only SQL migrations, applied at start under an advisory lock.

Files are `migrations/NNNN_name.sql`; each runs in its own transaction and is recorded in
`schema_migrations`. Several daemons starting at once serialise on the advisory lock, so each
migration runs exactly once. A database that has a migration this code does not know was
written by a newer recalld: we refuse to start rather than run against a schema we do not
understand.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from importlib import resources

import asyncpg

log = logging.getLogger("recalld.store.migrations")

# Arbitrary but fixed: the advisory lock key every recalld uses while migrating.
MIGRATION_LOCK_KEY = 0x7265_6361_6C6C_01  # "recall" + 1
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


class SchemaTooNew(RuntimeError):
    """The database was migrated by a newer recalld than this one."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def available() -> list[Migration]:
    """The migrations shipped with this code, in version order (gaps and duplicates refused)."""
    found: list[Migration] = []
    for entry in resources.files("recalld.store").joinpath("migrations").iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    expected = list(range(1, len(found) + 1))
    if [m.version for m in found] != expected:
        raise RuntimeError(f"migrations must be numbered 1..n without gaps: {[m.version for m in found]}")
    return found


async def current_version(conn: asyncpg.Connection) -> int:
    exists = await conn.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL")
    if not exists:
        return 0
    return int(await conn.fetchval("SELECT coalesce(max(version), 0) FROM schema_migrations"))


async def migrate(conn: asyncpg.Connection, migrations: list[Migration] | None = None) -> list[int]:
    """Bring the schema up to date; return the versions applied now (empty when current)."""
    migrations = available() if migrations is None else migrations
    known = migrations[-1].version if migrations else 0
    await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_KEY)
    try:
        await conn.execute(
            """CREATE TABLE IF NOT EXISTS schema_migrations (
                   version    integer PRIMARY KEY,
                   name       text NOT NULL,
                   applied_at timestamptz NOT NULL DEFAULT now())"""
        )
        at = await current_version(conn)
        if at > known:
            raise SchemaTooNew(
                f"the database schema is at version {at}, but this recalld knows migrations only up to "
                f"{known}: it was written by a newer recalld. Run that version (or newer), or restore a "
                "backup taken before the upgrade."
            )
        applied: list[int] = []
        for migration in migrations:
            if migration.version <= at:
                continue
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                    migration.version,
                    migration.name,
                )
            log.info("applied migration %04d_%s", migration.version, migration.name)
            applied.append(migration.version)
        return applied
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_KEY)


async def migrate_database(dsn: str, *, connect_timeout_s: float) -> list[int]:
    """`migrate` on a connection of its own, which has no statement timeout (the pool's has):
    a migration of a large table, or the wait for another daemon's, may take longer than any
    request should, and a migration cut short by a timeout would fail again on every start."""
    conn = await asyncpg.connect(dsn, timeout=connect_timeout_s)
    try:
        return await migrate(conn)
    finally:
        await conn.close()
