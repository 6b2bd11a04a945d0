"""Writes per second: one `POST /v1/records` per record against `POST /v1/records:batch`
on a fresh daemon, one client.

    .venv/bin/python -m bench.batch_writes [--records 500] [--batch 100] [--write FILE] [--result NAME]

The records are the first man-page passages of bench/lib/corpus.py, written once each way into two
namespaces. The daemon runs with `[embedding] provider = "none"`, so that no indexing shares the
machine with the writes; with no provider the duplicate check is skipped, so this is the writes
alone.

With `--checks`, the daemon runs as configured by default instead (the local model, duplicate
checks on, the index manager embedding what is written), and only batches are timed; with
`--compare TREE` as well, daemons started from TREE (an older checkout, `git worktree add`) and
from this tree take turns, `--rounds` each, the order alternating, each on a fresh data directory:

    git worktree add /tmp/before <commit>
    .venv/bin/python -m bench.batch_writes --checks --compare /tmp/before --rounds 3 \
        --records 300 --batch 50 --result batch-writes-checks
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.lib.corpus import build_corpus
from bench.lib.daemon import start_fresh
from bench.lib.paths import ROOT
from bench.lib.report import add_result_option, commit, load_average, machine, progress, publish
from recalld.client import Client, ClientError

CHECKS_SECTION = "batch_writes.py checks"
HEADING = "Batch writes with duplicate checks"


def start_tree(tree: Path, work: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """`recalld serve` from `tree`, default config, on a fresh data directory; returned once it
    answers and has checked a first batch (the models loaded)."""
    shutil.rmtree(work, ignore_errors=True)
    (work / "data").mkdir(parents=True)
    socket = work / "recalld.sock"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECALLD_")}
    env["PYTHONPATH"] = str(tree)
    command = [sys.executable, "-m", "recalld", "serve", "--data-dir", str(work / "data"), "--socket", str(socket)]
    log = (work / "serve.log").open("ab")
    daemon = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tree)
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                with Client(socket, timeout=300) as client:
                    warm: list[Mapping[str, Any]] = [
                        {"namespace": "warm-up", "kind": "man", "title": f"warm up {i}", "body": "x"} for i in range(3)
                    ]
                    client.write_records(warm)
                return daemon, socket
            except (ConnectionError, ClientError):
                if daemon.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"recalld serve did not answer; see {work / 'serve.log'}") from None
                time.sleep(0.5)  # polling until the daemon answers
    except BaseException:
        daemon.terminate()
        daemon.wait(timeout=60)
        raise


def batched(socket: Path, records: list[dict[str, str]], batch: int) -> tuple[float, dict[str, int]]:
    """Seconds to write `records` in batches of `batch`, and the items' duplicate-check statuses."""
    statuses: dict[str, int] = {}
    with Client(socket, timeout=600) as client:
        started = time.monotonic()
        for i in range(0, len(records), batch):
            part: list[Mapping[str, Any]] = [
                {"namespace": "batched", "kind": "man", **r} for r in records[i : i + batch]
            ]
            result = client.write_records(part)
            assert result.failed == 0, [r.error for r in result.results if r.error]
            for item in result.results:
                status = item.duplicate_check.status if item.duplicate_check else "none"
                statuses[status] = statuses.get(status, 0) + 1
        return time.monotonic() - started, statuses


def compare(args: argparse.Namespace, records: list[dict[str, str]]) -> None:
    trees = {"before": args.compare.resolve(), "after": ROOT}
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for round_ in range(1, args.rounds + 1):
        for side in ("before", "after") if round_ % 2 else ("after", "before"):
            daemon, socket = start_tree(trees[side], args.work / side)
            try:
                seconds, statuses = batched(socket, records, args.batch)
            finally:
                daemon.terminate()
                daemon.wait(timeout=60)
            runs[side].append({"seconds": seconds, "statuses": statuses, "load": load_average()})
            progress(f"round {round_} {side}: {seconds:.1f} s, {len(records) / seconds:.1f} records/s, {statuses}")
    commits = {side: commit(tree) for side, tree in trees.items()}
    n = len(records)
    lines = [
        f"## {args.heading}" if args.section == CHECKS_SECTION else f"### {args.heading}",
        "",
        f"- Machine: {machine()}; load average at the end {load_average()} (a shared machine).",
        f"- Command: `.venv/bin/python -m bench.batch_writes --checks --compare TREE --rounds {args.rounds} "
        f"--records {n} --batch {args.batch}"
        + ("" if args.section == CHECKS_SECTION else f" --section {shlex.quote(args.section)}")
        + ("" if args.heading == HEADING else f" --heading {shlex.quote(args.heading)}")
        + "`",
        "- The default config (the local model, duplicate checks on with the title model, the index manager "
        "embedding what is written); a fresh daemon a run, one client, man-page passages; the sides take "
        "turns, the order alternating each round.",
        "",
        "| daemon | records/s, each run | median | checks per run |",
        "| --- | --- | ---: | --- |",
    ]
    for side, side_runs in runs.items():
        rates = [n / run["seconds"] for run in side_runs]
        checks = ", ".join(f"{k} {v}" for k, v in sorted(side_runs[-1]["statuses"].items()))
        each = ", ".join(f"{rate:.1f}" for rate in rates)
        lines.append(f"| {side} (`{commits[side]}`) | {each} | {statistics.median(rates):.1f} | {checks} |")
    publish(lines, args.write, args.section, result=args.result)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=500)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-batch-writes"))
    parser.add_argument("--write", type=Path, help="replace this markdown file's batch_writes.py section")
    add_result_option(parser, "ingest")
    parser.add_argument("--checks", action="store_true", help="the default config: local model, checks on")
    parser.add_argument("--compare", type=Path, metavar="TREE", help="with --checks: take turns with TREE's daemon")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--section", default=CHECKS_SECTION, help="with --compare: the section --write replaces")
    parser.add_argument("--heading", default=HEADING, help="with --compare: the section's heading")
    args = parser.parse_args(argv)
    records = build_corpus(max(args.records, 3000), 100)["records"][: args.records]
    if args.checks:
        compare(args, records) if args.compare else single(args, records)
        return
    daemon, socket = start_fresh(args.work, "bench-ingest", {"RECALLD_EMBEDDING_PROVIDER": "none"})
    try:
        with Client(socket, timeout=300) as client:
            started = time.monotonic()
            for record in records:
                title, body, source = record["title"], record["body"], record["source_path"]
                client.create_record("single", "man", title, body, source_path=source)
            single_s = time.monotonic() - started
            progress(f"one by one: {single_s:.1f} s")
            started = time.monotonic()
            for i in range(0, len(records), args.batch):
                part: list[Mapping[str, Any]] = [
                    {"namespace": "batched", "kind": "man", **r} for r in records[i : i + args.batch]
                ]
                result = client.write_records(part)
                assert result.failed == 0, [r.error for r in result.results if r.error]
            batch_s = time.monotonic() - started
            progress(f"batched: {batch_s:.1f} s")
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
    n = len(records)
    publish(
        [
            "## Batch writes",
            "",
            f"- Machine: {machine()}; load average at the end {load_average()} (a shared machine).",
            f"- Command: `.venv/bin/python -m bench.batch_writes --records {n} --batch {args.batch}`",
            '- A fresh daemon, `[embedding] provider = "none"`, one client over the Unix socket; man-page '
            "passages (at most 40 words); with no provider the duplicate check is skipped: the writes alone.",
            "",
            "| how | records | time | records/s |",
            "| --- | ---: | ---: | ---: |",
            f"| one `POST /v1/records` each | {n} | {single_s:.1f} s | {n / single_s:.0f} |",
            f"| `POST /v1/records:batch`, {args.batch} a request | {n} | {batch_s:.1f} s | {n / batch_s:.0f} |",
        ],
        args.write,
        "batch_writes.py",
        result=args.result,
    )


def single(args: argparse.Namespace, records: list[dict[str, str]]) -> None:
    """`--checks` without `--compare`: this tree's daemon, once."""
    daemon, socket = start_tree(ROOT, args.work / "after")
    try:
        seconds, statuses = batched(socket, records, args.batch)
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
    print(f"{len(records)} records in {seconds:.1f} s: {len(records) / seconds:.1f} records/s; checks {statuses}")


if __name__ == "__main__":
    main()
