"""`recalld assignments ENTITY`: an entity's canonical values, their sources and disputes, and
what still waits for the next assignment tick. Text for people, `--json` for programs (the
daemon's answer as is)."""

from __future__ import annotations

import argparse
import math

import msgspec

from recalld.cli.connected import connected
from recalld.cli.output import EXIT_OK, Output, shown
from recalld.cli.parser import Subparsers
from recalld.client import Client


def register(sub: Subparsers) -> None:
    assignments = sub.add_parser("assignments", help="an entity's canonical values, their sources and disputes")
    assignments.add_argument("entity")
    assignments.add_argument("--json", action="store_true")


def run(args: argparse.Namespace, out: Output) -> int:
    return connected(args, out, _assignments)


def _next_tick(due_in_s: float | None) -> str:
    if due_in_s is None:
        return "the assignment ticker is not running"
    return f"the next assignment tick is in {math.ceil(due_in_s)} s"


def _assignments(client: Client, args: argparse.Namespace, out: Output) -> int:
    answer = client.assignments(args.entity)
    if args.json:
        out.json(msgspec.to_builtins(answer))
        return EXIT_OK
    for item in answer.assignments:
        note = f"  [dispute {item.dispute.state}]" if item.dispute else ""
        out.print(f"{shown(item.characteristic)} = {shown(item.value)}  {item.source}{note}")
    for waiting in answer.unassigned:
        out.print(f"{shown(waiting.characteristic)}: no canonical value yet; {_next_tick(answer.next_tick_in_s)}")
    return EXIT_OK
