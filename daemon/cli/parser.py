"""The CLI's argument parser: the root, what every subcommand accepts (`--socket`, and the
`--attr KEY=VALUE` pairs of put and recall), and usage errors that come with a hint at what was
meant.

argparse says what is wrong; this adds how to put it right, from the command line itself:

- a query that starts with `-` (`recalld recall -n docs --require-hashes`) reads as an option
  and leaves the query missing: "to search for --require-hashes, put it after --";
- a misspelled option, command or choice gets the closest known one ("--namspace: did you mean
  --namespace?"), as git and cargo suggest.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.metadata
import json
import sys
from collections.abc import Sequence
from typing import Any, TypeAlias, cast

from recalld.cli.output import EXIT_USAGE

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""What a command group's `register` adds its subcommands to."""


class UsageError(Exception):
    """A command line argparse refused; `parser` is the (sub)parser that refused it."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser
        self.message = message


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are raised (`UsageError`), for `report` to explain, instead
    of printed and exited on; its subcommands' parsers are of this class too."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(self, message)


def version() -> str:
    try:
        return f"recalld {importlib.metadata.version('recalld')}"
    except importlib.metadata.PackageNotFoundError:
        return "recalld (version unknown: not installed as a package)"


def root(description: str) -> tuple[Parser, Subparsers]:
    """The `recalld` parser and the subparsers each command group registers on (argparse makes
    them of the parent's class: `Parser` too)."""
    parser = Parser(prog="recalld", description=description)
    parser.add_argument("--socket", help="control socket (default: $RECALLD_SOCKET, then the runtime dir)")
    return parser, cast(Subparsers, parser.add_subparsers(dest="command", required=True))


def finish(parser: argparse.ArgumentParser, sub: Subparsers) -> None:
    """`--version`; `--socket` accepted after any subcommand as well (the top-level `--socket`
    stays the default when a subcommand does not give one)."""
    parser.add_argument("--version", action="version", version=version())
    for command in sub.choices.values():
        known = {option for action in command._actions for option in action.option_strings}
        if "--socket" not in known:
            command.add_argument(
                "--socket", default=argparse.SUPPRESS, help="control socket (also accepted before the subcommand)"
            )


def attributes(pairs: Sequence[str]) -> dict[str, Any]:
    """`--attr KEY=VALUE`s: each value as JSON when it parses (`n=3` a number), else as text."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--attr expects key=value, got {pair!r}")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return [option for action in parser._actions for option in action.option_strings]


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _command_parser(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.ArgumentParser:
    """The subcommand's parser the command line names (the top-level one when it names none)."""
    commands = _subparsers(parser)
    for arg in argv:
        if arg in commands:
            return _command_parser(commands[arg], argv[list(argv).index(arg) + 1 :])
    return parser


def _closest(word: str, known: Sequence[str]) -> str | None:
    found = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    return found[0] if found else None


def hint(root: argparse.ArgumentParser, failed: argparse.ArgumentParser, message: str, argv: Sequence[str]) -> str:
    """What to say after argparse's `message` for the command line `argv`, or ""."""
    command = _command_parser(root, argv)
    lines = []
    if "the following arguments are required:" in message:
        known = set(_options(failed))
        # before a `--`, an unknown word that looks like an option was meant as the missing argument
        before = list(argv)[: list(argv).index("--")] if "--" in argv else list(argv)
        for word in before:
            if word.startswith("-") and word.split("=")[0] not in known and word != "-":
                lines.append(f"to search for {word}, put it after --: {failed.prog} ... -- {word}")
    elif message.startswith("unrecognized arguments:"):
        for word in message.removeprefix("unrecognized arguments:").split():
            if word.startswith("-") and (near := _closest(word.split("=")[0], _options(command))):
                lines.append(f"{word}: did you mean {near}?")
    elif "invalid choice:" in message:
        chosen = message.split("invalid choice:", 1)[1].split("'")[1] if "'" in message else ""
        choices = list(_subparsers(failed)) if message.startswith("argument command:") else []
        if not choices:
            choices = [c for action in failed._actions for c in (action.choices or ()) if isinstance(c, str)]
        if chosen and (near := _closest(chosen, choices)):
            lines.append(f"{chosen}: did you mean {near}?")
    return "".join(f"\n{line}" for line in lines)


def report(root: argparse.ArgumentParser, error: UsageError, argv: Sequence[str]) -> int:
    """Print the refusal as argparse would (usage, then the error), with the hint; the exit code."""
    error.parser.print_usage(sys.stderr)
    print(
        f"{error.parser.prog}: error: {error.message}{hint(root, error.parser, error.message, argv)}", file=sys.stderr
    )
    return EXIT_USAGE
