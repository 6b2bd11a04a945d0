"""`recalld observe`: what suppliers say of an entity's characteristic, one observation from the
command line or a JSON-lines file sent in batches the route takes. Totals as text, or `--json`."""

from __future__ import annotations

import argparse
import datetime as dt
import io
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

import msgspec

from recalld.cli.connected import connected
from recalld.cli.output import EXIT_FAIL, EXIT_OK, EXIT_USAGE, Output, shown
from recalld.cli.parser import Subparsers
from recalld.client import Client, ClientError
from recalld.wire.assignments import MAX_OBSERVATIONS, ObservationIn, Observed

DEFAULT_TRUST = 0.5
"""`recalld observe`'s trust when none is given: neither trusted nor doubted."""

_line = msgspec.json.Decoder(ObservationIn)


def _rfc3339(text: str) -> dt.datetime:
    try:
        return msgspec.convert(text, dt.datetime)
    except msgspec.ValidationError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an RFC 3339 time (e.g. 2026-01-31T12:00:00Z)") from None


def register(sub: Subparsers) -> None:
    observe = sub.add_parser(
        "observe",
        help="report what a supplier says of an entity's characteristic (or a file of such reports)",
        description="One observation: ENTITY CHARACTERISTIC SUPPLIER VALUE. Many: --file, JSON lines, each"
        " line an observation as POST /v1/observations takes it, sent in batches.",
    )
    for name, meaning in (
        ("entity", "what is observed (a product, a device, ...)"),
        ("characteristic", "which of its characteristics (voltage, colour, ...)"),
        ("supplier", "who says so"),
        ("value", "what they say it is, as they wrote it"),
    ):
        observe.add_argument(name, nargs="?", metavar=name.upper(), help=meaning)
    observe.add_argument("--trust", type=float, help=f"how far the supplier is trusted, 0 to 1 ({DEFAULT_TRUST})")
    observe.add_argument(
        "--observed-at", type=_rfc3339, metavar="TIME", help="when the supplier saw it, RFC 3339 (default: now)"
    )
    observe.add_argument("--file", metavar="PATH", help="observations as JSON lines; - for stdin")
    observe.add_argument("--json", action="store_true", help="print the totals as JSON")
    observe.set_defaults(observe_parser=observe)


def run(args: argparse.Namespace, out: Output) -> int:
    return connected(args, out, _observe)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _totals(done: Observed) -> str:
    line = f"accepted {_plural(done.accepted, 'observation')}, stored {done.stored}"
    if done.stored < done.accepted:
        line += " (the others are older than what their suppliers reported before)"
    return line


def _usage_error(args: argparse.Namespace, out: Output, message: str) -> int:
    parser: argparse.ArgumentParser = args.observe_parser
    parser.print_usage(out.stderr)
    out.err(f"{parser.prog}: error: {message}")
    return EXIT_USAGE


@contextmanager
def _opened(path: str) -> Iterator[TextIO]:
    if path == "-":
        yield io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8")
    else:
        with open(path, encoding="utf-8") as handle:
            yield handle


class _BadLine(Exception):
    def __init__(self, number: int, message: str) -> None:
        super().__init__(message)
        self.number = number


def _batches(lines: TextIO) -> Iterator[list[tuple[int, ObservationIn]]]:
    """(line number, observation) in batches of at most MAX_OBSERVATIONS, blank lines skipped;
    `_BadLine` at the first line that is no observation, before its batch is yielded."""
    batch: list[tuple[int, ObservationIn]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            batch.append((number, _line.decode(line)))
        except msgspec.DecodeError as exc:  # ValidationError too: not JSON, or not an observation
            raise _BadLine(number, str(exc)) from None
        if len(batch) == MAX_OBSERVATIONS:
            yield batch
            batch = []
    if batch:
        yield batch


def _refused_line(exc: ClientError, batch: list[tuple[int, ObservationIn]]) -> int | None:
    """The line of the observation a 400 names by its position in the batch (`index`)."""
    index = exc.body.get("index") if isinstance(exc.body, dict) else None
    return batch[index][0] if isinstance(index, int) and 0 <= index < len(batch) else None


def _send_file(client: Client, path: str, out: Output) -> Observed | None:
    """Every batch of the file, in order, until one fails. Then what the batches before it did
    is said on stderr, and nothing of the failed batch is claimed as stored: a refused one
    (4xx) was stored not at all, one without an answer may or may not have been. None: a bad
    line or a file that cannot be read, reported here; a refusal or no answer is raised, for
    the CLI to report as for any command."""
    where = "stdin" if path == "-" else shown(path)
    total, first = Observed(accepted=0, stored=0), 1  # `first`: the first line not stored yet

    def before() -> str:
        return f"recalld: lines before {first}: accepted {total.accepted}, stored {total.stored}"

    try:
        with _opened(path) as lines:
            for batch in _batches(lines):
                first, last = batch[0][0], batch[-1][0]
                try:
                    done = client.observe([observation for _, observation in batch])
                except ClientError as exc:
                    if exc.status < 500 and (line := _refused_line(exc, batch)) is not None:
                        raise _BadLine(line, exc.body["error"].get("message", str(exc))) from None
                    if total.accepted:  # else the refusal alone says it: nothing was stored
                        out.err(f"{before()}; {_lost(first, last, unknown=exc.status >= 500)}")
                    raise
                except ConnectionError:
                    if total.accepted:
                        out.err(f"{before()}; {_lost(first, last, unknown=True)}")
                    raise
                total = Observed(accepted=total.accepted + done.accepted, stored=total.stored + done.stored)
                first = last + 1
    except _BadLine as bad:
        out.err(f"recalld: {where} line {bad.number}: {shown(str(bad))}")
        out.err(f"{before()}; {_lost(first, None, unknown=False)}")
        return None
    except ConnectionError:
        raise
    except (OSError, UnicodeDecodeError) as exc:
        out.err(f"recalld: cannot read {where}: {shown(str(exc))}")
        out.err(f"{before()}; {_lost(first, None, unknown=False)}")
        return None
    return total


def _lost(first: int, last: int | None, *, unknown: bool) -> str:
    if not unknown:
        return f"nothing from line {first} on was stored"
    return (
        f"lines {first} to {last} may or may not be stored (sending them again is safe); nothing after line"
        f" {last} was sent"
    )


def _observe(client: Client, args: argparse.Namespace, out: Output) -> int:
    words = [args.entity, args.characteristic, args.supplier, args.value]
    given = sum(word is not None for word in words)
    if args.file is not None:
        if given:
            return _usage_error(args, out, "give ENTITY CHARACTERISTIC SUPPLIER VALUE or --file PATH, not both")
        if args.trust is not None or args.observed_at is not None:
            return _usage_error(
                args, out, "--trust and --observed-at are for one observation: a file's lines carry theirs"
            )
        done = _send_file(client, args.file, out)
        if done is None:
            return EXIT_FAIL
    elif given < len(words):
        return _usage_error(args, out, "give ENTITY CHARACTERISTIC SUPPLIER VALUE (all four), or --file PATH")
    else:
        observation = ObservationIn(
            entity=args.entity,
            characteristic=args.characteristic,
            supplier=args.supplier,
            value=args.value,
            trust=DEFAULT_TRUST if args.trust is None else args.trust,
            observed_at=args.observed_at,
        )
        done = client.observe([observation])
    if args.json:
        out.json(msgspec.to_builtins(done))
    else:
        out.print(_totals(done))
    return EXIT_OK
