"""`recalld put`, `get` and `forget`: one record written, shown or forgotten."""

from __future__ import annotations

import argparse
from pathlib import Path

import msgspec

from recalld.cli.connected import connected
from recalld.cli.output import EXIT_OK, EXIT_USAGE, Output, shown
from recalld.cli.parser import Subparsers, attributes
from recalld.client import Client
from recalld.wire.records import RecordCreated, RecordUpdated


def register(sub: Subparsers) -> None:
    put = sub.add_parser("put", help="create a record (or update one with --id)")
    put.add_argument("--namespace", "-n", required=True)
    # a note, as an agent's `remember` writes: a kind the duplicate check covers (`doc` is ingest's)
    put.add_argument("--kind", default="note")
    put.add_argument("--title", required=True)
    put.add_argument("--body", default="")
    put.add_argument("--body-file")
    put.add_argument("--attr", action="append", default=[], metavar="KEY=VALUE")
    put.add_argument("--source-path")
    put.add_argument("--id", help="update this record instead of creating one")
    get = sub.add_parser("get", help="print a record")
    get.add_argument("id")
    forget = sub.add_parser("forget", help="forget (tombstone) a record")
    forget.add_argument("id")
    for command in (put, get, forget):
        command.add_argument("--json", action="store_true", help="print the daemon's answer as JSON")


def run(args: argparse.Namespace, out: Output) -> int:
    return connected(args, out, {"put": _put, "get": _get, "forget": _forget}[args.command])


def _put(client: Client, args: argparse.Namespace, out: Output) -> int:
    try:
        body = Path(args.body_file).read_text(encoding="utf-8") if args.body_file else (args.body or "")
    except (OSError, UnicodeDecodeError) as exc:
        out.err(f"recalld: cannot read --body-file {args.body_file}: {exc}")
        return EXIT_USAGE
    fields = (args.namespace, args.kind, args.title, body)
    given, source_path = attributes(args.attr), args.source_path or None
    answer: RecordCreated | RecordUpdated
    if args.id:
        answer = client.update_record(args.id, *fields, attributes=given, source_path=source_path)
    else:
        answer = client.create_record(*fields, attributes=given, source_path=source_path)
    if args.json:
        out.json(msgspec.to_builtins(answer))
    else:
        out.print(shown(written_line(answer)))
    return EXIT_OK


def written_line(answer: RecordCreated | RecordUpdated) -> str:
    """`recalld put`'s answer in one line: what was written, and its duplicate check."""
    if isinstance(answer, RecordCreated):
        line = f"created {answer.id} (revision {answer.revision})"
    elif answer.changed:
        line = f"updated {answer.id} to revision {answer.revision}"
    else:
        line = f"unchanged {answer.id} (revision {answer.revision})"
    check = answer.duplicate_check
    if check is None:
        return line
    if check.status == "warned":
        similar = ", ".join(f"{s['title']!r} {s['id']} ({s['score']:.2f})" for s in check.similar[:3])
        return f"{line}; similar to {similar}"
    if check.status == "skipped":
        return f"{line}; duplicate check skipped ({check.reason})"
    return f"{line}; no similar title (compared {check.compared} of {check.of})"


def _get(client: Client, args: argparse.Namespace, out: Output) -> int:
    out.json(msgspec.to_builtins(client.get_record(args.id)))
    return EXIT_OK


def _forget(client: Client, args: argparse.Namespace, out: Output) -> int:
    out.json(client.forget_record(args.id))
    return EXIT_OK
