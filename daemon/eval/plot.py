"""`recalld eval --plot FILE`: the run as a PNG a person reads at a glance. Two panels: hit@5 per
route and kind (as a share, each bar labelled with its count), with the fused floor marked on
the fused `all` bar, and MRR@10 the same way.

matplotlib is an optional dependency (`pip install 'recalld[plot]'`): only this command needs it,
and the daemon never imports it.
"""

from __future__ import annotations

from pathlib import Path

from recalld.actors.recall.metrics import ALL, Score
from recalld.eval.floor import Judgement
from recalld.eval.run import EvalRun

COLOURS = {"fts": "#8c8c8c", "vector": "#4c72b0", "fused": "#dd8452"}


class PlotUnavailable(Exception):
    """matplotlib is not installed."""


def _hit_share(s: Score) -> float:
    return s.hits / s.of if s.of else 0.0


def _mrr(s: Score) -> float:
    return s.mrr


def write_png(run: EvalRun, judgement: Judgement | None, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display, no GUI toolkit
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotUnavailable("--plot needs matplotlib: pip install 'recalld[plot]'") from None

    scores = run.scores()
    kinds = [*run.golden.kinds, ALL]
    routes = list(run.runs)
    width = 0.8 / max(1, len(routes))
    figure, (hits_axis, mrr_axis) = plt.subplots(1, 2, figsize=(5 + 1.6 * len(kinds), 4.8), dpi=110)
    for axis, title, value in ((hits_axis, "hit@5 (count of questions)", _hit_share), (mrr_axis, "MRR@10", _mrr)):
        for i, route in enumerate(routes):
            xs = [k + (i - (len(routes) - 1) / 2) * width for k in range(len(kinds))]
            cells: list[Score] = [scores[route].get(kind, Score()) for kind in kinds]
            bars = axis.bar(xs, [value(s) for s in cells], width, label=route, color=COLOURS.get(route))
            labels = [f"{s.hits}/{s.of}" if axis is hits_axis else f"{s.mrr:.2f}" for s in cells]
            axis.bar_label(bars, labels=labels, fontsize=7, padding=2)
        axis.set_xticks(range(len(kinds)), [f"{k}\n({scores[routes[0]].get(k, Score()).of})" for k in kinds])
        axis.set_ylim(0, 1.12)
        axis.set_title(title)
        axis.grid(axis="y", alpha=0.3)
    if judgement is not None and judgement.floor is not None and "fused" in routes:
        floor = judgement.floor
        x = len(kinds) - 1 + (routes.index("fused") - (len(routes) - 1) / 2) * width
        level = floor.count / judgement.of if judgement.of else 0.0
        hits_axis.hlines(level, x - width / 2 - 0.05, x + width / 2 + 0.05, colors="#c44e52", linewidth=2.5)
        verdict = "BELOW" if not judgement.passed else "floor"
        hits_axis.annotate(
            f"{verdict} {floor.count}/{floor.of}",
            (x, level),
            xytext=(0, -16 if level > 0.9 else 14),
            textcoords="offset points",
            ha="center",
            fontsize=8,
            color="#c44e52",
            fontweight="bold",
            bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.85},
        )
    hits_axis.legend(loc="lower left", fontsize=8)
    figure.suptitle(f"{run.golden.name}: {len(run.golden.questions)} questions, {run.space.model}", fontsize=10)
    figure.text(0.5, 0.005, f"{run.space.key} · {run.started_at:%Y-%m-%d %H:%M} UTC", ha="center", fontsize=7)
    figure.tight_layout(rect=(0, 0.03, 1, 0.97))
    figure.savefig(path, format="png")
    plt.close(figure)
