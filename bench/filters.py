"""What exact filtering costs the vector route (`[recall] exact_filter_max_records`).

    .venv/bin/python -m bench.filters [--write docs/RETRIEVAL.md]

On the data `bench/recall.py` left in var/bench-recall (100,000 passages, one chunk each, an
HNSW generation; run that first). Kind and attribute filters live in PostgreSQL, so a filtered
vector search first reads the records the filters let through, at most the limit plus one, then
scores just their vectors. Two costs decide the limit:

- reading the records, measured with a filter every record passes (`kinds = ["man"]`), so each
  read stops at the limit plus one: what a filter too broad for the exact path wastes;
- scoring m records' vectors exactly (`Handle.search(within=...)`, one chunk a record here;
  a record of n chunks costs n of them), next to the index walk of an unfiltered search.

Medians of 15 runs each; the daemon runs beside the script (it holds the embedded PostgreSQL).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import asyncpg
import msgspec
import numpy as np

from bench.lib.corpus import NAMESPACE
from bench.lib.daemon import daemon_on_recall_data, embedded_dsn
from bench.lib.report import machine, progress, publish, write_option
from recalld.actors.index.generation import load_generation, manifest_sha256
from recalld.actors.index.handle import Handle
from recalld.actors.index.manifest import MANIFEST_FILE, Expected, Manifest
from recalld.store.search import Filters, filtered_records

RUNS = 15
READ_LIMITS = (100, 1000, 4000, 10000)
SCORED = (10, 100, 1000, 4000, 10000)


def median_ms(call: Callable[..., object], runs: int = RUNS) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


async def read_costs(dsn: str) -> dict[int, float]:
    conn = await asyncpg.connect(dsn)
    try:
        costs = {}
        broad = Filters(NAMESPACE, kinds=["man"])
        for limit in READ_LIMITS:
            assert await filtered_records(conn, broad, limit) is None, "every bench record is of kind 'man'"
            times = []
            for _ in range(RUNS):
                started = time.perf_counter()
                await filtered_records(conn, broad, limit)
                times.append((time.perf_counter() - started) * 1000)
            costs[limit] = statistics.median(times)
        return costs
    finally:
        await conn.close()


def current_handle(generations: Path) -> Handle:
    directory = max(generations.glob("g*/"), key=lambda d: d.stat().st_mtime)
    manifest = msgspec.json.decode((directory / MANIFEST_FILE).read_bytes(), type=Manifest)
    return Handle.of(load_generation(generations, Expected.from_manifest(manifest, manifest_sha256(directory))))


def scoring_costs(handle: Handle) -> tuple[float, dict[int, float]]:
    base = handle.base
    assert base is not None
    rng = np.random.default_rng(7)
    ids = base.id_map.record_id
    queries = np.asarray([base.index.reconstruct(int(i)) for i in rng.integers(0, base.count, RUNS)], np.float32)
    walk = statistics.median(
        median_ms(lambda q=q: handle.search(q, k_records=10, namespace=NAMESPACE), runs=3) for q in queries
    )
    costs = {}
    for m in SCORED:
        within = ids[rng.choice(base.count, m, replace=False)]
        costs[m] = statistics.median(
            median_ms(lambda q=q, w=within: handle.search(q, k_records=10, namespace=NAMESPACE, within=w), runs=3)
            for q in queries
        )
    return walk, costs


def report(reads: dict[int, float], walk: float, scoring: dict[int, float], count: int) -> list[str]:
    lines = [
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {machine()}: the 100,000 passages of"
        f" `bench/recall.py` ({count} vectors, HNSW), one chunk a record.",
        "",
        "Command: `.venv/bin/python -m bench.filters --write docs/RETRIEVAL.md`",
        "",
        "| limit | reading limit + 1 records (a filter every record passes: what a broader filter wastes) |",
        "|---:|---:|",
        *(f"| {limit:,} | {ms:.1f} ms |" for limit, ms in reads.items()),
        "",
        f"| records scored exactly, one chunk each (k = 10) | search | the unfiltered index walk: {walk:.2f} ms |",
        "|---:|---:|---:|",
        *(f"| {m:,} | {ms:.2f} ms | {ms / walk:.1f}x |" for m, ms in scoring.items()),
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    write = write_option(__doc__, "filters.py", argv)
    with daemon_on_recall_data() as work:
        progress("reading filtered records")
        reads = asyncio.run(read_costs(embedded_dsn(work / "data")))
        progress("loading the current generation")
        handle = current_handle(work / "data/generations")
        progress("scoring records exactly")
        walk, scoring = scoring_costs(handle)
    lines = report(reads, walk, scoring, handle.count)
    publish(lines, write, "filters.py")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
