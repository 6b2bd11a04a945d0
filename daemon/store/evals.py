"""Eval runs in PostgreSQL (migration 0011): what `recalld eval` records and `--history` lists."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg

from recalld.store import db

_COLUMNS = (
    "id, recorded_at, started_at, duration_s, golden, source, namespace, space, space_id, questions, "
    'count, "of", floor, verdict, degraded, routes'
)


class EvalStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def record(self, run: dict[str, Any]) -> uuid.UUID:
        """Store one run (fields as `EvalRunIn`, already checked); returns its id."""
        run_id = uuid.uuid4()
        async with db.connection(self._pool) as conn:
            await conn.execute(
                """INSERT INTO eval_runs (id, started_at, duration_s, golden, source, namespace, space, space_id,
                                          questions, count, "of", floor, verdict, degraded, routes)
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)""",
                run_id,
                run["started_at"],
                run["duration_s"],
                run["golden"],
                run["source"],
                run["namespace"],
                run["space"],
                run["space_id"],
                run["questions"],
                run["count"],
                run["of"],
                run["floor"],
                run["verdict"],
                run["degraded"],
                run["routes"],
            )
        return run_id

    async def runs(self, *, golden: str | None, limit: int) -> list[dict[str, Any]]:
        """The latest `limit` runs (of `golden` when given), newest first."""
        async with db.connection(self._pool) as conn:
            rows = await conn.fetch(
                f"""SELECT {_COLUMNS} FROM eval_runs
                    WHERE $1::text IS NULL OR golden = $1
                    ORDER BY started_at DESC, recorded_at DESC LIMIT $2""",
                golden,
                limit,
            )
        return [dict(row) for row in rows]
