"""`recalld ingest`: the command around daemon/client/ingest.py, and `--wait` for the vector index."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import time
from pathlib import Path

from recalld.actors import progress
from recalld.cli.connected import connected
from recalld.cli.output import EXIT_FAIL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, Output
from recalld.cli.parser import Subparsers
from recalld.client import Client, ClientError
from recalld.client.ingest import Progress, Summary, ingest

POLL_S = 1.0


def register(sub: Subparsers) -> None:
    parser = sub.add_parser("ingest", help="index a folder of text and markdown files")
    parser.add_argument("path")
    parser.add_argument("--namespace", "-n", default="default")
    parser.add_argument("--kind", default="doc")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    parser.add_argument("--sync", action="store_true", help="also forget the records of files gone from PATH")
    parser.add_argument(
        "--wait", action="store_true", help="after the upload, follow the embedding until the vector route has them"
    )
    parser.add_argument("--json", action="store_true", help="print the daemon's answer as JSON")


def run(args: argparse.Namespace, out: Output) -> int:
    return connected(args, out, _ingest)


@dataclasses.dataclass(frozen=True)
class Backlog:
    records: int
    """Records of the namespace the vector route cannot find yet (`pending`)."""
    chunks: int | None
    """Their chunks still to embed (`pending_chunks`); None from a daemon that does not say."""


NO_VECTOR_INDEX = "the daemon has no vector index ([embedding] provider = none): full text finds them already"


def backlog(client: Client, namespace: str) -> Backlog | None:
    """What the vector route still waits for in `namespace`; None when the daemon has no vector
    index at all (no embedding provider), so nothing is waited for."""
    try:
        answer = client.generations(namespace)
    except ClientError as exc:
        if exc.status == 503 and exc.code == "route_unavailable":
            return None
        raise
    chunks = answer.get("pending_chunks")
    return Backlog(int(answer["pending"]), None if chunks is None else int(chunks))


def pending(client: Client, namespace: str) -> int:
    found = backlog(client, namespace)
    return 0 if found is None else found.records


def time_left(seconds: float) -> str:
    return f"about {seconds:.0f} s left" if seconds < 90 else f"about {seconds / 60:.0f} min left"


def wait_indexed(client: Client, namespace: str, out: Output, *, show: bool, bar: Progress | None = None) -> None:
    """Until the vector route finds every record of `namespace`, with a bar counting the chunks
    embedded (`recalld.actors.progress`: never back, ending at its total; the time left from the rate
    of a moving window, smoothed). `bar`: the caller's, to close if interrupted."""
    clock = time.monotonic
    started = clock()
    now = backlog(client, namespace)
    if now is None:
        out.print(NO_VECTOR_INDEX)
        return
    by_chunks = now.chunks is not None
    estimate = progress.begin(now.chunks if now.chunks is not None else now.records, started)
    bar = bar or Progress(0, show)
    bar.unit = "chunks embedded" if by_chunks else "records embedded"
    while now.records > 0:
        note = ""
        if estimate.done == estimate.total:
            note = "; the vector index takes them in"
        elif estimate.eta_s is not None:
            note = f", {time_left(estimate.eta_s)}"
        bar.show(estimate.done, note, total=estimate.total, last=False)
        time.sleep(POLL_S)  # a client polling the daemon's progress
        now = backlog(client, namespace) or Backlog(0, 0)  # the provider switched off meanwhile
        count = now.chunks if by_chunks and now.chunks is not None else now.records
        estimate = progress.advance(estimate, 0 if now.records == 0 else count, clock())
    bar.show(estimate.total, total=estimate.total, last=True)
    out.print(f"indexed: the vector route finds all of them ({clock() - started:.0f} s)")


def resume_command(args: argparse.Namespace) -> str:
    return f"recalld ingest {shlex.quote(args.path)} -n {shlex.quote(args.namespace)} --wait"


def _ingest(client: Client, args: argparse.Namespace, out: Output) -> int:
    root = Path(args.path)
    if not (root.is_dir() or root.is_file()):
        out.err(f"recalld: {args.path} is neither a folder nor a file")
        return EXIT_USAGE
    as_json = args.json
    bar = Progress(0, not (args.quiet or as_json))
    try:
        summary = ingest(
            client, root, namespace=args.namespace, kind=args.kind, progress=not (args.quiet or as_json), sync=args.sync
        )
    except KeyboardInterrupt:
        out.err(
            "\nrecalld ingest: interrupted; the files sent so far are stored. Running the same command again "
            "goes on from there (files already stored and unchanged are not written again)."
        )
        return EXIT_INTERRUPTED
    try:
        return _after_upload(client, args, summary, out, bar)
    except KeyboardInterrupt:
        bar.close()
        out.err(
            "recalld ingest: interrupted; the daemon goes on embedding what was written. "
            f"To follow it again, run the same command: {resume_command(args)}"
        )
        return EXIT_INTERRUPTED


def _after_upload(client: Client, args: argparse.Namespace, summary: Summary, out: Output, bar: Progress) -> int:
    if args.json:
        if args.wait:
            wait_indexed(client, args.namespace, out, show=False)
        out.print(json.dumps(dataclasses.asdict(summary) | {"pending": pending(client, args.namespace)}, indent=2))
        return EXIT_OK if not summary.failed else EXIT_FAIL
    for line in summary.skipped_lines():
        out.err(line)
    out.print(summary.line())
    written = summary.created + summary.updated
    if args.wait:
        wait_indexed(client, args.namespace, out, show=not args.quiet, bar=bar)
    elif written:
        waiting = pending(client, args.namespace)
        if waiting:
            out.print(
                f"{waiting} records wait for the vector index (full text finds them already); "
                f"follow with: {resume_command(args)}, or recalld generations"
            )
    return EXIT_OK if not summary.failed else EXIT_FAIL
