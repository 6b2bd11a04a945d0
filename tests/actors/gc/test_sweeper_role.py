"""Daemons sharing a database sweep their own directories, and the rows one at a time: a pass whose
database role another daemon holds deletes no row, and the next pass after it is let go does."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import asyncpg
import pytest

from recalld.actors.gc.sweeper import SWEEPER_ROLE, Sweeper, SweepSettings
from recalld.actors.index.manifest import TEMP_PREFIX
from recalld.store.roles import PgTickLocks
from recalld.store.search import SearchLog
from recalld.store.vectors import PgVectorStore

pytestmark = pytest.mark.anyio

NAMESPACE = f"sweeper-role-{uuid.uuid4().hex[:8]}"


async def expired_searches(pool: asyncpg.Pool, n: int) -> None:
    async with pool.acquire() as conn:
        await conn.executemany(
            "INSERT INTO searches (id, namespace, query_hash, routes, fusion, results, timings_ms, created_at) "
            "VALUES ($1, $2, 'q', '{}', '{}', '[]', '{}', now() - interval '40 days')",
            [(uuid.uuid4(), NAMESPACE) for _ in range(n)],
        )


async def searches_left(pool: asyncpg.Pool) -> int:
    return int(await pool.fetchval("SELECT count(*) FROM searches WHERE namespace = $1", NAMESPACE))


def sweeper(pool: asyncpg.Pool, root: Path) -> Sweeper:
    root.mkdir()
    return Sweeper(
        PgVectorStore(pool),
        SearchLog(pool),
        root,
        leased=set,
        settings=SweepSettings(search_retention_s=30 * 86400.0, temp_grace_s=1.0),
        locks=PgTickLocks(pool),
    )


async def test_a_pass_whose_database_role_is_held_elsewhere_sweeps_only_its_own_directory(
    pool: asyncpg.Pool, tmp_path: Path
) -> None:
    member = sweeper(pool, tmp_path / "member")
    crashed_build = tmp_path / "member" / f"{TEMP_PREFIX}crashed-build"
    crashed_build.mkdir()
    os.utime(crashed_build, (time.time() - 60, time.time() - 60))
    await expired_searches(pool, 3)
    async with PgTickLocks(pool).hold(SWEEPER_ROLE) as other_member:
        assert other_member
        report = await member.sweep_once()
        assert not report.database and report.searches == 0
        assert await searches_left(pool) == 3, "no row deleted while another daemon holds the role"
        assert report.directories == [crashed_build.name] and not crashed_build.exists()
    report = await member.sweep_once()
    assert report.database and report.searches == 3
    assert await searches_left(pool) == 0
