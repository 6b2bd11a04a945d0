"""Throughput against vector recall@10, both sides swept: recalld's `[index] hnsw_ef_search` and
pgvector's `hnsw.ef_search`, part of `python -m bench.recall`'s run (its section of
docs/BENCHMARKS.md).

At each beam, on the queries `python -m bench.recall` asked at one client (their vectors and exact top 10
already known):

- recalld: a daemon started on the bench's data with `RECALLD_INDEX_HNSW_EF_SEARCH` set to the
  beam and both routes' candidates set to pgvector's recipe (`RECALLD_RECALL_FTS_CANDIDATES`,
  `..._VECTOR_CANDIDATES` = 20, as the documented query's top 20 per route). Its vector route
  alone (`routes: [vector]`, k 10, over the socket) gives recall@10 against exact search and
  puts every query vector in the daemon's cache; then `POST /v1/recall` (k 10, both routes) at 16
  clients with the query vector cached.
- pgvector: `SET hnsw.ef_search` to the beam on every connection; `ORDER BY embedding <=> $1
  LIMIT 10` alone gives recall@10; then the documented hybrid query at 16 connections.

The two 16-client loads take turns, SWEEP_ROUNDS times at each beam, and the CPU each process
spent is metered; throughput is the median of the rounds. What each side returns differs:
recalld answers 10 records re-read from PostgreSQL (title, kind, source path, revision, score per
route, a highlighted snippet), pgvector's query 10 ids.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import numpy as np

from bench.lib.corpus import NAMESPACE
from bench.lib.daemon import embedded_dsn, start_daemon, stop_daemon, wait_ready
from bench.lib.load import Load, Meter, socket_load
from bench.lib.pgvector import PGVECTOR_SESSION, PGVECTOR_TABLE, PGVECTOR_TOP, pgvector_load, vector_codec
from bench.lib.report import progress

BEAMS = (20, 40, 100, 150, 250, 350, 500, 1000)
"""The beams swept on both sides. pgvector returns at most ef_search rows, so its hybrid's top 20
needs 20 at least, and takes at most 1,000; recalld's beam is never below the vectors it asks for
(2 × 20 here). 150 and 350 because pgvector's graph crosses recall 0.95 between 100 and 500 (0.917
at 250 on 1,000 queries): with no point there, its first point past 0.95 could be one that
overshoots to 1.000 at half the throughput, flattering recalld."""
SWEEP_ROUNDS = 3
TARGETS = (0.95, 0.99)


def recall_at_10(found: Sequence[Sequence[Any]], exact: Sequence[Sequence[Any]]) -> float:
    """The share of each query's exact top 10 found in its first 10, averaged over the queries."""
    return float(np.mean([len(set(f[:10]) & set(e[:10])) / len(e[:10]) for f, e in zip(found, exact, strict=True)]))


@dataclass
class Point:
    """One side at one beam."""

    beam: int
    recall: float
    loads: list[Load]
    exact_scan: bool = False
    """pgvector only: PostgreSQL's planner sorted the whole table instead of walking the HNSW
    index at this `hnsw.ef_search` (`PGVECTOR_SESSION` should prevent it): an exact answer."""

    @property
    def throughput(self) -> float:
        return statistics.median(load.throughput for load in self.loads)

    def cpu_ms(self) -> dict[str, float]:
        merged = Load.merged(self.loads)
        return {who: 1000 * seconds / len(merged.latency_ms) for who, seconds in merged.cpu_s.items()}


async def _vector_route(socket: Path, queries: Sequence[str], clients: int = 4) -> list[list[uuid.UUID]]:
    """The vector route's top 10 per query, over the socket (fills the query-vector cache too)."""
    found: list[list[uuid.UUID]] = [[] for _ in queries]
    connector = aiohttp.UnixConnector(path=str(socket), limit=clients)
    async with aiohttp.ClientSession(connector=connector, base_url="http://recalld") as session:
        pending = iter(enumerate(queries))

        async def worker() -> None:
            for i, query in pending:
                body = {"namespace": NAMESPACE, "query": query, "k": 10, "routes": ["vector"]}
                async with session.post("/v1/recall", json=body) as response:
                    answer = await response.json()
                    if response.status != 200 or answer["degraded_routes"]:
                        raise SystemExit(f"the vector route answered {response.status}: {answer}")
                found[i] = [uuid.UUID(r["id"]) for r in answer["results"]]

        await asyncio.gather(*(worker() for _ in range(clients)))
    return found


async def _pgvector_top10(dsn: str, vectors: np.ndarray, beam: int) -> tuple[list[list[int]], bool]:
    """Each vector's top 10 at `beam`, and whether the planner chose an exact scan over the index
    (the documented hybrid's vector half is the same `ORDER BY ... LIMIT`, at 20)."""
    conn = await asyncpg.connect(dsn)
    try:
        await vector_codec(conn)
        await conn.execute(PGVECTOR_SESSION)
        await conn.execute(f"SET hnsw.ef_search = {int(beam)}")
        sql = f"SELECT id FROM {PGVECTOR_TABLE} ORDER BY embedding <=> $1 LIMIT {PGVECTOR_TOP}"
        plan = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + sql, vectors[0]))
        top10 = [[r["id"] for r in (await conn.fetch(sql, vector))[:10]] for vector in vectors]
        return top10, "Index Scan" not in plan
    finally:
        await conn.close()


def sweep(
    args: argparse.Namespace,
    *,
    queries: list[str],
    vectors: np.ndarray,
    exact: list[list[uuid.UUID]],
    record_of: dict[int, uuid.UUID],
    config: Path,
    beams: Sequence[int] = BEAMS,
    rounds: int = SWEEP_ROUNDS,
) -> tuple[list[Point], list[Point]]:
    """(recalld's points, pgvector's points), one per beam. Starts and stops its own daemons."""
    items = (queries * 2)[: 2 * len(queries)]
    pg_items, pg_vectors = items, np.concatenate([vectors, vectors])[: len(items)]
    ours: list[Point] = []
    theirs: list[Point] = []
    for beam in beams:
        env = {
            "RECALLD_INDEX_HNSW_EF_SEARCH": str(beam),
            "RECALLD_RECALL_FTS_CANDIDATES": str(PGVECTOR_TOP),
            "RECALLD_RECALL_VECTOR_CANDIDATES": str(PGVECTOR_TOP),
        }
        progress(f"sweep: beam {beam}, starting recalld with {env}")
        daemon = start_daemon(args.work / "data", args.socket, args.work / "serve.log", config=config, env=env)
        try:
            wait_ready(args.socket)
            dsn = embedded_dsn(args.work / "data")
            found = asyncio.run(_vector_route(args.socket, queries))
            pg_ids, exact_scan = asyncio.run(_pgvector_top10(dsn, vectors, beam))
            meter = Meter(daemon.pid, args.work / "data/pg")
            asyncio.run(socket_load(args.socket, queries[:64], 16, "warm-up"))
            recalld_loads, pg_loads = [], []
            for _ in range(rounds):
                recalld_loads.append(meter.run(socket_load(args.socket, items, 16, "recalld")))
                pg_loads.append(meter.run(pgvector_load(dsn, pg_items, pg_vectors, 16, ef_search=beam)))
        finally:
            stop_daemon(daemon)
        ours.append(Point(beam, recall_at_10(found, exact), recalld_loads))
        pg_recall = recall_at_10([[record_of[s] for s in ids] for ids in pg_ids], exact)
        theirs.append(Point(beam, pg_recall, pg_loads, exact_scan))
        progress(
            f"  recalld recall@10 {ours[-1].recall:.3f}, {ours[-1].throughput:.0f}/s;"
            f" pgvector recall@10 {theirs[-1].recall:.3f}, {theirs[-1].throughput:.0f}/s"
        )
    return ours, theirs


def _best(points: Sequence[Point], target: float) -> Point | None:
    """The fastest point at or above `target` recall (the narrowest beam that reaches it, usually)."""
    reached = [p for p in points if p.recall >= target]
    return max(reached, key=lambda p: p.throughput) if reached else None


def report(ours: Sequence[Point], theirs: Sequence[Point], rounds: int = SWEEP_ROUNDS) -> list[str]:
    lines = [
        "",
        "Throughput at 16 clients against vector recall@10, both beams swept (`bench/lib/sweep.py`):"
        f" recalld with `[index] hnsw_ef_search` = the beam and {PGVECTOR_TOP} candidates per route (pgvector's"
        f" recipe), the query vector cached; pgvector's documented hybrid with `hnsw.ef_search` = the beam."
        f" Throughput is the median of {rounds} rounds taking turns; CPU per request in ms, daemon /"
        " PostgreSQL / client. recalld answers 10 records re-read from PostgreSQL (title, kind, source"
        " path, revision, each route's score, a highlighted snippet); pgvector's query answers 10 ids.",
        "",
        "| beam | recalld recall@10 | recalld queries/s | recalld CPU ms | pgvector recall@10 |"
        " pgvector queries/s | pgvector CPU ms | recalld / pgvector |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    # each beam's pair, then each target's best (None where not reached); `best` is text, then a Point
    mine: Point | None
    other: Point | None
    best: str | Point
    for mine, other in zip(ours, theirs, strict=True):
        a, b = mine.cpu_ms(), other.cpu_ms()
        lines.append(
            f"| {mine.beam} | {mine.recall:.3f} | {mine.throughput:.0f} |"
            f" {a['daemon']:.2f} / {a['postgresql']:.2f} / {a['client']:.2f} | {other.recall:.3f}"
            f"{' (exact scan)' if other.exact_scan else ''} |"
            f" {other.throughput:.0f} | {b['daemon']:.2f} / {b['postgresql']:.2f} / {b['client']:.2f} |"
            f" {mine.throughput / other.throughput:.2f}× |"
        )
    lines.append("")
    for target in TARGETS:
        mine, other = _best(ours, target), _best(theirs, target)
        if mine is None or other is None:
            best = f"recalld's best {max(p.recall for p in ours):.3f}, pgvector's {max(p.recall for p in theirs):.3f}"
            lines.append(f"- At recall@10 ≥ {target}: not reached by both sides at these beams ({best}).")
            continue
        lines.append(
            f"- At recall@10 ≥ {target}: recalld {mine.throughput:.0f} queries/s (beam {mine.beam}, recall"
            f" {mine.recall:.3f}), pgvector {other.throughput:.0f} (ef_search {other.beam}, recall"
            f" {other.recall:.3f}{', an exact scan' if other.exact_scan else ''}):"
            f" **{mine.throughput / other.throughput:.2f}×**"
            + (" (aim: at least 2.0× with each side's default graph)." if target == TARGETS[0] else ".")
        )
    walked = [p for p in theirs if not p.exact_scan]
    if len(walked) < len(theirs) and walked:
        best = max(walked, key=lambda p: p.recall)
        lines.append(
            f"- pgvector's HNSW index itself reached recall@10 {best.recall:.3f} at most (ef_search {best.beam});"
            " at the beams marked exact scan PostgreSQL's planner sorted the whole table instead."
        )
    return lines
