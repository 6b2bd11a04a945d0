"""What `recalld eval` prints: the table per route and kind, the floor's verdict, the misses with
what came first, and the same as JSON (`--json`), whose shape is stable (docs/EVAL.md)."""

from __future__ import annotations

from typing import Any

from recalld.actors.recall.metrics import ALL, HIT_AT, RANK_AT
from recalld.eval.floor import MEASURE, Acceptance, Judgement
from recalld.eval.run import EvalRun

JSON_VERSION = 1
"""Bumped when a field of `--json` changes meaning or goes; new fields do not bump it."""


def as_json(run: EvalRun, judgement: Judgement | None, acceptance: Acceptance | None) -> dict[str, Any]:
    golden = run.golden
    scores = run.scores()
    return {
        "version": JSON_VERSION,
        "golden": {
            "name": golden.name,
            "description": golden.description,
            "source": str(golden.source),
            "corpus": str(golden.corpus),
            "files": len(golden.files),
            "questions": len(golden.questions),
            "kinds": {kind: sum(q.kind == kind for q in golden.questions) for kind in golden.kinds},
        },
        "namespace": run.namespace,
        "kept": run.forgotten is None,
        "space": {
            "provider": run.space.provider,
            "model": run.space.model,
            "dimension": run.space.dimension,
            "template_version": run.space.template_version,
            "key": run.space.key,
            "space_id": run.space_id,
        },
        "started_at": run.started_at.isoformat().replace("+00:00", "Z"),
        "duration_s": round(run.duration_s, 1),
        "index_wait_s": round(run.index_wait_s, 1),
        "ingest": {
            "created": run.ingest.created,
            "updated": run.ingest.updated,
            "unchanged": run.ingest.unchanged,
            "failed": len(run.ingest.failed),
            "skipped": [{"file": name, "why": why} for name, why in run.skipped_files()],
            "unanswerable": run.unanswerable(),
        },
        "routes": {
            route: {
                "kinds": {kind: figures.figures() for kind, figures in scores[route].items()},
                "latency_ms": r.latency(),
                "fusion": r.fusion if route == "fused" else None,
                "degraded": len(r.degraded),
            }
            for route, r in run.runs.items()
        },
        "floor": floor_json(run, judgement, acceptance),
        "misses": {route: run.misses(route) for route in run.runs},
        "passed": passed(run, judgement),
    }


def floor_json(run: EvalRun, judgement: Judgement | None, acceptance: Acceptance | None) -> dict[str, Any]:
    out: dict[str, Any] = {"measure": MEASURE, "path": str(run.golden.floor_path), "space": run.space.key}
    if judgement is None:
        return out | {"verdict": None, "count": None, "of": None, "floor": None, "accepted": None}
    floor = judgement.floor
    return out | {
        "verdict": str(judgement.verdict),
        "count": judgement.count,
        "of": judgement.of,
        "floor": None if floor is None else {"count": floor.count, "of": floor.of, "accepted_at": floor.accepted_at},
        "accepted": None if acceptance is None else str(acceptance),
    }


def passed(run: EvalRun, judgement: Judgement | None) -> bool:
    """Whether the exit status is 0: no route degraded, and fused at or above its floor."""
    return not run.degraded() and (judgement is None or judgement.passed)


def text(run: EvalRun, judgement: Judgement | None, acceptance: Acceptance | None, *, misses: int = 20) -> str:
    """The report for a terminal; `recalld eval` passes it through the CLI's `shown`, since
    titles and paths come from files and records and could carry control characters."""
    golden = run.golden
    scores = run.scores()
    kinds = [*golden.kinds, ALL]
    lines = [
        f"golden set {golden.name}: {len(golden.questions)} questions over {len(golden.files)} files "
        f"({golden.description})",
        f"namespace {run.namespace} ({'kept' if run.forgotten is None else f'{run.forgotten} records forgotten'}), "
        f"vector space {run.space.key}",
        f"took {run.duration_s:.0f} s, {run.index_wait_s:.0f} s of it waiting for the vector route",
        *_skipped_lines(run),
        "",
        f"{'route':<8} {'kind':<14} {'hit@' + str(HIT_AT):>9} {'MRR@' + str(RANK_AT):>7} "
        f"{'recall@' + str(RANK_AT):>9} {'nDCG@' + str(RANK_AT):>8} {'p50 ms':>7}",
    ]
    for route, run_ in run.runs.items():
        for kind in kinds:
            s = scores[route].get(kind)
            if s is None or not s.of:
                continue
            latency = run_.latency().get("p50", 0.0) if kind == ALL else None
            lines.append(
                f"{route:<8} {kind[:14]:<14} {f'{s.hits}/{s.of}':>9} {s.mrr:>7.3f} {s.recall_at_10:>9.3f} "
                f"{s.ndcg_at_10:>8.3f} {'' if latency is None else f'{latency:.0f}':>7}"
            )
    lines.append("")
    for route, qid, why in run.degraded()[:10]:
        lines.append(f"DEGRADED: {route} for {qid}: {why} (the figures are not the space's)")
    if judgement is not None:
        lines.append(f"floor ({MEASURE}): {judgement.line()}")
        if acceptance is not None:
            lines.append(_acceptance_line(acceptance, golden.floor_path))
    else:
        lines.append("floor: not judged (the fused route was not run)")
    shown_route = "fused" if "fused" in run.runs else next(iter(run.runs), None)
    if shown_route is not None and misses:
        missed = run.misses(shown_route)
        lines += ["", f"misses of {shown_route} ({len(missed)}; expected file, then what came first):"]
        for miss in missed[:misses]:
            rank = f"rank {miss['rank']}" if miss["rank"] else f"not in the top {RANK_AT}"
            lines.append(f"  {miss['id']} [{miss['kind']}] {miss['question']!r}: {miss['expected'][0]} {rank}")
            lines.append(f"      first: {', '.join(miss['first']) or '(nothing)'}")
        if len(missed) > misses:
            lines.append(f"  ... and {len(missed) - misses} more (--json lists every route's)")
    return "\n".join(lines)


def _skipped_lines(run: EvalRun) -> list[str]:
    """The corpus files left out (`--allow-skipped`), every one, and the questions they leave
    unanswerable."""
    skipped = run.skipped_files()
    if not skipped:
        return []
    lines = [f"{len(skipped)} corpus files skipped (--allow-skipped): the figures are of the rest"]
    lines += [f"  skipped {name}: {why}" for name, why in skipped]
    unanswerable = run.unanswerable()
    if unanswerable:
        lines.append(f"  questions that expect only skipped files, counted as misses: {', '.join(unanswerable)}")
    return lines


def _acceptance_line(acceptance: Acceptance, path: object) -> str:
    return {
        Acceptance.FIRST: f"--accept: the first floor of this space, written to {path}",
        Acceptance.RAISED: f"--accept: the floor raised to today's count in {path}",
        Acceptance.UNCHANGED: "--accept: today's count is the floor already; nothing written",
        Acceptance.REFUSED: "--accept REFUSED: a floor is never lowered; edit the file by hand if you mean it",
    }[acceptance]
