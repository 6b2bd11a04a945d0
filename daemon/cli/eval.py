"""`recalld eval GOLDEN`: the command's options, its run and its exit status (docs/EVAL.md).

Exit status: 0 when every route answered whole and the fused count is at or above the floor of
today's vector space (or the space has none); 1 below the floor, on a degraded route, or when
the daemon could not run the eval; 2 when the golden set or its floor file is not usable.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path
from typing import Any

from recalld.cli.connected import connected
from recalld.cli.output import EXIT_FAIL, EXIT_OK, EXIT_USAGE, Output, shown
from recalld.cli.parser import Subparsers
from recalld.client import Client, ClientError
from recalld.eval import floor as floors
from recalld.eval.golden import GoldenSetError, load
from recalld.eval.report import as_json, passed, text
from recalld.eval.run import ROUTES, EvalError, EvalRun, evaluate


def register(sub: Subparsers) -> None:
    parser = sub.add_parser(
        "eval",
        help="measure recall on a golden set (hit@5, MRR@10, recall@10, nDCG@10) against its floor",
        description="Ingest a golden set's corpus into a fresh namespace, ask its questions per route "
        "and fused, report per kind, and fail below the floor of today's vector space.",
    )
    parser.add_argument("golden", nargs="?", help="a golden set folder or TOML file (see docs/EVAL.md)")
    parser.add_argument(
        "--routes", default=",".join(ROUTES), help=f"comma-separated, of {', '.join(ROUTES)} (default: all)"
    )
    parser.add_argument("--accept", action="store_true", help="raise the floor to today's fused count (never lowers)")
    parser.add_argument("--json", action="store_true", help="print the run as JSON")
    parser.add_argument("--plot", metavar="FILE", help="write a PNG of the figures, the floor marked")
    parser.add_argument("--keep", action="store_true", help="keep the eval's namespace instead of forgetting it")
    parser.add_argument(
        "--namespace", help="evaluate in this namespace (kept; files already there unchanged are not embedded again)"
    )
    parser.add_argument("--corpus", help="the corpus folder, instead of where the golden set says")
    parser.add_argument("--misses", type=int, default=20, metavar="N", help="misses to print (default 20)")
    parser.add_argument(
        "--allow-skipped",
        action="store_true",
        help="go on when ingest skips corpus files (listed in the report; their questions count as misses)",
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bars")
    parser.add_argument(
        "--history", action="store_true", help="list the recorded runs (of GOLDEN's set when given) instead"
    )


def run(args: argparse.Namespace, out: Output) -> int:
    return connected(args, out, _eval)


def _show(text: str) -> str:
    """Titles and paths in the report come from files and records: control characters escaped,
    its lines kept."""
    return shown(text, keep="\n")


def _eval(client: Client, args: argparse.Namespace, out: Output) -> int:
    if args.history:
        return history(client, args, out)
    if not args.golden:
        out.err("recalld eval: name a golden set (or --history)")
        return EXIT_USAGE
    routes = [r.strip() for r in args.routes.split(",") if r.strip()]
    unknown = [r for r in routes if r not in ROUTES]
    if unknown or not routes:
        out.err(f"recalld eval: --routes takes {', '.join(ROUTES)}, not {args.routes!r}")
        return EXIT_USAGE
    if args.accept and "fused" not in routes:
        out.err("recalld eval: --accept needs the fused route: the floor is its count")
        return EXIT_USAGE
    try:
        golden = load(Path(args.golden), corpus=Path(args.corpus) if args.corpus else None)
        known = floors.read(golden.floor_path)
    except (GoldenSetError, floors.FloorFileError) as exc:
        out.err(f"recalld eval: {exc}")
        return EXIT_USAGE
    try:
        run = evaluate(
            client,
            golden,
            routes=routes,
            namespace=args.namespace,
            keep=args.keep,
            progress=not (args.quiet or args.json),
            allow_skipped=args.allow_skipped,
        )
    except EvalError as exc:
        out.err(f"recalld eval: {exc}")
        return EXIT_FAIL

    judgement = acceptance = None
    counted = run.count("fused")
    if counted is not None:
        count, of = counted
        judgement = floors.judge(known, run.space, count, of)
        if args.accept and not run.degraded():
            now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
            raised, acceptance = floors.accept(known, run.space, count, of, at=now)
            if acceptance in (floors.Acceptance.FIRST, floors.Acceptance.RAISED):
                floors.write(golden.floor_path, raised)
                judgement = floors.judge(raised, run.space, count, of)
    record(client, run, judgement, out)
    if args.plot:
        from recalld.eval.plot import PlotUnavailable, write_png

        try:
            write_png(run, judgement, Path(args.plot))
        except PlotUnavailable as exc:
            out.err(f"recalld eval: {exc}")
            return EXIT_USAGE
    if args.json:
        out.print(json.dumps(as_json(run, judgement, acceptance), indent=2, ensure_ascii=False))
    else:
        out.print(_show(text(run, judgement, acceptance, misses=args.misses)))
    return EXIT_OK if passed(run, judgement) else EXIT_FAIL


def record(client: Client, run: EvalRun, judgement: floors.Judgement | None, out: Output) -> None:
    """Keep the run in the daemon's eval history (`--history`); a daemon that cannot is said so,
    and the eval's own verdict stands."""
    scores = run.scores()
    body = {
        "golden": run.golden.name,
        "source": str(run.golden.source),
        "namespace": run.namespace,
        "space": {
            "provider": run.space.provider,
            "model": run.space.model,
            "dimension": run.space.dimension,
            "template_version": run.space.template_version,
        },
        "space_id": run.space_id,
        "questions": len(run.golden.questions),
        "count": None if judgement is None else judgement.count,
        "of": None if judgement is None else judgement.of,
        "floor": None if judgement is None or judgement.floor is None else judgement.floor.count,
        "verdict": None if judgement is None else str(judgement.verdict),
        "degraded": len(run.degraded()),
        "routes": {route: {kind: s.figures() for kind, s in by_kind.items()} for route, by_kind in scores.items()},
        "started_at": run.started_at.isoformat(),
        "duration_s": round(run.duration_s, 3),
    }
    try:
        client.record_eval(body)
    except ClientError as exc:
        out.err(f"recalld eval: the run was not recorded in the daemon's history: {exc}")


def history(client: Client, args: argparse.Namespace, out: Output) -> int:
    golden: str | None = None
    if args.golden:
        path = Path(args.golden)
        try:
            golden = load(path).name if path.exists() else args.golden
        except GoldenSetError:
            golden = path.stem
    answer = client.evals(golden=golden)
    if args.json:
        out.print(json.dumps(answer, indent=2, ensure_ascii=False))
        return EXIT_OK
    runs = answer["runs"]
    if not runs:
        out.print("no eval runs recorded" + (f" for {golden}" if golden is not None else ""))
        return EXIT_OK
    out.print(
        f"{'started (UTC)':<17} {'golden':<16} {'fused':>9} {'floor':>6} {'fts':>9} {'vector':>9} {'MRR':>6}  space"
    )
    for row in runs:
        routes = row["routes"]

        def hits(route: str, routes: dict[str, Any] = routes) -> str:
            figures = routes.get(route, {}).get("all")
            return f"{figures['hit_at_5']}/{figures['of']}" if figures else "-"

        mrr = routes.get("fused", {}).get("all", {}).get("mrr_at_10")
        space = row["space"]
        out.print(
            _show(
                f"{row['started_at'][:16].replace('T', ' '):<17} {row['golden'][:16]:<16} {hits('fused'):>9} "
                f"{'-' if row['floor'] is None else row['floor']:>6} {hits('fts'):>9} {hits('vector'):>9} "
                f"{'-' if mrr is None else f'{mrr:.3f}':>6}  "
                f"{space['provider']}:{space['model']}:{space['dimension']}:template-v{space['template_version']}"
                f"{'  ' + row['verdict'] if row['verdict'] else ''}",
            )
        )
    return EXIT_OK
