"""The full-text statement's latency per query, and what reading `or` as websearch does costs.

    .venv/bin/python -m bench.fulltext [--write docs/RETRIEVAL.md]

On the data `bench/recall.py` left in var/bench-recall (100,000 passages of the Debian man pages,
1,500 queries: NAME descriptions and option names; run that first). Each query's full-text
statement as recall runs it next to the vector route (`full_text(..., loose=False)`), once with
the query builder as it is and once with `or` read as websearch reads it (everything before it,
or everything after: `build_text_query(max_readings=1)`), taking turns query by query. The
daemon runs beside the script (it holds the embedded PostgreSQL); medians and tails in ms.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time

import asyncpg

from bench.lib.corpus import NAMESPACE
from bench.lib.daemon import daemon_on_recall_data, embedded_dsn
from bench.lib.report import machine, percentile, progress, publish, write_option
from recalld.actors.recall.query import MAX_READINGS, QUERY_BUILDER_VERSION, build_text_query
from recalld.store.search import Filters, full_text

CAP = 30  # [recall] fts_candidates
RUNS = 3
CURRENT, WEBSEARCH = f"query builder v{QUERY_BUILDER_VERSION}", "`or` as websearch reads it"
READINGS = {CURRENT: MAX_READINGS, WEBSEARCH: 1}  # build_text_query's max_readings


async def measure(dsn: str, queries: list[str]) -> dict[str, list[tuple[float, str]]]:
    """Per reading, (the median of RUNS timings, the query) for every query."""
    conn = await asyncpg.connect(dsn)
    try:
        times: dict[str, list[tuple[float, str]]] = {name: [] for name in READINGS}
        filters = Filters(NAMESPACE)
        for query in queries:
            runs: dict[str, list[float]] = {name: [] for name in READINGS}
            for _ in range(RUNS):
                for name, max_readings in READINGS.items():
                    built = build_text_query(query, max_readings=max_readings)
                    started = time.perf_counter()
                    await full_text(conn, filters, query, CAP, loose=False, built=built)
                    runs[name].append((time.perf_counter() - started) * 1000)
            for name, ms in runs.items():
                times[name].append((statistics.median(ms), query))
        return times
    finally:
        await conn.close()


def has_or(query: str) -> bool:
    return " or " in f" {query.lower()} "


def report(times: dict[str, list[tuple[float, str]]]) -> list[str]:
    queries = [q for _, q in next(iter(times.values()))]
    with_or = sum(map(has_or, queries))
    lines = [
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {machine()}: the 100,000 passages and"
        f" {len(queries)} queries of `bench/recall.py`, {with_or} of them with an `or`; each query's time is the"
        f" median of {RUNS} runs, the two readings taking turns.",
        "",
        "Command: `.venv/bin/python -m bench.fulltext --write docs/RETRIEVAL.md`",
        "",
        "| full-text statement | all: p50 | p95 | p99 | slowest | queries with `or`: median | slowest | their sum |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, rows in times.items():
        ms = [t for t, _ in rows]
        ors = [t for t, q in rows if has_or(q)]
        lines.append(
            f"| {name} | {percentile(ms, 50):.2f} | {percentile(ms, 95):.2f} | {percentile(ms, 99):.2f}"
            f" | {max(ms):.1f} | {percentile(ors, 50):.2f} | {max(ors, default=0):.1f} | {sum(ors):.0f} |"
        )
    websearch, current = ({q: t for t, q in times[name]} for name in (WEBSEARCH, CURRENT))
    worst = max((q for q in queries if has_or(q)), key=websearch.__getitem__)
    lines += [
        "",
        f"The slowest query with an `or` as websearch reads it: {worst!r}, {websearch[worst]:.1f} ms;"
        f" {current[worst]:.1f} ms as query builder v{QUERY_BUILDER_VERSION} reads it.",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    write = write_option(__doc__, "fulltext.py", argv)
    with daemon_on_recall_data() as work:
        queries = json.loads((work / "corpus.json").read_text())["queries"]
        progress(f"timing the full-text statement for {len(queries)} queries, two readings each")
        times = asyncio.run(measure(embedded_dsn(work / "data"), queries))
    publish(report(times), write, "fulltext.py")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
