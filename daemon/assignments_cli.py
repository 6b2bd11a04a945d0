"""`recalld assignments ENTITY`: an entity's canonical values, and what still waits for the
next assignment tick. Text for people, `--json` for programs (the daemon's answer as is)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

import msgspec

from daemon.client import Client

EXIT_OK = 0
Shown = Callable[[str], str]
"""The CLI's `shown` (daemon/cli.py): text made safe for a terminal."""


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    assignments = sub.add_parser("assignments", help="an entity's canonical values, their sources and disputes")
    assignments.add_argument("entity")
    assignments.add_argument("--json", action="store_true")


def _next_tick(due_in_s: float | None) -> str:
    if due_in_s is None:
        return "the assignment ticker is not running"
    return f"the next assignment tick is in {math.ceil(due_in_s)} s"


def cmd_assignments(
    client: Client, args: argparse.Namespace, *, shown: Shown, print_json: Callable[[Any], None]
) -> int:
    answer = client.assignments(args.entity)
    if args.json:
        print_json(msgspec.to_builtins(answer))
        return EXIT_OK
    for item in answer.assignments:
        note = f"  [dispute {item.dispute.state}]" if item.dispute else ""
        print(f"{shown(item.characteristic)} = {shown(item.value)}  {item.source}{note}")
    for waiting in answer.unassigned:
        print(f"{shown(waiting.characteristic)}: no canonical value yet; {_next_tick(answer.next_tick_in_s)}")
    return EXIT_OK
