"""Writes per second: one `POST /v1/records` per record against `POST /v1/records:batch`
(issue 22 item 3), on a fresh daemon, one client.

    .venv/bin/python bench/batch_writes.py [--records 500] [--batch 100] [--write docs/BENCHMARKS.md]

The records are the first man-page passages of bench/recall.py, written once each way into two
namespaces. The daemon runs with `[embedding] provider = "none"`, so that no indexing shares the
machine with the writes; with no provider the duplicate check is skipped, so this is the writes
alone (a check embeds a title: it costs the same either way).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import load_average, machine, progress, publish  # noqa: E402
from bench.ingest_recall import start  # noqa: E402
from bench.recall import build_corpus  # noqa: E402
from daemon.client import Client  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=500)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-batch-writes"))
    parser.add_argument("--write", type=Path, help="replace this markdown file's batch_writes.py section")
    args = parser.parse_args(argv)
    records = build_corpus(max(args.records, 3000), 100)["records"][: args.records]
    daemon, socket = start(args.work, {"RECALLD_EMBEDDING_PROVIDER": "none"})
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
                part = [{"namespace": "batched", "kind": "man", **r} for r in records[i : i + args.batch]]
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
            "## Batch writes (issue 22)",
            "",
            f"- Machine: {machine()}; load average at the end {load_average()} (a shared machine).",
            f"- Command: `.venv/bin/python bench/batch_writes.py --records {n} --batch {args.batch}`",
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
    )


if __name__ == "__main__":
    main()
