"""Read side of recall in PostgreSQL: candidate queries per route, and rehydration.

Routes return only (id, revision, score) candidates. Whatever a route found, the answer is
built from `rehydrate`, which re-reads the live rows in one query: a record forgotten or moved
after a route looked at it is dropped there, never returned.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

import asyncpg

# Must match the configuration of the generated `records.search` column (migration 0001).
TS_CONFIG = "english"


@dataclass(frozen=True)
class Candidate:
    id: uuid.UUID
    revision: int
    score: float


@dataclass(frozen=True)
class Filters:
    namespace: str
    kinds: list[str] | None = None
    attributes: dict[str, Any] | None = None


_FILTER_SQL = """r.namespace = $1 AND r.deleted_at IS NULL
    AND ($2::text[] IS NULL OR r.kind = ANY($2))
    AND ($3::jsonb IS NULL OR r.attributes @> $3)"""


async def full_text(conn: asyncpg.Connection, filters: Filters, query: str, limit: int) -> list[Candidate]:
    """Records matching `query` (web-search syntax), best `ts_rank` first, id as tie-break."""
    rows = await conn.fetch(
        f"""SELECT r.id, r.revision, ts_rank(r.search, q) AS score
            FROM records r, websearch_to_tsquery('{TS_CONFIG}', $4) AS q
            WHERE {_FILTER_SQL} AND r.search @@ q
            ORDER BY score DESC, r.id
            LIMIT $5""",
        filters.namespace,
        filters.kinds,
        filters.attributes,
        query,
        limit,
    )
    return [Candidate(row["id"], row["revision"], float(row["score"])) for row in rows]


async def structured(conn: asyncpg.Connection, filters: Filters, limit: int) -> list[Candidate]:
    """Records matching the kind and attribute filters alone, most recently changed first."""
    rows = await conn.fetch(
        f"""SELECT r.id, r.revision, extract(epoch FROM r.updated_at) AS score
            FROM records r
            WHERE {_FILTER_SQL}
            ORDER BY r.updated_at DESC, r.id
            LIMIT $4""",
        filters.namespace,
        filters.kinds,
        filters.attributes,
        limit,
    )
    return [Candidate(row["id"], row["revision"], float(row["score"])) for row in rows]


async def rehydrate(
    conn: asyncpg.Connection, filters: Filters, ids: list[uuid.UUID], query: str, snippet_words: int
) -> dict[uuid.UUID, asyncpg.Record]:
    """Re-read candidates in one query; only live rows of the namespace that pass the filters."""
    if not ids:
        return {}
    options = f"MaxWords={snippet_words}, MinWords={max(3, snippet_words // 3)}, MaxFragments=1"
    rows = await conn.fetch(
        f"""SELECT r.id, r.title, r.kind, r.source_path, r.revision,
                   ts_headline('{TS_CONFIG}', r.body, websearch_to_tsquery('{TS_CONFIG}', $5), $6) AS snippet
            FROM records r
            WHERE {_FILTER_SQL} AND r.id = ANY($4::uuid[])""",
        filters.namespace,
        filters.kinds,
        filters.attributes,
        ids,
        query,
        options,
    )
    return {row["id"]: row for row in rows}


async def record_search(conn: asyncpg.Connection, row: dict[str, Any]) -> None:
    """Write the telemetry row of one recall (never the query text, only its hash)."""
    await conn.execute(
        """INSERT INTO searches
               (id, namespace, query_hash, routes, fusion, results, timings_ms, degraded_routes)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8)""",
        row["id"],
        row["namespace"],
        row["query_hash"],
        row["routes"],
        row["fusion"],
        row["results"],
        row["timings_ms"],
        row["degraded_routes"],
    )


class SearchLog:
    """Retention of search telemetry (implements the sweeper's `RetentionStore`)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def delete_searches_before(self, cutoff: dt.datetime) -> int:
        async with self._pool.acquire() as conn:
            done = await conn.execute("DELETE FROM searches WHERE created_at < $1", cutoff)
        return int(done.split()[-1])
