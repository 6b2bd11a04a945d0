"""`recalld generations`: the vector index's generations, its builds and what still waits to be
indexed; `--rebuild` builds a new generation (`--wait` follows it), `--activate` rolls back to
an earlier verified one."""

from __future__ import annotations

import argparse
import time

from recalld.cli.connected import connected
from recalld.cli.output import EXIT_FAIL, EXIT_OK, Output, shown
from recalld.cli.parser import Subparsers
from recalld.client import Client

POLL_S = 0.5
"""How often `--rebuild --wait` asks how far the build got."""


def register(sub: Subparsers) -> None:
    generations = sub.add_parser("generations", help="vector index generations, builds and rollback")
    generations.add_argument("--rebuild", action="store_true", help="build a new generation now")
    generations.add_argument("--wait", action="store_true", help="with --rebuild: show progress until done")
    generations.add_argument("--activate", metavar="ID", help="make an earlier verified generation current")
    generations.add_argument("--namespace", "-n", help="count pending records of this namespace only")
    generations.add_argument("--json", action="store_true")


def run(args: argparse.Namespace, out: Output) -> int:
    return connected(args, out, _generations)


def _generations(client: Client, args: argparse.Namespace, out: Output) -> int:
    if args.activate:
        out.json(client.activate_generation(args.activate))
        return EXIT_OK
    if args.rebuild:
        return _rebuild(client, args, out)
    # with a namespace, `pending` counts that namespace's records alone
    answer = client.generations(args.namespace or None)
    if args.json:
        out.json(answer)
        return EXIT_OK
    for row in answer["generations"]:
        mark = "*" if row["current"] else ("<" if row["id"] == answer["previous"] else " ")
        count = "?" if row["count"] is None else row["count"]  # a generation this daemon has not loaded
        out.print(f"{mark} {row['id']}  {count:>8} vectors  {row['index_type']:<8} {row['built_at']}")
    out.print(f"pending: {answer['pending']}" + (f" in {shown(args.namespace)}" if args.namespace else ""))
    for build in answer["builds"][:5]:
        # progress counts span every namespace: shown to those who may read them all
        progress = f" {build['done']}/{build['total']}" if "total" in build else ""
        out.print(f"build {build['id']}: {build['state']}{progress} {build.get('error') or ''}")
    return EXIT_OK


def _rebuild(client: Client, args: argparse.Namespace, out: Output) -> int:
    build_id = client.rebuild_generations()["build_id"]
    out.err(f"rebuild {build_id} queued")
    while args.wait:
        build = next(b for b in client.generations()["builds"] if b["id"] == build_id)
        out.err(f"\rbuild {build_id}: {build['state']} {build['done']}/{build['total']}", end="")
        if build["state"] in ("done", "failed", "skipped"):
            out.err()
            return EXIT_OK if build["state"] == "done" else EXIT_FAIL
        time.sleep(POLL_S)  # a client polling the daemon's progress
    return EXIT_OK
