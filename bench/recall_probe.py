"""A short probe of two builds of the daemon taking turns on the same data: does a
change pay? Each round starts one build's `recalld serve` on bench/recall.py's data directory,
first asks `--new` never-asked queries at one client (the query embedded: p50 of the client's
latency, and each stage's; a fresh slice each round, the same for both builds), with `--new-16`
then the probe's queries at 16 clients, each embedded (throughput, CPU per recall), then puts the
probe's queries in its query-vector cache and measures `POST /v1/recall` (k 10, both routes)
with the query vector cached at 16 clients (throughput, CPU per recall of the daemon,
PostgreSQL and this client) and at one client (p50 of the client's latency, and each stage's),
and stops it. Builds take turns and the order alternates (before then after in odd rounds, after
then before in even ones), so neither build always meets the machine's load later; the medians of
each build's rounds are printed.

    git worktree add /tmp/recalld-before <commit>   # the build before the change
    .venv/bin/python -m bench.recall_probe --before /tmp/recalld-before [--work var/bench-recall-quick]

"--before" is a checkout of the earlier commit (its code is put first on the daemon's
PYTHONPATH); the other build is this checkout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from pathlib import Path
from typing import Any

from bench.lib.daemon import start_daemon, stop_daemon, wait_ready
from bench.lib.load import Meter, socket_load
from bench.lib.paths import RECALL_QUICK_WORK, ROOT
from bench.lib.report import percentile, progress


def one_round(
    work: Path, code: Path, queries: list[str], new: list[str], env: dict[str, str], *, new_16: bool = False
) -> dict[str, Any]:
    socket = work / "recalld.sock"
    daemon = start_daemon(
        work / "data", socket, work / "serve.log", config=work / "recalld.toml", env={"PYTHONPATH": str(code), **env}
    )
    try:
        wait_ready(socket)
        cold = asyncio.run(socket_load(socket, new, 1, "recalld")) if new else None
        meter = Meter(daemon.pid, work / "data/pg")
        # the probe's queries are not cached yet in this fresh daemon: each is embedded once here
        cold_many = meter.run(socket_load(socket, queries, 16, "recalld")) if new_16 else None
        asyncio.run(socket_load(socket, queries, 4, "warm-up"))  # every query vector cached
        many = meter.run(socket_load(socket, queries * 2, 16, "recalld"))
        one = asyncio.run(socket_load(socket, queries, 1, "recalld"))
    finally:
        stop_daemon(daemon)
    n = len(many.latency_ms)
    return {
        "throughput_16": many.throughput,
        "cpu_ms": {who: round(1000 * s / n, 3) for who, s in many.cpu_s.items()},
        "p50_1": percentile(one.latency_ms, 50),
        "stages_1": {stage: percentile(values, 50) for stage, values in one.stages.items()},
        "p50_new_1": percentile(cold.latency_ms, 50) if cold else None,
        "stages_new_1": {stage: percentile(values, 50) for stage, values in cold.stages.items()} if cold else {},
        "throughput_new_16": cold_many.throughput if cold_many else None,
        "cpu_ms_new_16": (
            {who: round(1000 * s / len(cold_many.latency_ms), 3) for who, s in cold_many.cpu_s.items()}
            if cold_many
            else {}
        ),
    }


def order(names: list[str], round_: int) -> list[str]:
    """The builds in the order they run in round `round_` (from 0): as given, then reversed."""
    return names if round_ % 2 == 0 else names[::-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="a checkout of the build before the change")
    parser.add_argument("--work", type=Path, default=RECALL_QUICK_WORK)
    parser.add_argument("--queries", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=3, help="rounds per build")
    parser.add_argument("--new", type=int, default=0, help="never-asked queries at one client, per round")
    parser.add_argument("--new-16", action="store_true", help="also the probe's queries at 16 clients, each embedded")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for both daemons")
    args = parser.parse_args()
    work = args.work.resolve()
    corpus = json.loads((work / "corpus.json").read_text())
    queries: list[str] = corpus["queries"][-args.queries :]
    unasked: list[str] = corpus["queries"][: -args.queries]
    if args.new * args.rounds > len(unasked):
        raise SystemExit(f"--new {args.new} x --rounds {args.rounds} needs more than the {len(unasked)} other queries")
    env = dict(item.split("=", 1) for item in args.env)
    builds = {"before": args.before.resolve(), "after": ROOT}
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in builds}
    for r in range(args.rounds):
        for name in order(list(builds), r):
            code = builds[name]
            progress(f"round {r + 1}/{args.rounds}: {name} ({code})")
            new = unasked[r * args.new : (r + 1) * args.new]
            results[name].append(one_round(work, code, queries, new, env, new_16=args.new_16))
            progress(f"  {json.dumps(results[name][-1])}")
    for name, rounds in results.items():
        cpu = {who: statistics.median(r["cpu_ms"][who] for r in rounds) for who in rounds[0]["cpu_ms"]}
        stages = {s: round(statistics.median(r["stages_1"][s] for r in rounds), 2) for s in rounds[0]["stages_1"]}
        print(
            f"{name}: 16 clients {statistics.median(r['throughput_16'] for r in rounds):.0f}/s"
            f" (rounds {', '.join(str(round(r['throughput_16'])) for r in rounds)}),"
            f" CPU ms per recall {json.dumps(cpu)}; 1 client p50"
            f" {statistics.median(r['p50_1'] for r in rounds):.2f} ms, stages {json.dumps(stages)}"
        )
        if args.new:
            cold = {
                s: round(statistics.median(r["stages_new_1"][s] for r in rounds), 2) for s in rounds[0]["stages_new_1"]
            }
            each = ", ".join(f"{r['p50_new_1']:.2f}" for r in rounds)
            print(
                f"{name}: new queries, 1 client p50 {statistics.median(r['p50_new_1'] for r in rounds):.2f} ms"
                f" (rounds {each}), stages {json.dumps(cold)}"
            )
        if args.new_16:
            who_ran = rounds[0]["cpu_ms_new_16"]
            cpu = {who: statistics.median(r["cpu_ms_new_16"][who] for r in rounds) for who in who_ran}
            each = ", ".join(str(round(r["throughput_new_16"])) for r in rounds)
            print(
                f"{name}: new queries, 16 clients {statistics.median(r['throughput_new_16'] for r in rounds):.0f}/s"
                f" (rounds {each}), CPU ms per recall {json.dumps(cpu)}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
