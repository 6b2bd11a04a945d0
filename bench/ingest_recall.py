"""Recall during a large ingest: latency and the vector route's availability while the daemon
embeds what was just written (queries first in the embedder).

    .venv/bin/python -m bench.ingest_recall --label after [--passages 2000] [--write FILE] [--result NAME]

For the figures before a change, run this checkout's bench/ from the older tree (its daemon is
started from the tree the bench package lies in, `python -m recalld serve` with that tree first on
PYTHONPATH):

    git worktree add /tmp/before <commit>
    rm -rf /tmp/before/bench && cp -r bench /tmp/before/
    cd /tmp/before && CHECKOUT/.venv/bin/python -m bench.ingest_recall --label before

or let this script take turns between the two trees, `--rounds` runs each, and report every
figure's median and range (the order alternates: before first in odd rounds, after first in even
ones, so neither side always meets the machine's load later):

    .venv/bin/python -m bench.ingest_recall --compare /tmp/before --rounds 3 --passages 10300 \
        --seed 300 --limit-s 300 --result 10k-queries-first

(`--summarize` with the same `--work` reports its results.json again, without running anything).

1. Corpus: the first `--passages` man-page passages of bench/lib/corpus.py (one record each, one
   chunk each: at most 40 words), and its queries, each asked once with a number appended so
   that no query vector comes from the daemon's cache: every recall embeds.
2. A daemon on a fresh data directory (embedded PostgreSQL, the local model, default config)
   gets the first `--seed` passages and indexes them (a verified generation: the vector route
   serves), as a daemon in use has.
3. Four clients write the other passages as fast as the daemon takes them, `--batch` (50) per
   `POST /v1/records:batch` as `recalld ingest` sends them (`--batch 0`: one `POST /v1/records`
   each); from the first write one client asks `POST /v1/recall` (k 10, both routes, the default
   5 s deadline) back to back, until the vector route has every record (`pending` 0 in
   /v1/generations) or `--limit-s` has passed, when the writers stop too: on a slow machine a
   window of a large ingest is measured, not all of it.
4. Reported: the recalls' client latency p50/p95/max, the share in which the vector route
   answered (named `vector_indexing` counts as answered: its answer is partial, not missing),
   the reasons it was named for, how many records were written and how many still pending at the
   end, and how long writing and indexing took.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.lib.corpus import build_corpus
from bench.lib.daemon import start_fresh, wait_caught_up
from bench.lib.paths import ROOT
from bench.lib.report import add_result_option, commit, load_average, machine, percentile, progress, publish
from recalld.client import Client, ClientError

NAMESPACE = "bench-ingest"
WRITERS = 4
ANSWERED = {None, "vector_indexing"}
"""The vector route's state in an answer that counts as available: not named, or named partial."""


def write_all(
    socket: Path,
    records: list[dict[str, str]],
    done: threading.Event,
    timing: dict[str, float],
    batch: int,
    stop: threading.Event | None = None,
) -> None:
    """Four clients write `records`, `batch` per `POST /v1/records:batch` (as `recalld ingest`
    sends them) or, with `batch` 0, one `POST /v1/records` each, until `stop` is set; `timing`
    gets `written` (records sent) and `write_s`."""
    started = time.monotonic()

    def write(part: list[dict[str, str]]) -> int:
        client = Client(socket, timeout=300)
        sent = 0
        try:
            step = batch or 1
            for i in range(0, len(part), step):
                if stop is not None and stop.is_set():
                    break
                items = [{"namespace": NAMESPACE, "kind": "man", **record} for record in part[i : i + step]]
                sent += len(items)
                if not batch:
                    try:
                        client.request("POST", "/v1/records", items[0])
                    except ClientError as exc:
                        if exc.status != 409:  # the same passage under another title
                            raise
                    continue
                answer = client.request("POST", "/v1/records:batch", {"records": items})
                # a 409 is the same passage under another title: not written, not a failure
                refused = [r for r in answer["results"] if r["outcome"] == "failed" and r["status"] != 409]
                if refused:
                    raise SystemExit(f"batch write refused: {refused[0]}")
            return sent
        finally:
            client.close()

    with ThreadPoolExecutor(WRITERS) as pool:
        timing["written"] = sum(pool.map(write, [records[i::WRITERS] for i in range(WRITERS)]))
    timing["write_s"] = time.monotonic() - started
    done.set()


def vector_state(answer: dict[str, Any]) -> str | None:
    for degraded in answer.get("degraded_routes", []):
        if degraded["route"] == "vector":
            return str(degraded["reason"])
    return None


def measure(args: argparse.Namespace) -> dict[str, Any]:
    # queries come from the pages' descriptions: enough pages for them whatever the size
    corpus = build_corpus(max(args.passages, 3000), args.queries)
    seed, records = corpus["records"][: args.seed], corpus["records"][args.seed : args.passages]
    daemon, socket = start_fresh(args.work, NAMESPACE)
    try:
        client = Client(socket, timeout=120)
        progress(f"seeding {len(seed)} passages")
        write_all(socket, seed, threading.Event(), {}, args.batch)
        wait_caught_up(client, settled=True)
        written = threading.Event()
        timing: dict[str, float] = {}
        stop = threading.Event()  # at the window's end: the rest of the ingest is not measured
        writer = threading.Thread(target=write_all, args=(socket, records, written, timing, args.batch, stop))
        started = time.monotonic()
        writer.start()
        latencies: list[float] = []
        states: Counter[str] = Counter()
        errors: Counter[int] = Counter()
        pending_seen = pending = 0
        next_check = 0.0
        asked = 0
        while True:
            now = time.monotonic()
            if now >= next_check:
                pending = client.request("GET", "/v1/generations")["pending"]
                pending_seen = max(pending_seen, pending)
                if written.is_set() and pending == 0:
                    break
                if now - started > args.limit_s:
                    progress(f"stopped after {args.limit_s:.0f} s with {pending} records pending")
                    break
                next_check = now + 2.0
            query = f"{corpus['queries'][asked % len(corpus['queries'])]} {asked}"
            asked += 1
            sent = time.monotonic()
            try:
                answer = client.request("POST", "/v1/recall", {"namespace": NAMESPACE, "query": query, "k": 10})
            except ClientError as exc:
                errors[exc.status] += 1
                continue
            latencies.append((time.monotonic() - sent) * 1000)
            states[vector_state(answer) or "answered"] += 1
            if asked % 50 == 0:
                progress(f"  {asked} recalls, p95 so far {percentile(latencies, 95):.0f} ms, {dict(states)}")
        indexed_s = time.monotonic() - started
        stop.set()
        writer.join()
        client.close()
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
    return {
        "label": args.label,
        "passages": args.passages - args.seed,
        "seed": args.seed,
        "write_s": timing.get("write_s", float("nan")),
        "written": timing.get("written", 0),
        "indexed_s": indexed_s,
        "pending_max": pending_seen,
        "pending_end": pending,
        "complete": pending == 0,
        "recalls": len(latencies),
        "errors": dict(errors),
        "p50_ms": percentile(latencies, 50),
        "p95_ms": percentile(latencies, 95),
        "max_ms": max(latencies, default=float("nan")),
        "vector_available": vector_available(dict(states), dict(errors)),
        "vector_states": dict(states),
        "load": load_average(),
    }


def vector_available(states: dict[str, int], errors: dict[Any, int]) -> float:
    """The share of all recalls asked in which the vector route answered: a recall that failed
    (an HTTP error, counted in `errors`) is one in which it did not."""
    asked = sum(states.values()) + sum(errors.values())
    available = sum(n for state, n in states.items() if state in ("answered", "vector_indexing"))
    return available / asked if asked else float("nan")


def failed(run: dict[str, Any]) -> int:
    return sum(run["errors"].values())


def report(result: dict[str, Any], commit: str) -> list[str]:
    states = ", ".join(f"{state} {n}" for state, n in sorted(result["vector_states"].items()))
    if result["complete"]:
        ingest = (
            f"{result['written']} more written by {WRITERS} clients in {result['write_s']:.0f} s, "
            f"all searchable by the vector route after {result['indexed_s']:.0f} s"
        )
    else:  # the window ended first: what the ingest had reached by then
        ingest = (
            f"{result['written']} of {result['passages']} more written by {WRITERS} clients when the "
            f"{result['indexed_s']:.0f} s window ended, {result['pending_end']} of them not yet searchable"
        )
    return [
        f"**{result['label']}** (`{commit}`), on {result['seed']} passages indexed, {ingest} "
        f"(at most {result['pending_max']} pending); load average at the end {result['load']}.",
        "",
        "| recalls during the ingest | p50 | p95 | max | vector route answered | vector route states | errors |",
        "|---|---|---|---|---|---|---|",
        f"| {result['recalls']} | {result['p50_ms']:.0f} ms | {result['p95_ms']:.0f} ms | {result['max_ms']:.0f} ms "
        f"| {result['vector_available']:.0%} | {states} | {result['errors'] or 'none'} |",
    ]


SUMMED = [
    ("recalls", "recalls answered", "{:,.0f}"),
    ("failed", "recalls failed", "{:,.0f}"),
    ("p50_ms", "p50 ms", "{:,.0f}"),
    ("p95_ms", "p95 ms", "{:,.0f}"),
    ("max_ms", "max ms", "{:,.0f}"),
    ("vector_available", "vector route answered", "{:.1%}"),
    ("pending_max", "backlog at most", "{:,.0f}"),
    ("written", "written in the window", "{:,.0f}"),
]
"""The figures a comparison gives as median (least–most) over its rounds: (key, column, format).
Latencies are of the answered recalls; a failed one counts against "vector route answered"."""


def figure(run: dict[str, Any], key: str) -> float:
    """One run's figure; the derived ones from its counts, so that a results.json written before
    failed recalls were counted against the vector route is summarised by the same rule."""
    if key == "failed":
        return failed(run)
    if key == "vector_available":
        return vector_available(run["vector_states"], run["errors"])
    return float(run[key])


def summary(results: dict[str, list[dict[str, Any]]]) -> list[str]:
    """One row per side: each figure's median over the rounds and its range; the states the
    vector route was named with, summed over the rounds."""
    lines = [
        "| | rounds | " + " | ".join(column for _, column, _ in SUMMED) + " | vector route named (all rounds) |",
        "| --- | ---: | " + " | ".join("---:" for _ in SUMMED) + " | --- |",
    ]
    for side, runs in results.items():
        cells = []
        for key, _, form in SUMMED:
            values = sorted(float(figure(run, key)) for run in runs)
            median = float(statistics.median(values))
            cells.append(f"{form.format(median)} ({form.format(values[0])}–{form.format(values[-1])})")
        named: Counter[str] = Counter()
        for run in runs:
            named.update({state: n for state, n in run["vector_states"].items() if state != "answered"})
        states = ", ".join(f"`{state}` {n}" for state, n in sorted(named.items())) or "never"
        commits = ", ".join(sorted({f"`{run['commit']}`" for run in runs}))
        lines.append(f"| {side} ({commits}) | {len(runs)} | " + " | ".join(cells) + f" | {states} |")
    return lines


def compare(args: argparse.Namespace) -> None:
    """`--rounds` rounds of this script run from `--compare TREE` (label before; this checkout's
    bench/ copied into it) and from this tree (label after), taking turns which goes first, each
    on a fresh daemon; every run's result.json is kept under `--work`."""
    trees = {"before": args.compare.resolve(), "after": ROOT}
    if not (trees["before"] / "bench" / "lib").is_dir():
        raise SystemExit(f"copy this checkout's bench/ into {trees['before']} first")
    results: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for round_ in range(1, args.rounds + 1):
        for side in ("before", "after") if round_ % 2 else ("after", "before"):
            work = args.work / f"round{round_}"
            progress(f"round {round_} of {args.rounds}: {side}")
            command = [sys.executable, "-m", "bench.ingest_recall", "--label", side, "--work", str(work)]
            for option in ("passages", "seed", "queries", "limit_s", "batch"):
                command += [f"--{option.replace('_', '-')}", str(getattr(args, option))]
            subprocess.run(command, check=True, cwd=trees[side])
            results[side].append(json.loads((work / side / "result.json").read_text()))
            (args.work / "results.json").write_text(json.dumps(results, indent=2))
    publish(summary(results), args.write, "ingest-recall-rounds", result=args.result)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", default="after", help="before or after: names the section written")
    parser.add_argument("--passages", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=200, help="passages indexed before the ingest")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--limit-s", type=float, default=900.0, help="stop measuring after this long")
    parser.add_argument("--batch", type=int, default=50, help="records per POST /v1/records:batch; 0: one by one")
    parser.add_argument("--compare", type=Path, metavar="TREE", help="take turns with this script in TREE")
    parser.add_argument("--rounds", type=int, default=3, help="with --compare: rounds, each side once a round")
    parser.add_argument("--summarize", action="store_true", help="only report the --work's results.json again")
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-ingest-recall"))
    parser.add_argument("--write", type=Path, help="replace this markdown file's section for the label")
    add_result_option(parser, "ingest")
    args = parser.parse_args(argv)
    if args.summarize:
        publish(
            summary(json.loads((args.work / "results.json").read_text())),
            args.write,
            "ingest-recall-rounds",
            result=args.result,
        )
        return
    if args.compare is not None:
        compare(args)
        return
    args.work = args.work / args.label
    at = commit()
    progress(f"{machine()}; {args.passages} passages; daemon from {ROOT} at {at}")
    result = {**measure(args), "commit": at}
    (args.work / "result.json").write_text(json.dumps(result, indent=2))
    publish(report(result, at), args.write, f"ingest-recall-{args.label}", result=args.result)


if __name__ == "__main__":
    main()
