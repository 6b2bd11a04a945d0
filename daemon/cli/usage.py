"""`recalld usage`: embedding usage (calls, tokens, cost) per namespace and purpose, the daemon's
own work as `(system)`."""

from __future__ import annotations

import argparse

from recalld.cli.connected import connected
from recalld.cli.output import EXIT_OK, Output, shown
from recalld.cli.parser import Subparsers
from recalld.client import Client


def register(sub: Subparsers) -> None:
    usage = sub.add_parser("usage", help="embedding usage per namespace and purpose")
    usage.add_argument("--namespace", "-n")
    usage.add_argument("--since", help="RFC 3339 timestamp")
    usage.add_argument("--json", action="store_true")


def run(args: argparse.Namespace, out: Output) -> int:
    return connected(args, out, _usage)


def _usage(client: Client, args: argparse.Namespace, out: Output) -> int:
    answer = client.usage(args.namespace or None, since=args.since or None)
    if args.json:
        out.json(answer)
        return EXIT_OK
    out.print(f"{'namespace':<24} {'purpose':<8} {'provider':<8} {'calls':>7} {'tokens':>10} {'cost (µ)':>10}")
    for row in answer["usage"] + answer["system"]:
        # the daemon's own work (the start-up probe) served no namespace
        name = "(system)" if row["namespace"] is None else shown(row["namespace"])
        out.print(
            f"{name:<24} {row['purpose']:<8} {row['provider']:<8} {row['calls']:>7} "
            f"{row['input_tokens']:>10} {row['cost_micros']:>10}"
        )
    totals = answer["totals"]
    out.print(f"client totals: {totals['calls']} calls, {totals['input_tokens']} tokens, {totals['cost_micros']} µ")
    return EXIT_OK
