"""`recalld disputes ...`: the dispute queue and moderation over the socket (admin only). Text
for people, `--json` for programs (the daemon's answer as is)."""

from __future__ import annotations

import argparse
import uuid
from typing import Any

import msgspec

from recalld.cli.connected import connected
from recalld.cli.output import EXIT_OK, Output, shown
from recalld.cli.parser import Subparsers
from recalld.client import Client
from recalld.wire.assignments import Dispute

ACTIONS = ("approve", "override", "reject", "escalate")


class _EitherOrder(argparse.Action):
    """`decide ID ACTION`, as the docs write it; `decide ACTION ID`, the order the parser once
    wanted, means the same (an id is never one of the action words). Runs once both positionals
    are read; neither word an action is a usage error (exit 2) naming the actions."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        if values not in ACTIONS and namespace.id in ACTIONS:
            namespace.id, values = values, namespace.id
        if values not in ACTIONS:
            parser.error(f"argument ACTION: invalid choice: {values!r} (choose from {', '.join(ACTIONS)})")
        setattr(namespace, self.dest, values)


def register(sub: Subparsers) -> None:
    disputes = sub.add_parser("disputes", help="the dispute queue and moderation (administrators)")
    verbs = disputes.add_subparsers(dest="verb", required=True)
    listing = verbs.add_parser("list", help="disputes, oldest id first")
    listing.add_argument("--state", help="pending, in_progress, resolved, manual_review, superseded, skipped_unchanged")
    listing.add_argument("--tier", help="high, medium, low")
    listing.add_argument("--limit", type=int, default=100, help="at most this many (all pages are read up to it)")
    show = verbs.add_parser("show", help="one dispute whole")
    force = verbs.add_parser("force-resolve", help="resolve now: with --value as given, else by the resolver")
    force.add_argument("--value")
    supersede = verbs.add_parser("supersede", help="withdraw a dispute (terminal until its values change)")
    for verb in (show, force, supersede):
        verb.add_argument("id")
    decide = verbs.add_parser("decide", help="a moderation decision: decide ID ACTION [--value V]")
    decide.add_argument("id", metavar="ID")
    decide.add_argument("action", action=_EitherOrder, metavar="ACTION", help=" | ".join(ACTIONS))
    decide.add_argument("--value", help="the value, with override")
    for verb in (listing, show, force, supersede, decide):
        verb.add_argument("--json", action="store_true")


def run(args: argparse.Namespace, out: Output) -> int:
    return connected(args, out, _disputes)


def _line(dispute: Dispute) -> str:
    return (
        f"{dispute.id}  {dispute.state:<17} {dispute.tier or '-':<6}  {shown(dispute.entity)}"
        f"  {shown(dispute.characteristic)} = {shown(dispute.winning_value)}"
        f"  ({', '.join(shown(c.value) for c in dispute.candidates)})"
    )


def _disputes(client: Client, args: argparse.Namespace, out: Output) -> int:
    if args.verb == "list":
        found: list[Dispute] = []
        after: uuid.UUID | None = None
        while len(found) < args.limit:
            page = client.disputes(
                state=args.state or None, tier=args.tier or None, limit=min(1000, args.limit - len(found)), after=after
            )
            found += page.disputes
            after = page.next
            if after is None:
                break
        if args.json:
            out.json({"disputes": msgspec.to_builtins(found)})
        else:
            for dispute in found:
                out.print(_line(dispute))
        return EXIT_OK
    if args.verb == "show":
        answer = client.dispute(args.id)
    elif args.verb == "force-resolve":
        answer = client.force_resolve(args.id, value=args.value or None)
    elif args.verb == "supersede":
        answer = client.supersede(args.id)
    else:
        answer = client.decide(args.id, args.action, value=args.value)
    if args.json or args.verb == "show":
        out.json(msgspec.to_builtins(answer))
    else:
        out.print(_line(answer))
    return EXIT_OK
