"""`recalld` papercuts (issue 22 item 7): `--version`, `--socket` after the subcommand,
`--json` on every client command, recall's text with snippets and the routes that found each
result, `recalld feedback`, a clear word for an empty or unknown namespace, a one-screen
`health --ready`, and the id a 409 names. daemon/cli/commands.py wires these in."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from recalld.client import Client, ClientError

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
Shown = Callable[[str], str]
PrintJson = Callable[[Any], None]
SNIPPET_WIDTH = 100
JSON_TOO = ("health", "put", "get", "forget", "ingest", "feedback")
"""Commands that get `--json` here (the others define it themselves; get and forget print the
daemon's JSON answer either way, put one line unless asked for JSON)."""


def version() -> str:
    try:
        return f"recalld {importlib.metadata.version('recalld')}"
    except importlib.metadata.PackageNotFoundError:
        return "recalld (version unknown: not installed as a package)"


def finish_parser(parser: argparse.ArgumentParser, sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`--version`; `--socket` and `--json` accepted after any subcommand as well (the top-level
    `--socket` stays the default when a subcommand does not give one)."""
    parser.add_argument("--version", action="version", version=version())
    for name, command in sub.choices.items():
        known = {option for action in command._actions for option in action.option_strings}
        if "--socket" not in known:
            command.add_argument(
                "--socket", default=argparse.SUPPRESS, help="control socket (also accepted before the subcommand)"
            )
        if "--json" not in known and name in JSON_TOO:
            command.add_argument("--json", action="store_true", help="print the daemon's answer as JSON")


def written_line(answer: dict[str, Any], *, created: bool) -> str:
    """`recalld put`'s answer in one line: what was written, and its duplicate check."""
    revision = answer.get("revision")
    if created:
        line = f"created {answer.get('id')} (revision {revision})"
    elif answer.get("changed", True):
        line = f"updated {answer.get('id')} to revision {revision}"
    else:
        line = f"unchanged {answer.get('id')} (revision {revision})"
    check = answer.get("duplicate_check")
    if check is None:
        return line
    if check["status"] == "warned":
        similar = ", ".join(f"{s['title']!r} {s['id']} ({s['score']:.2f})" for s in check["similar"][:3])
        return f"{line}; similar to {similar}"
    if check["status"] == "skipped":
        return f"{line}; duplicate check skipped ({check.get('reason')})"
    return f"{line}; no similar title (compared {check['compared']} of {check['of']})"


def not_reachable_advice(socket: Path, given: str | None) -> str:
    """What to do when no daemon answers at `socket`, and where that path came from."""
    source = "--socket" if given else ("$RECALLD_SOCKET" if os.environ.get("RECALLD_SOCKET") else "the default")
    return (
        f"  tried {socket} ({source}). Is the daemon running? Start it with `recalld serve`; if it runs "
        "elsewhere, name its socket with --socket PATH or RECALLD_SOCKET=PATH"
    )


def error_line(exc: ClientError) -> str:
    """A refusal in one line; a 409 names the record that is already there."""
    line = str(exc)
    if exc.existing_id is not None:
        line += f" (existing record: {exc.existing_id}; `recalld get {exc.existing_id}` shows it)"
    return line


def cmd_health(client: Client, args: argparse.Namespace, *, shown: Shown, print_json: PrintJson) -> int:
    """Live (or, with --ready, ready): exit 0 when so. Text: one line (with what a passing check
    notes, such as an index with nothing to index yet), then only the checks that are not
    `pass`, each with its reason; --json: the whole answer."""
    path = "/readyz" if args.ready else "/livez"
    try:
        body = client.request("GET", path)
        code = EXIT_OK
    except ClientError as exc:
        body, code = exc.body, EXIT_FAIL
    if getattr(args, "json", False):
        print_json(body)
        return code
    status = body.get("status", "fail") if isinstance(body, dict) else "fail"
    what = "ready" if args.ready else "live"
    verdict = {"pass": what, "warn": f"{what}, degraded"}.get(status, f"not {what}")
    checks = body.get("checks", {}) if isinstance(body, dict) else {}
    # a passing check may still have something to say (`detail.note`: "nothing indexed yet")
    notes = [
        str(check["detail"]["note"])
        for check in checks.values()
        if check.get("status") == "pass" and isinstance(check.get("detail"), dict) and "note" in check["detail"]
    ]
    print(shown("; ".join([verdict, *notes]) + f" ({status})"))
    for name, check in checks.items():
        if check.get("status") != "pass":
            reason = check.get("reason") or ""
            print(shown(f"  {name}: {check.get('status')} {reason}".rstrip()))
    return code


def hit_lines(rank: int, hit: dict[str, Any], *, shown: Shown) -> list[str]:
    """A result: rank, fused score, title, where it is; then the routes that found it (at their
    ranks, the vector route with its cosine similarity) and its snippet."""
    where = hit.get("source_path") or hit["id"]
    lines = [f"{rank:>3}. {shown(hit['title'])}  ({shown(str(where))})"]
    scores = hit.get("route_scores", {})
    found = ", ".join(
        f"{route} #{position}" + (f" cos {scores['vector']:.2f}" if route == "vector" and "vector" in scores else "")
        for route, position in hit["routes"].items()
    )
    lines.append(f"     score {hit['score']:.4f} from {found}; id {hit['id']}")
    # full text marks the matched words with <b>...</b> (ts_headline's default); plain text here
    snippet = " ".join(str(hit.get("snippet") or "").replace("<b>", "").replace("</b>", "").split())
    if snippet:
        lines += textwrap.wrap(shown(snippet), SNIPPET_WIDTH, initial_indent="     ", subsequent_indent="     ")
    return lines


def explain_empty(client: Client, namespace: str, *, shown: Shown) -> str:
    """Why a recall found nothing: the namespace holds no records (misspelled?) or none matched."""
    try:
        listed = client.request("GET", "/v1/records", params={"namespace": namespace, "limit": "1"})
    except ClientError:
        return "no results"
    if not listed["records"]:
        return shown(f"no results: namespace {namespace!r} has no records (is it spelled right?)")
    return "no results: nothing in the namespace matched"


def cmd_recall_text(
    client: Client, args: argparse.Namespace, answer: dict[str, Any], *, shown: Shown, fusion: str
) -> int:
    """The text of a recall's answer; exit 1 when the namespace has no records at all."""
    if answer["results"]:
        print(f"fused by {fusion}; for each result the routes that found it, at their ranks")
    for rank, hit in enumerate(answer["results"], start=1):
        print("\n".join(hit_lines(rank, hit, shown=shown)))
    for degraded in answer["degraded_routes"]:
        detail = f": {degraded['message']}" if degraded.get("message") else ""
        print(shown(f"degraded: {degraded['route']} ({degraded['reason']}){detail}"), file=sys.stderr)
    if answer["results"]:
        search = answer["search_id"]
        print(f"search {search}: `recalld feedback {search} RESULT_ID --useful` says which result helped")
        return EXIT_OK
    message = explain_empty(client, args.namespace, shown=shown)
    print(message, file=sys.stderr)
    return EXIT_FAIL if "has no records" in message else EXIT_OK


def add_feedback_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    feedback = sub.add_parser("feedback", help="say whether a result of a recall was useful (feeds `stats`)")
    feedback.add_argument("search_id", help="the recall's search id (printed by `recalld recall`)")
    feedback.add_argument("record_id", help="the result's record id")
    judged = feedback.add_mutually_exclusive_group(required=True)
    judged.add_argument("--useful", dest="useful", action="store_true")
    judged.add_argument("--not-useful", dest="useful", action="store_false")


def cmd_feedback(client: Client, args: argparse.Namespace, *, print_json: PrintJson) -> int:
    try:
        answer = client.feedback(args.search_id, args.record_id, useful=args.useful)
    except ValueError:
        print("recalld: the search id and the record id must be UUIDs", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print_json(answer)
    else:
        print(f"noted: result {args.record_id} was {'useful' if args.useful else 'not useful'}")
    return EXIT_OK
