"""Read side of recall in PostgreSQL: candidate queries per route, and rehydration.

Routes return only (id, revision, score) candidates. Whatever a route found, the answer is
built from `rehydrate`, which re-reads the live rows in one query: a record forgotten or moved
after a route looked at it is dropped there, never returned.
"""

from __future__ import annotations

import datetime as dt
import functools
import uuid
from dataclasses import dataclass
from typing import Any

import anyio
import asyncpg
import msgspec
from anyio.abc import TaskStatus

from recalld.actors.kernel.batching import WriteBehind
from recalld.actors.recall.query import Evidence, TextQuery, build_text_query
from recalld.store import db
from recalld.store.db import FLUSH_WAIT_S, STORE_DOWN_ERRORS
from recalld.wire.recall import RecallStats

# Must match the configuration of the generated `records.search` column (migration 0001).
TS_CONFIG = "english"


class Candidate(msgspec.Struct, frozen=True):
    """One record a route found. A frozen msgspec struct: a recall makes 50-90 of them, and one
    builds ten times faster than a frozen dataclass (0.1 against 1 us)."""

    id: uuid.UUID
    revision: int
    score: float
    chunk: int | None = None
    """The surrogate of the best-matching chunk, when the route knows it (the vector route)."""


@dataclass(frozen=True)
class Filters:
    namespace: str
    kinds: list[str] | None = None
    attributes: dict[str, Any] | None = None

    @property
    def beyond_namespace(self) -> bool:
        """Whether records are chosen by more than their namespace (which the index knows).
        `attributes={}` chooses nothing: every record's attributes contain it."""
        return self.kinds is not None or bool(self.attributes)


_FILTER_SQL = """r.namespace = $1 AND r.deleted_at IS NULL
    AND ($2::text[] IS NULL OR r.kind = ANY($2))
    AND ($3::jsonb IS NULL OR r.attributes @> $3)"""


# Below this many phrase and strict matches, the loose query (any term) fills the list up to the cap.
LOOSE_BELOW = 10


# Records holding every term, scored `evidence + ts_rank / (ts_rank + 1)` (flag 32). A record that
# also holds the phrase ($4, when there is one) is exact evidence ranked by the phrase, the others
# `strict_evidence` ($8) ranked by the terms. A phrase match holds every term, so one scan of the
# GIN index finds both; a statement per step cost twice the planning and two scans (bench data:
# 2.5 -> 1.2 ms per full-text query, the same answers for all 1,500 bench queries).
_MATCHED = f"""SELECT r.id, r.revision,
               CASE WHEN m.exact THEN $7::float8 ELSE $8::float8 END
                 + ts_rank(r.search, CASE WHEN m.exact THEN p.q ELSE s.q END, 32) AS score
        FROM records r,
             websearch_to_tsquery('{TS_CONFIG}', $5) AS s (q),
             websearch_to_tsquery('{TS_CONFIG}', nullif($4, '')) AS p (q),
             LATERAL (SELECT p.q IS NOT NULL AND r.search @@ p.q AS exact) AS m
        WHERE {_FILTER_SQL} AND r.search @@ s.q
        ORDER BY score DESC, r.id
        LIMIT $6"""

# When fewer than LOOSE_BELOW records hold every term, records holding any term ($9) follow.
# The count is a one-time filter: with enough strict matches the any-term scan never runs.
_WITH_LOOSE = f"""
WITH matched AS ({_MATCHED}),
loose AS (
    SELECT r.id, r.revision, $10::float8 + ts_rank(r.search, q, 32) AS score
    FROM records r, websearch_to_tsquery('{TS_CONFIG}', $9) AS q
    WHERE (SELECT count(*) FROM matched) < {LOOSE_BELOW} AND {_FILTER_SQL} AND r.search @@ q
      AND r.id NOT IN (SELECT id FROM matched)
    ORDER BY score DESC, r.id
    LIMIT $6
)
SELECT id, revision, score FROM (SELECT 0 AS step, * FROM matched UNION ALL SELECT 1, * FROM loose) AS steps
ORDER BY step, score DESC, id
LIMIT $6"""


# A query's reading is a pure function of its text (`TextQuery` is immutable), and clients ask
# the same query again (an agent re-asks, the query-vector cache exists for the same reason):
# reading one cost 4% of the loop's time under a repeated-query load (py-spy).
_read_query = functools.lru_cache(maxsize=1024)(build_text_query)


async def full_text(
    conn: asyncpg.Connection,
    filters: Filters,
    query: str,
    limit: int,
    *,
    loose: bool = True,
    built: TextQuery | None = None,
) -> list[Candidate]:
    """Records matching `query`, best first, id as tie-break; at most `limit`.

    The query is read by `recalld.actors.recall.query.build_text_query`: options and identifiers are searched
    as written (a leading `-` is never a NOT, `=` splits an option from its value). Records
    holding the query word for word come first (a query without identifiers), then records
    holding every term; when fewer than LOOSE_BELOW did, records holding any term follow, those
    holding more of them first. A score's integer part is its `Evidence` level
    (`recalld.actors.recall.query.evidence_of`): exact, every word, or some terms. Every query is served by the
    GIN index on `records.search`.

    `loose=False` skips the any-term step: it ranks every record holding any of the words (on a
    large namespace with a common word, most of it), which is the route's main cost, and fused
    next to an answering vector route such matches only break ties. `built`: the query as
    `build_text_query` read it, when the caller read it otherwise (a bench comparing readings).
    """
    built = built or _read_query(query)
    if built.empty or limit < 1:
        return []
    matched = (
        filters.namespace,
        filters.kinds,
        filters.attributes,
        built.phrase or "",
        built.strict,
        limit,
        float(Evidence.EXACT),
        float(built.strict_evidence),
    )
    if loose and built.loose != built.strict:
        rows = await conn.fetch(_WITH_LOOSE, *matched, built.loose, float(Evidence.SOME_TERMS))
    else:
        rows = await conn.fetch(_MATCHED, *matched)
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


async def filtered_records(conn: asyncpg.Connection, filters: Filters, limit: int) -> list[uuid.UUID] | None:
    """The live records that pass `filters`, for the vector route to score exactly; None when more
    than `limit` do: a filter that broad is left to the index's own walk and the over-fetch.
    1–2 ms per 1,000 records (docs/RETRIEVAL.md, "Filters")."""
    rows = await conn.fetch(
        f"SELECT r.id FROM records r WHERE {_FILTER_SQL} LIMIT $4",
        filters.namespace,
        filters.kinds,
        filters.attributes,
        limit + 1,
    )
    return None if len(rows) > limit else [row[0] for row in rows]


# Highlighting is not matching: any query word may mark the passage to show, so the snippet
# uses the words OR-ed, whatever the route that found the record. The highlight query is a
# one-row FROM item, so PostgreSQL computes it once per statement: written inline, a generic plan
# (asyncpg prepares every statement, and PostgreSQL switches to a generic plan after five runs)
# parsed and stemmed the query again for every chunk ranked and every snippet cut, which made a
# full-text-only recall's rehydration four times slower (man pages, the statement by hand: 13.3 -> 3.4 ms).
REHYDRATE_SQL = f"""SELECT r.id, r.title, r.kind, r.source_path, r.revision,
       ts_headline('{TS_CONFIG}', coalesce(c.text, matched.text, r.body), hl.q, $6) AS snippet
FROM to_tsquery('{TS_CONFIG}', replace(plainto_tsquery('{TS_CONFIG}', $5)::text, ' & ', ' | ')) AS hl (q)
CROSS JOIN records r
LEFT JOIN unnest($7::uuid[], $8::bigint[]) AS best (id, surrogate) ON best.id = r.id
LEFT JOIN chunks c ON c.surrogate = best.surrogate AND c.retired_at IS NULL
LEFT JOIN LATERAL (
    SELECT m.text FROM chunks m
    WHERE c.surrogate IS NULL AND m.record_id = r.id AND m.revision = r.revision
      AND m.retired_at IS NULL
    ORDER BY ts_rank(m.search, hl.q) DESC, m.chunk_no, m.surrogate
    LIMIT 1
) AS matched ON true
WHERE {_FILTER_SQL} AND r.id = ANY($4::uuid[])"""


async def rehydrate(
    conn: asyncpg.Connection,
    filters: Filters,
    ids: list[uuid.UUID],
    query: str,
    snippet_words: int,
    best_chunks: dict[uuid.UUID, int] | None = None,
) -> dict[uuid.UUID, asyncpg.Record]:
    """Re-read candidates in one query; only live rows of the namespace that pass the filters.

    The snippet comes from the record's best chunk: the one a route named (so a hit found by
    meaning shows the passage that matched), else the live chunk of the record's revision that
    ranks best for the query's words; a record not chunked yet falls back to its body. Either
    way it is highlighted for the query.
    """
    if not ids:
        return {}
    chunks = best_chunks or {}
    options = f"MaxWords={snippet_words}, MinWords={max(3, snippet_words // 3)}, MaxFragments=1"
    rows = await conn.fetch(
        REHYDRATE_SQL,
        filters.namespace,
        filters.kinds,
        filters.attributes,
        ids,
        query,
        options,
        list(chunks),
        list(chunks.values()),
    )
    return {row["id"]: row for row in rows}


_SEARCH_COLUMNS = ("id", "namespace", "query_hash", "routes", "fusion", "results", "timings_ms", "degraded_routes")
_INSERT_SEARCH = (
    f"INSERT INTO searches ({', '.join(_SEARCH_COLUMNS)})"
    f" VALUES ({', '.join(f'${i}' for i in range(1, len(_SEARCH_COLUMNS) + 1))})"
)


class SearchRecorder:
    """Writes the telemetry row of each recall (never the query text, only its hash) in batches.

    A recall hands its row over and answers; the rows gather for `linger_s` and are written in
    one statement, so many recalls share one round trip instead of each paying its own (under a
    steady load of one client too). `flush` returns once every row handed over before it is
    written: feedback and statistics read them. While PostgreSQL is down rows wait, up to
    `max_pending`; beyond that the oldest are dropped and counted in `dropped`
    (`recalld.actors.kernel.batching.WriteBehind`).
    """

    def __init__(
        self, pool: asyncpg.Pool, *, max_pending: int = 10_000, retry_s: float = 1.0, linger_s: float = 1.0
    ) -> None:
        self._pool = pool
        self._rows = WriteBehind[tuple[Any, ...]](
            self._write,
            name="search telemetry",
            linger_s=linger_s,
            max_pending=max_pending,
            retry_on=STORE_DOWN_ERRORS,
            retry_s=retry_s,
        )

    @property
    def written(self) -> int:
        return self._rows.written

    @property
    def failed(self) -> int:
        return self._rows.failed

    @property
    def dropped(self) -> int:
        return self._rows.dropped

    def add(self, row: dict[str, Any]) -> None:
        self._rows.add(tuple(row[column] for column in _SEARCH_COLUMNS))

    async def flush(self) -> None:
        """Return once every row handed over before the call is written (or dropped)."""
        await self._rows.flush()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        await self._rows.run(task_status=task_status)

    async def _write(self, rows: list[tuple[Any, ...]]) -> None:
        async with db.connection(self._pool) as conn:
            await conn.executemany(_INSERT_SEARCH, rows)


class SearchLog:
    """Retention of search telemetry (implements the sweeper's `RetentionStore`)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def delete_searches_before(self, cutoff: dt.datetime) -> int:
        async with db.connection(self._pool) as conn:
            done = await conn.execute("DELETE FROM searches WHERE created_at < $1", cutoff)
        return int(done.split()[-1])


class FeedbackStore:
    """Feedback on recall answers and the per-namespace statistics built from it."""

    def __init__(self, pool: asyncpg.Pool, searches: SearchRecorder) -> None:
        self._pool = pool
        self._searches = searches

    async def _written(self) -> None:
        """Judgements and statistics read search rows: let the recorder write what it holds
        (bounded: with PostgreSQL down the reads fail on their own)."""
        with anyio.move_on_after(FLUSH_WAIT_S):
            await self._searches.flush()

    async def search_namespace(self, search_id: uuid.UUID) -> str | None:
        await self._written()
        async with db.connection(self._pool) as conn:
            found = await conn.fetchval("SELECT namespace FROM searches WHERE id = $1", search_id)
        return str(found) if found is not None else None

    async def record(self, search_id: uuid.UUID, record_id: uuid.UUID, useful: bool) -> int | None:
        """Store a judgement; the result's rank in that answer, or None when it was not in it."""
        async with db.connection(self._pool) as conn, db.transaction(conn):
            rank = await conn.fetchval(
                """SELECT (r->>'rank')::int FROM searches s, jsonb_array_elements(s.results) r
                   WHERE s.id = $1 AND r->>'id' = $2""",
                search_id,
                str(record_id),
            )
            if rank is None:
                return None
            await conn.execute(
                """INSERT INTO search_feedback (search_id, record_id, rank, useful) VALUES ($1, $2, $3, $4)
                   ON CONFLICT (search_id, record_id) DO UPDATE SET useful = EXCLUDED.useful, created_at = now()""",
                search_id,
                record_id,
                rank,
                useful,
            )
            return int(rank)

    async def stats(self, namespace: str, k: int) -> RecallStats:
        """Precision@k over judged results, where useful results ranked, and how often routes degraded."""
        await self._written()
        async with db.connection(self._pool) as conn:
            searches = await conn.fetchrow(
                """SELECT count(*) AS searches,
                          count(*) FILTER (WHERE jsonb_array_length(degraded_routes) > 0) AS degraded,
                          count(*) FILTER (WHERE jsonb_array_length(results) = 0) AS empty
                   FROM searches WHERE namespace = $1""",
                namespace,
            )
            judged = await conn.fetchrow(
                """SELECT count(DISTINCT f.search_id) AS searches_with_feedback,
                          count(*) FILTER (WHERE f.rank <= $2) AS judged_at_k,
                          count(*) FILTER (WHERE f.rank <= $2 AND f.useful) AS useful_at_k
                   FROM search_feedback f JOIN searches s ON s.id = f.search_id
                   WHERE s.namespace = $1""",
                namespace,
                k,
            )
            ranks = await conn.fetch(
                """SELECT f.rank, count(*) AS n FROM search_feedback f JOIN searches s ON s.id = f.search_id
                   WHERE s.namespace = $1 AND f.useful GROUP BY f.rank ORDER BY f.rank""",
                namespace,
            )
        judged_at_k = int(judged["judged_at_k"])
        return RecallStats(
            namespace=namespace,
            k=k,
            searches=int(searches["searches"]),
            degraded_searches=int(searches["degraded"]),
            empty_searches=int(searches["empty"]),
            searches_with_feedback=int(judged["searches_with_feedback"]),
            judged_at_k=judged_at_k,
            useful_at_k=int(judged["useful_at_k"]),
            precision_at_k=round(int(judged["useful_at_k"]) / judged_at_k, 4) if judged_at_k else None,
            useful_rank_distribution={str(r["rank"]): int(r["n"]) for r in ranks},
        )
