"""The `recalld` command: `serve` runs the daemon; every other command is a client of its socket."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

import recalld.cli.assignments as assignments_cli
import recalld.cli.backup as backup_cli
import recalld.cli.disputes as disputes_cli
import recalld.cli.duplicates as duplicates_cli
import recalld.cli.ingest as ingest_cli
import recalld.cli.mcp as mcp_cli
import recalld.cli.text as cli_text
import recalld.cli.usage_errors as cli_usage
from recalld import paths
from recalld.cli.eval import add_parser as add_eval_parser
from recalld.cli.eval import cmd_eval
from recalld.client import Client, ClientError

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


# Bidirectional controls reorder the text that follows them on screen (CVE-2021-42574). Other
# format characters (zero-width joiners in emoji, soft hyphens) and other spaces are harmless.
_BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _unsafe(ch: str) -> bool:
    """All of these lie in the Basic Multilingual Plane, so `\\uXXXX` spells each of them."""
    return unicodedata.category(ch) in ("Cc", "Zl", "Zp") or ch in _BIDI_CONTROLS


def shown(text: str, *, keep: str = "") -> str:
    """`text` safe for a terminal: control characters (ESC, the C1 codes), line separators and
    bidi overrides written as `\\uXXXX`. Titles, paths and error messages come from the store,
    i.e. from whoever wrote the record; printed raw, they could move the cursor, rewrite earlier
    lines or reorder what follows. `keep` names characters to leave alone (JSON's newlines)."""
    if text.isprintable():  # the common case; every character escaped below is unprintable
        return text
    return "".join(f"\\u{ord(ch):04x}" if _unsafe(ch) and ch not in keep else ch for ch in text)


def print_json(value: Any) -> None:
    """JSON as the daemon sent it, readable (indented, non-ASCII as is) and terminal-safe: the
    characters `shown` escapes can only occur inside strings, where `\\uXXXX` is their JSON
    spelling, so the output still parses to the same value."""
    print(shown(json.dumps(value, indent=2, ensure_ascii=False), keep="\n"))


# -- commands


def cmd_serve(args: argparse.Namespace) -> int:
    import anyio

    from recalld import app, log
    from recalld.config import ConfigError, load

    try:
        config = load(args.config or os.environ.get("RECALLD_CONFIG") or None)
    except ConfigError as exc:
        print(f"recalld: {exc}", file=sys.stderr)
        return EXIT_USAGE
    log.setup(config.log.level)
    # Records live in the data directory's files: nothing recalld creates is open to group or
    # others, whatever umask it inherited (systemd's UMask= covers only the unit). A stricter one
    # is kept. The control socket sets its own mode ([server] socket_mode).
    os.umask(os.umask(app.PRIVATE_UMASK) | app.PRIVATE_UMASK)
    # absolute: the embedded PostgreSQL's tools run from / and would misread a relative path
    data_dir = Path(args.data_dir or config.store.data_dir or paths.default_data_dir()).absolute()
    socket_path = Path(args.socket or config.server.socket or paths.default_socket()).absolute()
    try:
        return anyio.run(
            lambda: app.serve(config, data_dir=data_dir, socket_path=socket_path),
            backend="asyncio",
            backend_options={"use_uvloop": True},  # asyncio on libuv: the same code, less CPU per request
        )
    except Exception as exc:
        cause = app.startup_error(exc)
        if cause is None:
            raise
        print(f"recalld: {type(cause).__name__}: {cause}", file=sys.stderr)
        return EXIT_FAIL


def _attributes(pairs: Sequence[str]) -> dict[str, Any]:
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


def cmd_put(client: Client, args: argparse.Namespace) -> int:
    try:
        body = Path(args.body_file).read_text(encoding="utf-8") if args.body_file else (args.body or "")
    except (OSError, UnicodeDecodeError) as exc:
        print(f"recalld: cannot read --body-file {args.body_file}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    record: dict[str, Any] = {
        "namespace": args.namespace,
        "kind": args.kind,
        "title": args.title,
        "body": body,
        "attributes": _attributes(args.attr),
    }
    if args.source_path:
        record["source_path"] = args.source_path
    if args.id:
        answer = client.request("PUT", f"/v1/records/{quote(args.id, safe='')}", record)
    else:
        answer = client.request("POST", "/v1/records", record)
    if args.json:
        print_json(answer)
    else:
        print(shown(cli_text.written_line(answer, created=not args.id)))
    return EXIT_OK


def cmd_get(client: Client, args: argparse.Namespace) -> int:
    print_json(client.request("GET", f"/v1/records/{quote(args.id, safe='')}"))
    return EXIT_OK


def cmd_forget(client: Client, args: argparse.Namespace) -> int:
    print_json(client.request("DELETE", f"/v1/records/{quote(args.id, safe='')}"))
    return EXIT_OK


def cmd_recall(client: Client, args: argparse.Namespace) -> int:
    request: dict[str, Any] = {"namespace": args.namespace, "query": args.query, "k": args.k}
    if args.route:
        request["routes"] = args.route
    if args.kind:
        request["kinds"] = args.kind
    if args.attr:
        request["attributes"] = _attributes(args.attr)
    if args.min_similarity is not None:
        request["thresholds"] = {"vector": args.min_similarity}
    answer = client.request("POST", "/v1/recall", request)
    if args.json:
        print_json(answer)
        return EXIT_OK
    return cli_text.cmd_recall_text(client, args, answer, shown=shown, fusion=answer["fusion"]["name"])


def cmd_usage(client: Client, args: argparse.Namespace) -> int:
    params = {k: v for k, v in (("namespace", args.namespace), ("since", args.since)) if v}
    answer = client.request("GET", "/v1/usage", params=params)
    if args.json:
        print_json(answer)
        return EXIT_OK
    print(f"{'namespace':<24} {'purpose':<8} {'provider':<8} {'calls':>7} {'tokens':>10} {'cost (µ)':>10}")
    for row in answer["usage"] + answer["system"]:
        # the daemon's own work (the start-up probe) served no namespace
        name = "(system)" if row["namespace"] is None else shown(row["namespace"])
        print(
            f"{name:<24} {row['purpose']:<8} {row['provider']:<8} {row['calls']:>7} "
            f"{row['input_tokens']:>10} {row['cost_micros']:>10}"
        )
    totals = answer["totals"]
    print(f"client totals: {totals['calls']} calls, {totals['input_tokens']} tokens, {totals['cost_micros']} µ")
    return EXIT_OK


def cmd_generations(client: Client, args: argparse.Namespace) -> int:
    if args.activate:
        print_json(client.request("POST", f"/admin/generations/{quote(args.activate, safe='')}/activate", {}))
        return EXIT_OK
    if args.rebuild:
        build_id = client.request("POST", "/admin/generations/rebuild", {})["build_id"]
        print(f"rebuild {build_id} queued", file=sys.stderr)
        while args.wait:
            build = next(b for b in client.request("GET", "/v1/generations")["builds"] if b["id"] == build_id)
            print(f"\rbuild {build_id}: {build['state']} {build['done']}/{build['total']}", end="", file=sys.stderr)
            if build["state"] in ("done", "failed", "skipped"):
                print(file=sys.stderr)
                return EXIT_OK if build["state"] == "done" else EXIT_FAIL
            time.sleep(0.5)
        return EXIT_OK
    # with a namespace, `pending` counts that namespace's records alone
    params = {"namespace": args.namespace} if args.namespace else None
    answer = client.request("GET", "/v1/generations", params=params)
    if args.json:
        print_json(answer)
        return EXIT_OK
    for row in answer["generations"]:
        mark = "*" if row["current"] else ("<" if row["id"] == answer["previous"] else " ")
        count = "?" if row["count"] is None else row["count"]  # a generation this daemon has not loaded
        print(f"{mark} {row['id']}  {count:>8} vectors  {row['index_type']:<8} {row['built_at']}")
    print(f"pending: {answer['pending']}" + (f" in {shown(args.namespace)}" if args.namespace else ""))
    for build in answer["builds"][:5]:
        # progress counts span every namespace: shown to those who may read them all
        progress = f" {build['done']}/{build['total']}" if "total" in build else ""
        print(f"build {build['id']}: {build['state']}{progress} {build.get('error') or ''}")
    return EXIT_OK


def cmd_stats(client: Client, args: argparse.Namespace) -> int:
    answer = client.request("GET", "/v1/stats", params={"namespace": args.namespace, "k": str(args.k)})
    if args.json:
        print_json(answer)
        return EXIT_OK
    precision = answer["precision_at_k"]
    print(
        f"namespace {shown(answer['namespace'])}: {answer['searches']} searches, "
        f"{answer['degraded_searches']} degraded, {answer['empty_searches']} empty"
    )
    figure = "n/a (no feedback yet)" if precision is None else f"{precision:.3f}"
    print(
        f"precision@{answer['k']}: {figure} ({answer['useful_at_k']} useful of {answer['judged_at_k']} judged, "
        f"{answer['searches_with_feedback']} searches with feedback)"
    )
    distribution = answer["useful_rank_distribution"]
    if distribution:
        top = max(distribution.values())
        print("rank of useful results:")
        for rank, count in sorted(distribution.items(), key=lambda item: int(item[0])):
            print(f"  {int(rank):>3} {'#' * max(1, round(30 * count / top))} {count}")
    return EXIT_OK


def cmd_disputes(client: Client, args: argparse.Namespace) -> int:
    return disputes_cli.cmd_disputes(client, args, shown=shown, print_json=print_json)


def cmd_observe(client: Client, args: argparse.Namespace) -> int:
    return assignments_cli.cmd_observe(client, args, shown=shown, print_json=print_json)


def cmd_assignments(client: Client, args: argparse.Namespace) -> int:
    return assignments_cli.cmd_assignments(client, args, shown=shown, print_json=print_json)


def cmd_dupes(client: Client, args: argparse.Namespace) -> int:
    return duplicates_cli.cmd_dupes(client, args, shown=shown, print_json=print_json)


def build_parser() -> argparse.ArgumentParser:
    parser = cli_usage.Parser(prog="recalld", description=__doc__)
    parser.add_argument("--socket", help="control socket (default: $RECALLD_SOCKET, then the runtime dir)")
    # the subcommands' parsers are cli_usage.Parser too (argparse makes them of the parent's class)
    sub = cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]", parser.add_subparsers(dest="command", required=True)
    )

    serve = sub.add_parser("serve", help="run the daemon")
    serve.add_argument(
        "--config", help="TOML config file (default: $RECALLD_CONFIG, then built-in defaults, see config/recalld.toml)"
    )
    serve.add_argument("--data-dir", help="state directory (embedded PostgreSQL, generations)")
    serve.add_argument("--socket", dest="socket", default=argparse.SUPPRESS, help="control socket path")

    health = sub.add_parser("health", help="exit 0 when live (with --ready: ready), 1 otherwise")
    health.add_argument("--ready", action="store_true")

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

    recall = sub.add_parser("recall", help="ask a question")
    recall.add_argument("query")
    recall.add_argument("--namespace", "-n", default="default")
    recall.add_argument("-k", type=int, default=10)
    recall.add_argument("--route", action="append", choices=["fts", "vector", "structured"])
    recall.add_argument("--kind", action="append")
    recall.add_argument("--attr", action="append", default=[], metavar="KEY=VALUE")
    recall.add_argument(
        "--min-similarity", type=float, metavar="COSINE", help="drop vector candidates less similar than this (-1 to 1)"
    )
    recall.add_argument("--json", action="store_true", help="print the raw answer")

    ingest_cli.add_arguments(sub.add_parser("ingest", help="index a folder of text and markdown files"))
    stats = sub.add_parser("stats", help="recall quality of a namespace: precision@k from feedback, ranks")
    stats.add_argument("--namespace", "-n", required=True)
    stats.add_argument("-k", type=int, default=10)
    stats.add_argument("--json", action="store_true")

    usage = sub.add_parser("usage", help="embedding usage per namespace and purpose")
    usage.add_argument("--namespace", "-n")
    usage.add_argument("--since", help="RFC 3339 timestamp")
    usage.add_argument("--json", action="store_true")

    generations = sub.add_parser("generations", help="vector index generations, builds and rollback")
    generations.add_argument("--rebuild", action="store_true", help="build a new generation now")
    generations.add_argument("--wait", action="store_true", help="with --rebuild: show progress until done")
    generations.add_argument("--activate", metavar="ID", help="make an earlier verified generation current")
    generations.add_argument("--namespace", "-n", help="count pending records of this namespace only")
    generations.add_argument("--json", action="store_true")
    backup_cli.add_commands(sub)
    duplicates_cli.add_commands(sub)
    add_eval_parser(sub)
    assignments_cli.add_commands(sub)
    disputes_cli.add_commands(sub)
    cli_text.add_feedback_parser(sub)
    mcp_cli.add_parser(sub)
    cli_text.finish_parser(parser, sub)
    return parser


_CLIENT_COMMANDS = {
    "usage": cmd_usage,
    "stats": cmd_stats,
    "generations": cmd_generations,
    "put": cmd_put,
    "get": cmd_get,
    "forget": cmd_forget,
    "recall": cmd_recall,
    "ingest": ingest_cli.cmd_ingest,
    "health": lambda client, args: cli_text.cmd_health(client, args, shown=shown, print_json=print_json),
    "feedback": lambda client, args: cli_text.cmd_feedback(client, args, print_json=print_json),
    "eval": lambda client, args: cmd_eval(client, args, show=lambda text: shown(text, keep="\n")),
    "backup": backup_cli.cmd_backup,
    "disputes": cmd_disputes,
    "observe": cmd_observe,
    "assignments": cmd_assignments,
    "dupes": cmd_dupes,
}


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(given)
    except cli_usage.UsageError as error:
        return cli_usage.report(parser, error, given)
    if args.command == "serve":
        return cmd_serve(args)
    if args.command == "restore":  # the daemon is stopped: no socket to talk to
        return backup_cli.cmd_restore(args)
    if args.command == "mcp":  # a server of its own on stdio, with its own client
        return mcp_cli.cmd_mcp(args)
    if args.command == "calibrate":  # the model runs here: no daemon needed
        return duplicates_cli.cmd_calibrate(args, shown=shown)
    socket = paths.client_socket(args.socket)
    client = Client(socket)
    try:
        return _CLIENT_COMMANDS[args.command](client, args)
    except ClientError as exc:
        print(f"recalld: {shown(cli_text.error_line(exc))}", file=sys.stderr)
        return EXIT_FAIL
    except BrokenPipeError:
        raise  # our reader left (`| head`), not the daemon: recalld.cli ends quietly
    except ConnectionError as exc:
        print(f"recalld: {shown(str(exc))}", file=sys.stderr)
        print(shown(cli_text.not_reachable_advice(socket, args.socket)), file=sys.stderr)
        return EXIT_FAIL
    except UnicodeEncodeError:
        # an argument that is not valid UTF-8 (Python keeps its bytes as surrogates)
        print("recalld: arguments must be valid UTF-8", file=sys.stderr)
        return EXIT_USAGE
    finally:
        client.close()


if __name__ == "__main__":
    sys.exit(main())
