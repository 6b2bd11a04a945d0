"""The `recalld` command: `serve` runs the daemon; every other command is a client of its socket."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Protocol

import recalld.cli.assignments as assignments
import recalld.cli.backup as backup
import recalld.cli.disputes as disputes
import recalld.cli.duplicates as duplicates
import recalld.cli.eval as evaluation
import recalld.cli.generations as generations
import recalld.cli.health as health
import recalld.cli.ingest as ingest
import recalld.cli.mcp as mcp
import recalld.cli.observe as observe
import recalld.cli.parser as cli_parser
import recalld.cli.recall as recall
import recalld.cli.records as records
import recalld.cli.serve as serve
import recalld.cli.stats as stats
import recalld.cli.status as status
import recalld.cli.usage as usage
from recalld.cli.output import Output
from recalld.cli.parser import Subparsers


class CommandGroup(Protocol):
    """A module of daemon/cli/ that holds one or more commands."""

    def register(self, sub: Subparsers) -> None:
        """Add its commands' parsers."""

    def run(self, args: argparse.Namespace, out: Output) -> int:
        """Run the command `args.command` names; its exit status."""


COMMANDS: dict[str, CommandGroup] = {
    "serve": serve,
    "health": health,
    "status": status,
    "put": records,
    "get": records,
    "forget": records,
    "recall": recall,
    "feedback": recall,
    "ingest": ingest,
    "stats": stats,
    "usage": usage,
    "generations": generations,
    "backup": backup,
    "restore": backup,
    "dupes": duplicates,
    "calibrate": duplicates,
    "eval": evaluation,
    "observe": observe,
    "assignments": assignments,
    "disputes": disputes,
    "mcp": mcp,
}
"""Each command, by the name a user types, and the group it belongs to (`--help` lists them in
this order)."""


def build_parser() -> argparse.ArgumentParser:
    parser, sub = cli_parser.root(__doc__ or "")
    for group in dict.fromkeys(COMMANDS.values()):
        group.register(sub)
    cli_parser.finish(parser, sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(given)
    except cli_parser.UsageError as error:
        return cli_parser.report(parser, error, given)
    return COMMANDS[args.command].run(args, Output())


if __name__ == "__main__":
    sys.exit(main())
