"""The report `python -m bench.recall` prints: recalld over its socket against the raw parts and
pgvector's documented hybrid, latency and stages per load, CPU per request, vector recall, and the
head-to-head rounds' ratios (the sweep's table follows it, from bench.lib.sweep)."""

from __future__ import annotations

import argparse
import shlex
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bench.lib.head_to_head import CPU_REQUESTS, ROUNDS, TOP, OneClient
from bench.lib.load import STAGES, Load
from bench.lib.report import load_average, machine, p50_p95_p99, percentile


@dataclass
class Rounds:
    """The head-to-head rounds, in the order they ran."""

    one_client: OneClient
    warm16: list[Load]
    pgvector16: list[Load]

    def throughput_ratios(self) -> list[float]:
        return [w.throughput / p.throughput for w, p in zip(self.warm16, self.pgvector16, strict=True)]


def _ratios(values: Sequence[float], digits: int) -> str:
    return ", ".join(f"{v:.{digits}f}×" for v in values) + f": **{statistics.median(values):.{digits}f}×**"


def report(
    args: argparse.Namespace,
    corpus: dict[str, Any],
    current: dict[str, Any],
    embedding: dict[str, Any],
    runs: list[tuple[str, Load]],
    raw: Load,
    parts: dict[str, list[float]],
    pg_runs: list[Load],
    *,
    rounds: Rounds,
    cpu_runs: list[tuple[str, Load]],
    recalls: dict[str, tuple[float, list[float]]],
) -> list[str]:
    words = [len(r["body"].split()) for r in corpus["records"]]
    lines = [
        "### The latest run",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {machine()}; load average at the end {load_average()}.",
        "Client, daemon and PostgreSQL share the machine's cores, so the clients' own work is in every figure.",
        "",
        f"- Data: {len(corpus['records']):,} passages of the Debian man pages (median {statistics.median(words):.0f}"
        f" words, one chunk each), one namespace; generation `{current['id']}` with {current['count']:,} vectors,"
        f' {embedding["space"]["model"]} ({embedding["space"]["dimension"]} dimensions), `[index] factory = "HNSW32"`;'
        f" pgvector's HNSW graph: {args.graph}.",
        f"- Queries: {len(corpus['queries']):,} distinct, four in five a man page's NAME description, one in five an"
        " option name from the passages; k 10, both routes, the default fusion.",
        f"- Command: `{shlex.join(['.venv/bin/python', '-m', 'bench.recall', *args.argv])}`"
        " (first `bench/pgvector.sh`; the first run also embeds the corpus, once).",
        "",
        "Latency is what the client saw, in ms, p50 / p95 / p99; throughput in queries per second.",
        "",
        "| system | queries | clients | requests | throughput | latency p50 / p95 / p99 |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for label, load in runs:
        lines.append(
            f"| recalld over the socket | {label} | {load.clients} | {len(load.latency_ms)} |"
            f" {load.throughput:.0f} | {p50_p95_p99(load.latency_ms)} |"
        )
    for load in pg_runs:
        lines.append(
            f"| pgvector documented hybrid | vectors precomputed | {load.clients} | {len(load.latency_ms)} |"
            f" {load.throughput:.0f} | {p50_p95_p99(load.latency_ms)} |"
        )
    lines.append(
        f"| raw parts in sequence | new queries | 1 | {len(raw.latency_ms)} | {raw.throughput:.0f} |"
        f" {p50_p95_p99(raw.latency_ms)} |"
    )
    lines += [
        "",
        "Stages inside recalld (`timings_ms` of each answer), p50 / p95 / p99 in ms:",
        "",
        "| queries | clients | " + " | ".join(STAGES) + " |",
        "| --- | ---: | " + " | ".join("---:" for _ in STAGES) + " |",
    ]
    for label, load in runs:
        cells = " | ".join(p50_p95_p99(load.stages.get(s, [])) for s in STAGES)
        lines.append(f"| {label} | {load.clients} | {cells} |")
    latency_ratios, throughput_ratios = rounds.one_client.latency_ratios(), rounds.throughput_ratios()
    overheads = rounds.one_client.overheads_ms()
    lines += [
        "",
        "CPU per request, in ms (user + system time of each process over the load, divided by the"
        " requests answered; 2 cores give 2,000 ms of CPU per second). recalld with the query vector"
        " cached: both routes at 16 clients are the head-to-head rounds, the other loads ask the"
        f" cached queries over ({CPU_REQUESTS:,} requests at least):",
        "",
        "| system | clients | requests | throughput | daemon | PostgreSQL | client | total |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, load in cpu_runs:
        per = {who: 1000 * seconds / len(load.latency_ms) for who, seconds in load.cpu_s.items()}
        lines.append(
            f"| {name} | {load.clients} | {len(load.latency_ms)} | {load.throughput:.0f} | {per['daemon']:.2f} |"
            f" {per['postgresql']:.2f} | {per['client']:.2f} | {sum(per.values()):.2f} |"
        )
    lines += [
        "",
        "The raw parts, called directly in sequence per query (p50 / p95 / p99 ms): the local model"
        f" {p50_p95_p99(parts['embed'])}, the daemon's FAISS file (top {TOP}) {p50_p95_p99(parts['faiss'])},"
        " one PostgreSQL"
        f" query (full text plus the rows of the vector hits) {p50_p95_p99(parts['postgresql'])}.",
        "",
        "| vector search | recall@10 against exact search | latency p50 / p95 / p99 ms |",
        "| --- | ---: | ---: |",
    ]
    for name, (value, latency) in recalls.items():
        lines.append(f"| {name} | {value:.3f} | {p50_p95_p99(latency)} |")
    degraded = sum(load.degraded for _, load in runs)
    fusion = runs[0][1].fusion or {}
    lines += [
        "",
        f"Head to head, {ROUNDS} rounds taking turns (each round's own ratio; the median in bold):",
        "",
        "- End to end, one client, new queries, recalld's p50 over the raw parts' p50 (each query's"
        f" parts summed), on the same queries: {_ratios(latency_ratios, 2)};"
        f" over all rounds {percentile(runs[0][1].latency_ms, 50):.1f} ms against"
        f" {percentile(raw.latency_ms, 50):.1f} ms.",
        f"- What recalld adds to one client's new query, its p50 minus the raw parts' p50, per round:"
        f" {', '.join(f'{ms:.2f}' for ms in overheads)} ms: **{statistics.median(overheads):.2f} ms**"
        " (aim: at most 1.5 ms).",
        "- Retrieval after embedding, 16 clients: recalld's throughput with the query vector cached"
        " over pgvector's documented hybrid, each at its default beam (so at unequal vector recall, below;"
        f" the sweep after this compares them at equal recall): {_ratios(throughput_ratios, 2)};"
        f" per round {', '.join(f'{w.throughput:.0f}' for w in rounds.warm16)} against"
        f" {', '.join(f'{p.throughput:.0f}' for p in rounds.pgvector16)} queries/s.",
        f"- Answers with a degraded route during the runs: {degraded}.",
        f"- Fusion: `{fusion['name']}` v{fusion['version']}, k {fusion.get('k')}, weights {fusion.get('weights')}.",
    ]
    return lines
