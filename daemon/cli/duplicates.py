"""The duplicate commands of `recalld` (docs/DUPLICATES.md):

- `recalld dupes -n NS [--kind K] [--json]`: a client of the daemon; the near-duplicate pairs of
  a namespace above the threshold, a page of records at a time, with progress on stderr; kinds
  the check leaves out (`[duplicates] unchecked_kinds`) are left out here too.
- `recalld calibrate PAIRS [--config PATH] [--json]`: no daemon needed; every labelled pair's
  score with the configured model and stages, and the threshold range that separates them.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from recalld.cli.connected import connected
from recalld.cli.output import EXIT_FAIL, EXIT_OK, EXIT_USAGE, Output, shown
from recalld.cli.parser import Subparsers
from recalld.client import Client

AUDIT_PAGE = 2000


def register(sub: Subparsers) -> None:
    dupes = sub.add_parser("dupes", help="near-duplicate record pairs of a namespace (titles above the threshold)")
    dupes.add_argument("--namespace", "-n", required=True)
    dupes.add_argument("--kind", help="only records of this kind (default: every kind, each against its own)")
    dupes.add_argument("--json", action="store_true", help="print the pairs as JSON")
    dupes.add_argument("--quiet", "-q", action="store_true", help="no progress")
    calibrate = sub.add_parser(
        "calibrate", help="score labelled title pairs with the configured model (no daemon needed)"
    )
    calibrate.add_argument("pairs", help="a pairs file (see tests/fixtures/duplicates/pairs.json)")
    calibrate.add_argument("--config", help="TOML config file (default: $RECALLD_CONFIG, then built-in defaults)")
    calibrate.add_argument("--json", action="store_true")


def run(args: argparse.Namespace, out: Output) -> int:
    if args.command == "calibrate":  # the model runs here: no daemon needed
        return _calibrate(args, out)
    return connected(args, out, _dupes)


def _dupes(client: Client, args: argparse.Namespace, out: Output) -> int:
    pairs: list[dict[str, Any]] = []
    after: str | None = None
    scanned = 0
    answer: dict[str, Any] = {}
    while True:
        answer = client.audit_duplicates(args.namespace, kind=args.kind or None, after=after or None, limit=AUDIT_PAGE)
        pairs += answer["pairs"]
        scanned += answer["scanned"]
        if not args.quiet:
            out.err(f"\rcompared {scanned} of {answer['of']} records, {len(pairs)} pairs", end="")
        after = answer["next"]
        if after is None:
            break
    if not args.quiet:
        out.err()
    pairs.sort(key=lambda p: -p["score"])
    if args.json:
        out.json(
            {
                "pairs": pairs,
                "threshold": answer["threshold"],
                "of": answer["of"],
                "compared": answer["compared"],
                "not_checked": answer.get("not_checked", 0),
                "unchecked_kinds": answer.get("unchecked_kinds", []),
            }
        )
        return EXIT_OK
    for pair in pairs:
        out.print(f"{pair['score']:.3f}  {pair['kind']}  {pair['a']['id']}  {shown(pair['a']['title'])}")
        out.print(f"{'':>7}{'':{len(pair['kind'])}}  {pair['b']['id']}  {shown(pair['b']['title'])}")
    missing = answer["of"] - answer["compared"]
    note = f" ({missing} records have no title vector yet and were not compared)" if missing else ""
    out.print(f"{len(pairs)} pairs at or above {answer['threshold']}{note}")
    if answer.get("not_checked"):
        kinds = ", ".join(shown(kind) for kind in answer["unchecked_kinds"])
        out.print(
            f"{answer['not_checked']} records of kinds not checked ({kinds}: [duplicates] unchecked_kinds) left out"
        )
    return EXIT_OK


def _calibrate(args: argparse.Namespace, out: Output) -> int:
    import anyio

    from recalld.actors.embedding.errors import EmbeddingError
    from recalld.config import ConfigError, load
    from recalld.services.duplicates_calibration import PairsError, calibrate, dumps, load_pairs

    try:
        config = load(args.config)
        pairs = load_pairs(Path(args.pairs))
        result = anyio.run(calibrate, pairs, config)
    except (ConfigError, PairsError) as exc:
        out.err(f"recalld calibrate: {exc}")
        return EXIT_USAGE
    except EmbeddingError as exc:
        out.err(f"recalld calibrate: the embedding provider failed: {exc}")
        return EXIT_FAIL
    if args.json:
        out.print(dumps(result))
        return EXIT_OK
    contrast = result.contrast
    out.print(
        f"model {result.model}, threshold {result.threshold} (inclusive), "
        f"contrast stage: penalty {contrast.penalty} at most {contrast.slot_words} words apart"
        f"{' or naming other numbers' if contrast.numbers else ''}"
        f"{f', titles in two languages {contrast.cross_language} higher' if contrast.cross_language else ''}"
    )
    out.print(f"{'score':>6} {'cosine':>6}  {'verdict':<7} {'expected':<8} {'':<12} set       pair")
    for p in sorted(result.pairs, key=lambda p: p.score):
        expected = "warn" if p.pair.duplicate else "clear"
        verdict = "warn" if p.warns else "clear"
        mark = "" if verdict == expected else ("MISSED" if p.pair.duplicate else "FALSE ALARM")
        held = "held-out" if p.pair.held_out else "tuned"
        out.print(
            f"{p.score:6.3f} {p.cosine:6.3f}  {verdict:<7} {expected:<8} {mark:<12} {held:<9} "
            f"{shown(p.pair.a)} | {shown(p.pair.b)}"
        )
    for name, held_out in (("tuned", False), ("held-out", True), ("all", None)):
        t = result.tally(held_out)
        out.print(
            f"{name:>8}: caught {t.caught} of {t.duplicates} duplicates ({t.caught / max(t.duplicates, 1):.0%}), "
            f"{t.false_alarms} false alarms of {t.distinct} distinct pairs ({t.false_alarms / max(t.distinct, 1):.0%})"
        )
    for label, span in (("scores", result.separating()), ("cosines", result.separating(staged=False))):
        if span is None:
            out.print(f"no threshold separates the pairs by their {label}")
        else:
            out.print(f"any threshold in ({span[0]}, {span[1]}] separates the pairs by their {label}")
    return EXIT_OK
