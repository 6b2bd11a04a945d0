"""Where one client's recall spends its time, step by step, beside the raw parts.

On the corpus bench/recall.py prepared in WORK (`python -m bench.recall --passages 8000 --queries 300
--work var/bench-recall-quick --prepare-only`): a daemon started with the timing hooks of
bench/timeline/sitecustomize.py (they time functions of the recall path; no argument or result
changes) answers never-asked queries at one client, and in turns the raw parts (bench/lib/head_to_head.py)
answer the same queries (the model called directly, the daemon's FAISS file, one PostgreSQL
query). Then the same queries again, their vectors cached. Printed: each step's median start
and end from the handler's start, and the client's latency against the raw parts'.

    .venv/bin/python -m bench.recall_timeline [--work var/bench-recall-quick] [--rounds 4] \\
        [--write FILE] [--result NAME]

The hooks cost a little (see their docstring), so the ratio printed here is a hooked daemon's,
not comparable to bench/recall.py's; read the steps' sizes and the gaps between them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.lib.daemon import embedded_dsn, start_daemon, stop_daemon, wait_ready
from bench.lib.head_to_head import WARMUP, one_client_rounds, raw_parts, served_raw_parts
from bench.lib.load import Load, socket_load
from bench.lib.paths import RECALL_QUICK_WORK, ROOT
from bench.lib.report import add_result_option, load_average, machine, publish

HOOKS = ROOT / "bench" / "timeline"


def settled(path: Path) -> int:
    """The lines the hooks' writer thread has appended to `path`, once no more arrive for 0.2 s:
    each request's line is written after its answer, from a thread of its own."""
    count, quiet_since = -1, time.monotonic()
    while time.monotonic() - quiet_since < 0.2:
        now = len(path.read_text().splitlines()) if path.exists() else 0
        if now != count:
            count, quiet_since = now, time.monotonic()
        time.sleep(0.02)
    return count


def median_spans(lines: list[dict[str, list[float]]]) -> list[tuple[str, float, float, float]]:
    """(step, median start, median end, median duration), in order of start."""
    names = {name for line in lines for name in line}
    spans = []
    for name in names:
        seen = [line[name] for line in lines if name in line]
        if len(seen) < len(lines) // 2:
            continue  # a step most requests skip (e.g. the model, for cached vectors)
        spans.append(
            (
                name,
                statistics.median(a for a, _ in seen),
                statistics.median(b for _, b in seen),
                statistics.median(b - a for a, b in seen),
            )
        )
    return sorted(spans, key=lambda s: (s[1], -s[2]))


def table(title: str, spans: list[tuple[str, float, float, float]], count: int) -> list[str]:
    out = [f"{title} ({count} recalls; ms from the handler's start, medians):", ""]
    out += ["| step | starts | ends | lasts |", "| --- | ---: | ---: | ---: |"]
    out += [f"| {name} | {a:.3f} | {b:.3f} | {d:.3f} |" for name, a, b, d in spans]
    return [*out, ""]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=RECALL_QUICK_WORK)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--write", type=Path, help="replace this markdown file's recall_timeline.py section")
    add_result_option(parser, "recall")
    args = parser.parse_args()
    work = args.work.resolve()
    queries: list[str] = json.loads((work / "corpus.json").read_text())["queries"]
    warmup, asked = queries[:WARMUP], queries[WARMUP:]
    socket, log = work / "timeline.sock", work / "timeline.jsonl"
    log.unlink(missing_ok=True)
    env = {"PYTHONPATH": str(HOOKS), "BENCH_RECALL_TIMELINE": str(log)}
    daemon = start_daemon(work / "data", socket, work / "timeline.log", config=work / "recalld.toml", env=env)
    try:
        wait_ready(socket)
        dsn = embedded_dsn(work / "data")
        _, _, raw = served_raw_parts(work, socket)
        asyncio.run(socket_load(socket, warmup, 1, "warm-up"))
        asyncio.run(raw_parts(dsn, raw, warmup))
        warmed = settled(log)
        one = one_client_rounds(socket, dsn, raw, asked, args.rounds)
        asked_new = settled(log)
        cached = asyncio.run(socket_load(socket, asked, 1, "recalld"))  # their vectors are cached now
        asked_again = settled(log)
    finally:
        stop_daemon(daemon)
    if asked_new - warmed != len(asked) or asked_again - asked_new != len(asked):
        raise SystemExit(
            f"{log}: {asked_new - warmed} and {asked_again - asked_new} lines for {len(asked)} recalls each:"
            " are the hooks loaded (bench/timeline)?"
        )
    timeline: list[dict[str, list[float]]] = [json.loads(line) for line in log.read_text().splitlines()]

    lines = [
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {machine()}; load average at the end"
        f" {load_average()}. Command: `.venv/bin/python -m bench.recall_timeline {' '.join(sys.argv[1:])}`.",
        "",
        f"- New queries, one client: recalld {statistics.median(Load.merged(one.recalld).latency_ms):.2f} ms p50"
        f" (client-side), the raw parts {statistics.median(Load.merged(one.raw).latency_ms):.2f} ms;"
        f" per round {', '.join(f'{x:.2f}×' for x in one.latency_ratios())}:"
        f" **{statistics.median(one.latency_ratios()):.2f}×**.",
        "- The raw parts' own p50s: "
        + ", ".join(f"{part} {statistics.median(values):.3f} ms" for part, values in one.parts.items())
        + " (the model called directly, the daemon's FAISS file, one PostgreSQL query).",
        f"- The same queries again, vectors cached: recalld {statistics.median(cached.latency_ms):.2f} ms p50.",
        "",
    ]
    for title, phase in (
        ("New queries", timeline[warmed:asked_new]),
        ("Cached query vectors", timeline[asked_new:asked_again]),
    ):
        lines += table(title, median_spans(phase), len(phase))
    publish(lines, args.write, "recall_timeline.py", result=args.result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
