"""What recall costs PostgreSQL when the planner has no statistics on the tables it reads: the
state of a freshly written or restored corpus until autovacuum's analyze gets to it, which the
catch-up's `refresh_statistics` and `recalld restore` now take themselves
(daemon/store/vectors.py, `PLANNED_AS_THEY_GROW`).

On the corpus bench/recall.py prepared in WORK (`python -m bench.recall --passages 8000 --queries 300
--work var/bench-recall-quick --prepare-only`), a daemon answers 16 clients' recalls with the
query vectors cached, with the statistics PostgreSQL keeps, then with those of TABLES removed
(pg_statistic's rows deleted and the tables' sizes unset, as before a first analyze), then
again after `ANALYZE`; per round: recalls a second and CPU per recall of PostgreSQL and of the
daemon. It also prints the plan of a simplified full-text search (the words' match, rank and
namespace of recall's statement, without its other filters) in both states.

    .venv/bin/python -m bench.recall_statistics [--work var/bench-recall-quick] [--rounds 2]
        [--tables records chunks ...]

It changes the statistics of WORK's database only, and leaves them taken again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import asyncpg

from bench.lib.corpus import NAMESPACE
from bench.lib.cpu import cpu_seconds, postgres_cpu_seconds
from bench.lib.daemon import embedded_dsn, start_daemon, stop_daemon
from bench.lib.load import socket_load
from bench.lib.paths import RECALL_QUICK_WORK
from recalld.store.search import TS_CONFIG

TABLES = ("records", "chunks", "indexed_records", "chunk_vectors", "title_vectors")
"""The tables a recall reads, whose statistics this may remove."""
PLANNED = (
    f"SELECT r.id, ts_rank(r.search, q, 32) FROM records r, websearch_to_tsquery('{TS_CONFIG}', $1) q"
    " WHERE r.search @@ q AND r.namespace = $2 AND r.deleted_at IS NULL ORDER BY 2 DESC LIMIT 20"
)


async def execute(dsn: str, statement: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


async def plan(dsn: str, query: str) -> str:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(f"EXPLAIN (COSTS OFF) {PLANNED}", query, NAMESPACE)
    finally:
        await conn.close()
    return "\n".join(f"    {row[0]}" for row in rows)


async def forget_statistics(dsn: str, tables: list[str]) -> None:
    """As before a first analyze: no column statistics, and no size taken."""
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            oids = "ANY($1::text[]::regclass[]::oid[])"
            await conn.execute(f"DELETE FROM pg_statistic WHERE starelid = {oids}", tables)
            await conn.execute(f"UPDATE pg_class SET reltuples = -1, relpages = 0 WHERE oid = {oids}", tables)
    finally:
        await conn.close()


def measure(label: str, work: Path, socket: Path, pid: int, queries: list[str]) -> None:
    asyncio.run(socket_load(socket, queries, 4, "warm-up"))
    pg, own = postgres_cpu_seconds(work / "data/pg"), cpu_seconds(pid)
    load = asyncio.run(socket_load(socket, queries * 3, 16, "recalld"))
    n = len(load.latency_ms)
    pg_ms = 1000 * (postgres_cpu_seconds(work / "data/pg") - pg) / n
    daemon_ms = 1000 * (cpu_seconds(pid) - own) / n
    print(f"| {label} | {n / load.wall_s:.0f} | {pg_ms:.2f} | {daemon_ms:.2f} |", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=RECALL_QUICK_WORK)
    parser.add_argument("--rounds", type=int, default=2, choices=range(1, 101), metavar="1..100")
    parser.add_argument("--tables", nargs="+", choices=TABLES, default=["records", "chunks", "indexed_records"])
    args = parser.parse_args()
    work = args.work.resolve()
    queries: list[str] = json.loads((work / "corpus.json").read_text())["queries"][-300:]
    socket, dsn = work / "statistics.sock", embedded_dsn(work / "data")
    daemon = start_daemon(work / "data", socket, work / "statistics.log", config=work / "recalld.toml")
    try:
        print(f"16 clients, query vectors cached; statistics removed from {', '.join(args.tables)}\n")
        print("| round | recalls/s | PostgreSQL CPU ms per recall | daemon CPU ms per recall |")
        print("| --- | ---: | ---: | ---: |")
        without = ""
        for r in range(1, args.rounds + 1):
            measure(f"{r}: with statistics", work, socket, daemon.pid, queries)
            asyncio.run(forget_statistics(dsn, args.tables))
            try:
                without = without or asyncio.run(plan(dsn, queries[0]))
                measure(f"{r}: without", work, socket, daemon.pid, queries)
            finally:  # however the round ends, the corpus keeps its statistics
                asyncio.run(execute(dsn, f"ANALYZE {', '.join(args.tables)}"))
        print(f"\nA simplified full-text search for {queries[0]!r} without statistics:\n\n{without}")
        print(f"\nand with them:\n\n{asyncio.run(plan(dsn, queries[0]))}")
    finally:
        stop_daemon(daemon)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
