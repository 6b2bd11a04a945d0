"""`recalld stats -n NAMESPACE`: a namespace's recall quality from the feedback on its results,
precision@k and the ranks the useful results had."""

from __future__ import annotations

import argparse

from recalld.cli.connected import connected
from recalld.cli.output import EXIT_OK, Output, shown
from recalld.cli.parser import Subparsers
from recalld.client import Client


def register(sub: Subparsers) -> None:
    stats = sub.add_parser("stats", help="recall quality of a namespace: precision@k from feedback, ranks")
    stats.add_argument("--namespace", "-n", required=True)
    stats.add_argument("-k", type=int, default=10)
    stats.add_argument("--json", action="store_true")


def run(args: argparse.Namespace, out: Output) -> int:
    return connected(args, out, _stats)


def _stats(client: Client, args: argparse.Namespace, out: Output) -> int:
    answer = client.stats(args.namespace, k=args.k)
    if args.json:
        out.json(answer)
        return EXIT_OK
    precision = answer["precision_at_k"]
    out.print(
        f"namespace {shown(answer['namespace'])}: {answer['searches']} searches, "
        f"{answer['degraded_searches']} degraded, {answer['empty_searches']} empty"
    )
    figure = "n/a (no feedback yet)" if precision is None else f"{precision:.3f}"
    out.print(
        f"precision@{answer['k']}: {figure} ({answer['useful_at_k']} useful of {answer['judged_at_k']} judged, "
        f"{answer['searches_with_feedback']} searches with feedback)"
    )
    distribution = answer["useful_rank_distribution"]
    if distribution:
        top = max(distribution.values())
        out.print("rank of useful results:")
        for rank, count in sorted(distribution.items(), key=lambda item: int(item[0])):
            out.print(f"  {int(rank):>3} {'#' * max(1, round(30 * count / top))} {count}")
    return EXIT_OK
