"""The tables `bench/writes.py` prints (and writes into docs/BENCHMARKS.md): what its rounds measured,
and how each figure is made from them."""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.lib.report import load_average, machine, percentile

KIND = "story"
"""A kind the duplicate check covers by default (`doc`, what `recalld ingest` writes, it does not)."""
SIDES = ("on", "off")


@dataclass
class Sample:
    """One side's creates at one writer count in one round."""

    latency_ms: list[float]
    wall_s: float
    load: float
    statuses: dict[str, int]
    partial: int = 0
    """Checks that compared fewer live titles than they found (`compared` < `of`)."""
    titles_embedded: float | None = None
    """Titles the check-on daemon's title model embedded during the creates (`titles_embedded`)."""

    @property
    def p50(self) -> float:
        return percentile(self.latency_ms, 50)

    @property
    def rate(self) -> float:
        return len(self.latency_ms) / self.wall_s


@dataclass
class Results:
    creates: dict[tuple[str, int], list[Sample]] = field(default_factory=dict)
    batch_s: dict[str, list[float]] = field(default_factory=dict)
    """Per side, the seconds per record of each round's batch."""
    batch_statuses: dict[str, dict[str, int]] = field(default_factory=dict)
    idle: dict[str, list[Sample]] = field(default_factory=dict)
    """Per side, single creates each made once the daemon had embedded everything before it."""
    cpu: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    """Per side, each round's one-writer creates: CPU seconds a create by process, its indexing
    included (`cpu_use`)."""
    profile: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    """With indexing running and idle: the check-on daemon's seconds and counts per check stage
    (`recalld_duplicate_check_stage_seconds`, and `check` for the whole check) over those creates."""


def ratio(ons: Sequence[float], offs: Sequence[float]) -> float:
    """The median of the rounds' own ratios."""
    return statistics.median(on / off for on, off in zip(ons, offs, strict=True))


def spread(samples: Sequence[Sample]) -> str:
    """The range of the 1-minute load average at the end of these samples."""
    loads = [sample.load for sample in samples]
    return f"{min(loads):.1f}–{max(loads):.1f}"


def report(args: argparse.Namespace, results: Results, commit: str) -> list[str]:
    loads = [sample.load for samples in results.creates.values() for sample in samples]
    command = (
        f".venv/bin/python -m bench.writes --rounds {args.rounds} --creates {args.creates} "
        f"--writers {','.join(map(str, args.writers))} --batch {args.batch} --idle {args.idle}"
        + (" --indexing off" if args.indexing == "off" else "")
    )
    indexing = (
        "indexing on"
        if args.indexing == "on"
        else "indexing off (`RECALLD_EMBEDDING_PROVIDER=none`, `RECALLD_DUPLICATES_MODEL=use-multilingual-v3`:"
        " the check's own cost)"
    )
    lines = [
        "## Writes with the duplicate check and indexing",
        "",
        f"- Machine: {machine()}; load average (1 min) during the rounds {min(loads):.2f}–{max(loads):.2f}, "
        f"at the end {load_average()}.",
        f"- Command: `{command}` at `{commit}`.",
        f"- Two daemons, default config with {indexing}, check on and off (`RECALLD_DUPLICATES_ENABLED=false`); "
        f"{args.creates} creates a round per writer count, unique titles, kind `{KIND}`; {args.rounds} rounds, "
        "medians; a ratio is the median of the rounds' ratios.",
        "",
        "| writers | create p50 check on | p50 check off | creates/s on | creates/s off "
        "| p50 on / off | creates/s on / off | load average |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for writers in args.writers:
        on, off = results.creates[("on", writers)], results.creates[("off", writers)]
        p50_on, p50_off = [s.p50 for s in on], [s.p50 for s in off]
        rate_on, rate_off = [s.rate for s in on], [s.rate for s in off]
        lines.append(
            f"| {writers} | {statistics.median(p50_on):.1f} ms | {statistics.median(p50_off):.1f} ms "
            f"| {statistics.median(rate_on):.0f} | {statistics.median(rate_off):.0f} "
            f"| {ratio(p50_on, p50_off):.2f}× | {ratio(rate_on, rate_off):.0%} | {spread(on + off)} |"
        )
    single = {side: [s.wall_s / len(s.latency_ms) for s in results.creates[(side, 1)]] for side in SIDES}
    lines += [
        "",
        f"| check | {args.creates} single creates, per record | a batch of {args.batch}, per record "
        "| single / batch | the batch's checks |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for side in SIDES:
        checks = ", ".join(f"{k} {v}" for k, v in sorted(results.batch_statuses[side].items()))
        lines.append(
            f"| {side} | {statistics.median(single[side]) * 1000:.2f} ms "
            f"| {statistics.median(results.batch_s[side]) * 1000:.2f} ms "
            f"| {ratio(single[side], results.batch_s[side]):.1f}× | {checks} |"
        )
    lines += ["", *profile_table(results, args.indexing), "", *cpu_table(results)]
    statuses: dict[str, int] = {}
    for sample in results.creates[("on", 1)] + results.creates[("on", max(args.writers))]:
        for status, count in sample.statuses.items():
            statuses[status] = statuses.get(status, 0) + count
    lines += ["", "Checks of the creates with the check on: " + ", ".join(f"{k} {v}" for k, v in statuses.items())]
    lines += ["", *embedded_lines(args, results)]
    return lines


def embedded_lines(args: argparse.Namespace, results: Results) -> list[str]:
    """Per writer count: titles the title model embedded per create, and the checks that compared
    fewer live titles than they found (those written beside them, before they had a vector)."""
    lines = ["| writers | titles embedded per create, check on | checks that compared fewer titles than they found |"]
    lines.append("| ---: | ---: | ---: |")
    for writers in args.writers:
        on = results.creates[("on", writers)]
        per_create = statistics.median((s.titles_embedded or 0.0) / len(s.latency_ms) for s in on)
        partial = sum(s.partial for s in on)
        lines.append(f"| {writers} | {per_create:.2f} | {partial} of {sum(len(s.latency_ms) for s in on)} |")
    return lines


STAGES = {
    "titles": "the kind's live titles: what changed since the last check, from PostgreSQL",
    "vectors": "their stored vectors not read yet",
    "embed": "the title's vector: waiting for the call made while the record was written",
    "store": "the new vectors handed over, to be stored after the answer",
    "compare": "the comparison with every live title",
    "similar": "the titles of those found similar",
}


def cpu_table(results: Results) -> list[str]:
    """CPU per create by process, one writer, indexing included, check on and off."""
    names = list(results.cpu["on"][0])

    def median_ms(side: str, name: str | None) -> float:
        per_round = [sum(cpu.values()) if name is None else cpu[name] for cpu in results.cpu[side]]
        return 1000 * statistics.median(per_round)

    lines = [
        "CPU per create, one writer (medians of the rounds; from /proc, between the start of the creates "
        "and the daemon having embedded them: their indexing included):",
        "",
        "| | check on | check off |",
        "| --- | ---: | ---: |",
    ]
    for name in [*names, None]:
        lines.append(f"| {name or 'all'} | {median_ms('on', name):.2f} ms | {median_ms('off', name):.2f} ms |")
    return lines


def profile_table(results: Results, indexing: str) -> list[str]:
    """Where a create's time goes with the check on, one writer, indexing running and idle
    (`indexing`: "off" when neither side indexes)."""
    conditions = ("indexing", "idle") if results.idle else ("indexing",)
    headings = {"indexing": "indexing running" if indexing == "on" else "indexing off", "idle": "indexing idle"}
    creates = {"indexing": results.creates[("on", 1)], "idle": results.idle.get("on", [])}
    offs = {"indexing": results.creates[("off", 1)], "idle": results.idle.get("off", [])}

    def mean_ms(condition: str, stage: str) -> float:
        seconds, count = results.profile[condition].get(stage, [0.0, 0.0])
        return 1000 * seconds / count if count else 0.0

    def mean_create(samples: Sequence[Sample]) -> float:
        return statistics.fmean(ms for sample in samples for ms in sample.latency_ms)

    lines = [
        "Where a create's time goes, check on, one writer (means over the creates, from the daemon's "
        "`recalld_duplicate_check_stage_seconds`; indexing idle: each create made once the daemon had "
        "embedded everything before it):",
        "",
        "| | " + " | ".join(headings[c] for c in conditions) + " |",
        "| --- |" + " ---: |" * len(conditions),
        "| create p50, check on / off | "
        + " | ".join(
            f"{statistics.median(s.p50 for s in creates[c]):.1f} / {statistics.median(s.p50 for s in offs[c]):.1f} ms"
            for c in conditions
        )
        + " |",
        "| create, mean | " + " | ".join(f"{mean_create(creates[c]):.2f} ms" for c in conditions) + " |",
        "| the check, mean | " + " | ".join(f"{mean_ms(c, 'check'):.2f} ms" for c in conditions) + " |",
    ]
    for stage, what in STAGES.items():
        lines.append(f"| — {stage}: {what} | " + " | ".join(f"{mean_ms(c, stage):.2f} ms" for c in conditions) + " |")
    lines.append(
        "| the rest: the write, the HTTP exchange | "
        + " | ".join(f"{mean_create(creates[c]) - mean_ms(c, 'check'):.2f} ms" for c in conditions)
        + " |"
    )
    return lines
