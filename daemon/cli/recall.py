"""`recalld recall` asks a question; `recalld feedback` says whether one of its results helped
(what `recalld stats` counts). The text shows, for each result, the routes that found it and
its snippet; `--json` the daemon's answer."""

from __future__ import annotations

import argparse
import textwrap

import msgspec

from recalld.cli.connected import connected
from recalld.cli.output import EXIT_FAIL, EXIT_OK, EXIT_USAGE, Output, shown
from recalld.cli.parser import Subparsers, attributes
from recalld.client import Client, ClientError
from recalld.wire.recall import ROUTES, RecallHit, RecallResponse

SNIPPET_WIDTH = 100


def register(sub: Subparsers) -> None:
    recall = sub.add_parser("recall", help="ask a question")
    recall.add_argument("query")
    recall.add_argument("--namespace", "-n", default="default")
    recall.add_argument("-k", type=int, default=10)
    recall.add_argument("--route", action="append", choices=list(ROUTES))
    recall.add_argument("--kind", action="append")
    recall.add_argument("--attr", action="append", default=[], metavar="KEY=VALUE")
    recall.add_argument(
        "--min-similarity", type=float, metavar="COSINE", help="drop vector candidates less similar than this (-1 to 1)"
    )
    recall.add_argument("--json", action="store_true", help="print the raw answer")
    feedback = sub.add_parser("feedback", help="say whether a result of a recall was useful (feeds `stats`)")
    feedback.add_argument("search_id", help="the recall's search id (printed by `recalld recall`)")
    feedback.add_argument("record_id", help="the result's record id")
    judged = feedback.add_mutually_exclusive_group(required=True)
    judged.add_argument("--useful", dest="useful", action="store_true")
    judged.add_argument("--not-useful", dest="useful", action="store_false")
    feedback.add_argument("--json", action="store_true", help="print the daemon's answer as JSON")


def run(args: argparse.Namespace, out: Output) -> int:
    return connected(args, out, _recall if args.command == "recall" else _feedback)


def _recall(client: Client, args: argparse.Namespace, out: Output) -> int:
    answer = client.recall(
        args.namespace,
        args.query,
        k=args.k,
        routes=args.route,
        kinds=args.kind,
        attributes=attributes(args.attr) if args.attr else None,
        thresholds=None if args.min_similarity is None else {"vector": args.min_similarity},
    )
    if args.json:
        out.json(msgspec.to_builtins(answer))
        return EXIT_OK
    return _text(client, args, answer, out)


def _text(client: Client, args: argparse.Namespace, answer: RecallResponse, out: Output) -> int:
    """The text of a recall's answer; exit 1 when the namespace has no records at all."""
    if answer.results:
        out.print(f"fused by {answer.fusion.name}; for each result the routes that found it, at their ranks")
    for rank, hit in enumerate(answer.results, start=1):
        out.print("\n".join(hit_lines(rank, hit)))
    for degraded in answer.degraded_routes:
        detail = f": {degraded.message}" if degraded.message else ""
        out.err(shown(f"degraded: {degraded.route} ({degraded.reason}){detail}"))
    if answer.results:
        search = answer.search_id
        out.print(f"search {search}: `recalld feedback {search} RESULT_ID --useful` says which result helped")
        return EXIT_OK
    message, namespace_empty = _why_empty(client, args.namespace)
    out.err(message)
    return EXIT_FAIL if namespace_empty else EXIT_OK


def hit_lines(rank: int, hit: RecallHit) -> list[str]:
    """A result: rank, fused score, title, where it is; then the routes that found it (at their
    ranks, the vector route with its cosine similarity) and its snippet."""
    where = hit.source_path or hit.id
    lines = [f"{rank:>3}. {shown(hit.title)}  ({shown(str(where))})"]
    scores = hit.route_scores
    found = ", ".join(
        f"{route} #{position}" + (f" cos {scores['vector']:.2f}" if route == "vector" and "vector" in scores else "")
        for route, position in hit.routes.items()
    )
    lines.append(f"     score {hit.score:.4f} from {found}; id {hit.id}")
    # full text marks the matched words with <b>...</b> (ts_headline's default); plain text here
    snippet = " ".join((hit.snippet or "").replace("<b>", "").replace("</b>", "").split())
    if snippet:
        lines += textwrap.wrap(shown(snippet), SNIPPET_WIDTH, initial_indent="     ", subsequent_indent="     ")
    return lines


def _why_empty(client: Client, namespace: str) -> tuple[str, bool]:
    """Why a recall found nothing, and whether it is because the namespace holds no records
    (misspelled?) rather than none matched."""
    try:
        listed = client.list_records(namespace, limit=1)
    except ClientError:
        return "no results", False
    if not listed["records"]:
        return shown(f"no results: namespace {namespace!r} has no records (is it spelled right?)"), True
    return "no results: nothing in the namespace matched", False


def _feedback(client: Client, args: argparse.Namespace, out: Output) -> int:
    try:
        answer = client.feedback(args.search_id, args.record_id, useful=args.useful)
    except ValueError:
        out.err("recalld: the search id and the record id must be UUIDs")
        return EXIT_USAGE
    if args.json:
        out.json(answer)
    else:
        out.print(f"noted: result {args.record_id} was {'useful' if args.useful else 'not useful'}")
    return EXIT_OK
