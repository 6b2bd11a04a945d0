"""`recalld ingest`: the command around daemon/ingest.py, and `--wait` for the vector index."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from daemon.client import Client
from daemon.ingest import Progress, ingest

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
POLL_S = 1.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path")
    parser.add_argument("--namespace", "-n", default="default")
    parser.add_argument("--kind", default="doc")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    parser.add_argument("--sync", action="store_true", help="also forget the records of files gone from PATH")
    parser.add_argument(
        "--wait", action="store_true", help="after the upload, follow the embedding until the vector route has them"
    )


def pending(client: Client, namespace: str) -> int:
    return int(client.request("GET", "/v1/generations", params={"namespace": namespace})["pending"])


def wait_indexed(client: Client, namespace: str, *, show: bool) -> None:
    """Until nothing waits for the vector index, with a bar and an ETA from the rate so far."""
    first = pending(client, namespace)
    bar = Progress(first, show, unit="records embedded")
    started = time.monotonic()
    left = first
    while left > 0:
        time.sleep(POLL_S)
        left = pending(client, namespace)
        done = max(0, first - left)
        rate = done / (time.monotonic() - started)
        eta = f", about {left / rate:.0f} s left" if rate > 0 and left else ""
        bar.show(min(done, first), eta)
    bar.show(first)
    print(f"indexed: the vector route finds all of them ({time.monotonic() - started:.0f} s)")


def cmd_ingest(client: Client, args: argparse.Namespace) -> int:
    root = Path(args.path)
    if not (root.is_dir() or root.is_file()):
        print(f"recalld: {args.path} is neither a folder nor a file", file=sys.stderr)
        return EXIT_USAGE
    as_json = getattr(args, "json", False)
    summary = ingest(
        client, root, namespace=args.namespace, kind=args.kind, progress=not (args.quiet or as_json), sync=args.sync
    )
    if as_json:
        if args.wait:
            wait_indexed(client, args.namespace, show=False)
        print(json.dumps(dataclasses.asdict(summary) | {"pending": pending(client, args.namespace)}, indent=2))
        return EXIT_OK if not summary.failed else EXIT_FAIL
    for line in summary.skipped_lines():
        print(line, file=sys.stderr)
    print(summary.line())
    written = summary.created + summary.updated
    if args.wait:
        wait_indexed(client, args.namespace, show=not args.quiet)
    elif written:
        waiting = pending(client, args.namespace)
        if waiting:
            print(
                f"{waiting} records wait for the vector index (full text finds them already); "
                f"follow with: recalld ingest {args.path} -n {args.namespace} --wait, or recalld generations"
            )
    return EXIT_OK if not summary.failed else EXIT_FAIL
