"""Recall during a large ingest: latency and the vector route's availability while the daemon
embeds what was just written (issue 22 item 1, "queries first").

    .venv/bin/python bench/ingest_recall.py --label after [--passages 2000] [--write docs/BENCHMARKS.md]

For the figures before a change, run this same script against the older tree (its daemon is
started from the tree the script lies in, `python -m daemon serve` with that tree first on
PYTHONPATH):

    git worktree add /tmp/before <commit>
    cp bench/ingest_recall.py /tmp/before/bench/
    .venv/bin/python /tmp/before/bench/ingest_recall.py --label before --write docs/BENCHMARKS.md

1. Corpus: the first `--passages` man-page passages of bench/recall.py (one record each, one
   chunk each: at most 40 words), and its queries, each asked once with a number appended so
   that no query vector comes from the daemon's cache: every recall embeds.
2. A daemon on a fresh data directory (embedded PostgreSQL, the local model, default config)
   gets the first `--seed` passages and indexes them (a verified generation: the vector route
   serves), as a daemon in use has.
3. Four clients write the other passages (`POST /v1/records`) as fast as the daemon takes them;
   from the first write one client asks `POST /v1/recall` (k 10, both routes, the default 5 s
   deadline) back to back, until the vector route has every record (`pending` 0 in
   /v1/generations).
4. Reported: the recalls' client latency p50/p95/max, the share in which the vector route
   answered (named `vector_indexing` counts as answered: its answer is partial, not missing),
   the reasons it was named for, and how long writing and indexing took.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import load_average, machine, percentile, progress, publish, wait_caught_up  # noqa: E402
from bench.recall import build_corpus  # noqa: E402
from daemon.client import Client, ClientError  # noqa: E402

NAMESPACE = "bench-ingest"
WRITERS = 4
ANSWERED = {None, "vector_indexing"}
"""The vector route's state in an answer that counts as available: not named, or named partial."""


def start(work: Path, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], Path]:
    """`recalld serve` from this tree on a fresh data directory; returned once it answers."""
    shutil.rmtree(work / "data", ignore_errors=True)
    (work / "data").mkdir(parents=True)
    socket = work / "recalld.sock"
    log = (work / "serve.log").open("ab")
    env = {**os.environ, **(env or {}), "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "daemon", "serve", "--data-dir", str(work / "data"), "--socket", str(socket)]
    daemon = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    client = Client(socket)
    try:
        for _ in range(480):
            try:
                client.request("POST", "/v1/recall", {"namespace": NAMESPACE, "query": "warm up", "routes": ["fts"]})
                return daemon, socket
            except (ConnectionError, ClientError):
                if daemon.poll() is not None:
                    raise SystemExit(f"recalld serve exited ({daemon.returncode}); see {work / 'serve.log'}") from None
                time.sleep(0.5)
        raise SystemExit(f"recalld did not answer within 240 s; see {work / 'serve.log'}")
    except BaseException:
        daemon.terminate()  # never leave a daemon behind on a data directory the next run deletes
        daemon.wait(timeout=60)
        raise
    finally:
        client.close()


def write_all(socket: Path, records: list[dict[str, str]], done: threading.Event, timing: dict[str, float]) -> None:
    started = time.monotonic()

    def write(part: list[dict[str, str]]) -> None:
        client = Client(socket, timeout=300)
        try:
            for record in part:
                try:
                    client.request("POST", "/v1/records", {"namespace": NAMESPACE, "kind": "man", **record})
                except ClientError as exc:
                    if exc.status != 409:  # the same passage under another title
                        raise
        finally:
            client.close()

    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(write, [records[i::WRITERS] for i in range(WRITERS)]))
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
    daemon, socket = start(args.work)
    try:
        client = Client(socket, timeout=120)
        progress(f"seeding {len(seed)} passages")
        write_all(socket, seed, threading.Event(), {})
        wait_caught_up(client, settled=True)
        written = threading.Event()
        timing: dict[str, float] = {}
        writer = threading.Thread(target=write_all, args=(socket, records, written, timing))
        started = time.monotonic()
        writer.start()
        latencies: list[float] = []
        states: Counter[str] = Counter()
        errors: Counter[int] = Counter()
        pending_seen = 0
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
        writer.join()
        client.close()
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
    available = sum(n for state, n in states.items() if state in ("answered", "vector_indexing"))
    return {
        "label": args.label,
        "passages": args.passages - args.seed,
        "seed": args.seed,
        "write_s": timing.get("write_s", float("nan")),
        "indexed_s": indexed_s,
        "pending_max": pending_seen,
        "recalls": len(latencies),
        "errors": dict(errors),
        "p50_ms": percentile(latencies, 50),
        "p95_ms": percentile(latencies, 95),
        "max_ms": max(latencies, default=float("nan")),
        "vector_available": available / len(latencies) if latencies else float("nan"),
        "vector_states": dict(states),
        "load": load_average(),
    }


def report(result: dict[str, Any], commit: str) -> list[str]:
    states = ", ".join(f"{state} {n}" for state, n in sorted(result["vector_states"].items()))
    return [
        f"**{result['label']}** (`{commit}`), on {result['seed']} passages indexed, "
        f"{result['passages']} more written by {WRITERS} clients "
        f"in {result['write_s']:.0f} s, all searchable by the vector route after {result['indexed_s']:.0f} s "
        f"(at most {result['pending_max']} pending); load average at the end {result['load']}.",
        "",
        "| recalls during the ingest | p50 | p95 | max | vector route answered | vector route states | errors |",
        "|---|---|---|---|---|---|---|",
        f"| {result['recalls']} | {result['p50_ms']:.0f} ms | {result['p95_ms']:.0f} ms | {result['max_ms']:.0f} ms "
        f"| {result['vector_available']:.0%} | {states} | {result['errors'] or 'none'} |",
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", required=True, help="before or after: names the section written")
    parser.add_argument("--passages", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=200, help="passages indexed before the ingest")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--limit-s", type=float, default=900.0, help="stop measuring after this long")
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-ingest-recall"))
    parser.add_argument("--write", type=Path, help="replace this markdown file's section for the label")
    args = parser.parse_args(argv)
    args.work = args.work / args.label
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()
    progress(f"{machine()}; {args.passages} passages; daemon from {ROOT} at {commit}")
    result = measure(args)
    (args.work / "result.json").write_text(json.dumps(result, indent=2))
    publish(report(result, commit), args.write, f"ingest-recall-{args.label}")


if __name__ == "__main__":
    main()
