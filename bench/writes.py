"""Writes with every feature on: what the duplicate check costs a create while the index manager
embeds what was written, at 1 and 4 concurrent writers, and a batch's titles checked together
against the same titles created one by one.

Two daemons from this tree run side by side, each on a fresh data directory with the default
config (the local model, the index manager embedding every record written in the background):
one with the duplicate check on, one with it off (`RECALLD_DUPLICATES_ENABLED=false`). Records
with unique titles (the first words of man-page passages, the passage as body) are created in one
namespace and kind (`story`: a checked kind) through the socket. Rounds take turns: in each, for
each writer count, the two sides run one after the other, the order alternating, each starting
with both daemons caught up (no record waiting to be embedded, no build running), so that what a
side's writes compete with is its own indexing. Each round also sends `--batch` titles through
`POST /v1/records:batch` to each side, against the round's one-writer creates (one at a time).
Figures are medians over the rounds; ratios are medians of the rounds' own ratios. Where a
create's time goes comes from the daemon's `recalld_duplicate_check_stage_seconds`, and its CPU
by process (the daemon, its title model's process, its PostgreSQL) from /proc.

    .venv/bin/python -m bench.writes                       # 5 rounds of 100 creates: about 2 minutes
    .venv/bin/python -m bench.writes --rounds 9 --creates 200 --result writes
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import time
from collections.abc import Awaitable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.lib.corpus import build_corpus
from bench.lib.cpu import children_cpu_seconds, cpu_seconds, postgres_cpu_seconds
from bench.lib.daemon import start_fresh, stop_daemon
from bench.lib.report import add_result_option, commit, load_average, machine, percentile, progress, publish
from recalld.store.embedded import EmbeddedPostgres

NAMESPACE = "bench-writes"
KIND = "story"
"""A kind the duplicate check covers by default (`doc`, what `recalld ingest` writes, it does not)."""
SIDES = ("on", "off")
TITLE_WORDS = 9
SETTLE_S = 300.0
"""Longest a daemon may take to embed what the last round wrote before the bench gives up."""


@dataclass
class Sample:
    """One side's creates at one writer count in one round."""

    latency_ms: list[float]
    wall_s: float
    load: float
    statuses: dict[str, int]

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


def titled(count: int) -> list[dict[str, str]]:
    """`count` records whose titles are the first words of man-page passages, unique once
    normalised (as the exact-duplicate rule folds them), each with its passage as body."""
    records, seen = [], set()
    for passage in build_corpus(count * 2, 5)["records"]:
        title = " ".join(passage["body"].split()[:TITLE_WORDS])
        folded = re.sub(r"\W+", " ", title.casefold()).strip()
        if len(folded) < 12 or folded in seen:
            continue
        seen.add(folded)
        records.append({"title": title, "body": passage["body"]})
        if len(records) == count:
            return records
    raise SystemExit(f"only {len(records)} unique titles among the man-page passages")


def status_of(answer: dict[str, Any]) -> str:
    check = answer.get("duplicate_check") or {}
    status = str(check.get("status", "none"))
    return f"{status} ({check['reason']})" if check.get("reason") else status


async def settle(session: aiohttp.ClientSession) -> None:
    """Until the daemon has embedded every record written and runs no build (at once without
    indexing: `--indexing off`)."""
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        async with session.get("/v1/generations") as response:
            answer = await response.json()
        if "builds" not in answer:  # no embedding provider: nothing is indexed
            return
        building = any(build["state"] in ("queued", "running") for build in answer["builds"])
        if answer["pending"] == 0 and not building:
            return
        await asyncio.sleep(0.1)  # polling the daemon's own state, not a barrier
    raise SystemExit(f"a daemon still had records to embed after {SETTLE_S:.0f} s")


async def creates(session: aiohttp.ClientSession, records: Sequence[dict[str, str]], writers: int) -> Sample:
    """`records` created one a request by `writers` concurrent clients."""
    latency: list[float] = []
    statuses: dict[str, int] = {}
    pending = iter(records)

    async def writer() -> None:
        for record in pending:
            body = {"namespace": NAMESPACE, "kind": KIND, **record}
            started = time.perf_counter()
            async with session.post("/v1/records", json=body) as response:
                answer = await response.json()
                if response.status != 201:
                    raise SystemExit(f"create answered {response.status}: {answer}")
            latency.append((time.perf_counter() - started) * 1000)
            status = status_of(answer)
            statuses[status] = statuses.get(status, 0) + 1

    started = time.perf_counter()
    await asyncio.gather(*(writer() for _ in range(writers)))
    return Sample(latency, time.perf_counter() - started, os.getloadavg()[0], statuses)


async def idle_creates(session: aiohttp.ClientSession, records: Sequence[dict[str, str]]) -> Sample:
    """`records` created one at a time, each once the daemon has embedded everything before it:
    the check with no indexing to compete with. The wall time counts only the creates."""
    samples = []
    for record in records:
        await settle(session)
        samples.append(await creates(session, [record], 1))
    latency = [ms for sample in samples for ms in sample.latency_ms]
    statuses: dict[str, int] = {}
    for sample in samples:
        for status, count in sample.statuses.items():
            statuses[status] = statuses.get(status, 0) + count
    return Sample(latency, sum(sample.wall_s for sample in samples), os.getloadavg()[0], statuses)


STAGE_LINE = re.compile(r'^recalld_duplicate_check(?:_stage)?_seconds_(sum|count)(?:\{stage="(\w+)"\})? (\S+)$')


async def stage_totals(session: aiohttp.ClientSession) -> dict[str, list[float]]:
    """From /metrics: per check stage (and `check`, the whole check), [seconds, count] so far."""
    async with session.get("/metrics") as response:
        text = await response.text()
    totals: dict[str, list[float]] = {}
    for line in text.splitlines():
        if match := STAGE_LINE.match(line):
            which, stage, value = match.groups()
            totals.setdefault(stage or "check", [0.0, 0.0])[which == "count"] = float(value)
    return totals


async def profiled(results: Results, condition: str, session: aiohttp.ClientSession, run: Awaitable[Sample]) -> Sample:
    """`run` on the check-on daemon, its stage totals' growth added to the profile of `condition`."""
    before = await stage_totals(session)
    sample = await run
    after = await stage_totals(session)
    profile = results.profile.setdefault(condition, {})
    for stage, (seconds, count) in after.items():
        was = before.get(stage, [0.0, 0.0])
        total = profile.setdefault(stage, [0.0, 0.0])
        total[0] += seconds - was[0]
        total[1] += count - was[1]
    return sample


async def batch(session: aiohttp.ClientSession, records: Sequence[dict[str, str]]) -> tuple[float, dict[str, int]]:
    """Seconds per record of one `POST /v1/records:batch` of `records`, and its items' checks."""
    items = [{"namespace": NAMESPACE, "kind": KIND, **record} for record in records]
    started = time.perf_counter()
    async with session.post("/v1/records:batch", json={"records": items}) as response:
        answer = await response.json()
        if response.status != 200 or answer["failed"]:
            raise SystemExit(f"batch answered {response.status}: {answer}")
    seconds = (time.perf_counter() - started) / len(records)
    statuses: dict[str, int] = {}
    for item in answer["results"]:
        status = status_of(item)
        statuses[status] = statuses.get(status, 0) + 1
    return seconds, statuses


@dataclass(frozen=True)
class Side:
    """One daemon of the bench: where it answers, its process, its PostgreSQL's data directory."""

    socket: Path
    pid: int
    pgdata: Path

    def cpu(self) -> dict[str, float]:
        """CPU seconds used so far by the daemon, its title model's process and its PostgreSQL."""
        return {
            "the daemon": cpu_seconds(self.pid),
            "its title model's process": children_cpu_seconds(self.pid, "title_worker"),
            "its PostgreSQL": postgres_cpu_seconds(self.pgdata),
        }


async def cpu_use(
    side: Side, session: aiohttp.ClientSession, run: Awaitable[Sample]
) -> tuple[Sample, dict[str, float]]:
    """`run`, and the CPU seconds per create each process used from its start until the daemon
    had embedded what it wrote (`settle`)."""
    before = side.cpu()
    sample = await run
    await settle(session)
    after = side.cpu()
    return sample, {name: (after[name] - before[name]) / len(sample.latency_ms) for name in after}


async def measure(sides: dict[str, Side], args: argparse.Namespace, titles: list[dict[str, str]]) -> Results:
    results = Results()
    sessions = {
        side: aiohttp.ClientSession(
            connector=aiohttp.UnixConnector(path=str(daemon.socket), limit=max(args.writers)), base_url="http://recalld"
        )
        for side, daemon in sides.items()
    }
    try:
        taken = iter(titles)

        def take(n: int) -> list[dict[str, str]]:
            return [next(taken) for _ in range(n)]

        warm = take(args.warm_up)  # the same titles on both sides: the same work
        for side in SIDES:
            await creates(sessions[side], warm, max(args.writers))
        for round_ in range(1, args.rounds + 1):
            order = SIDES if round_ % 2 else SIDES[::-1]
            for writers in args.writers:
                records = take(args.creates)
                for side in order:
                    for other in SIDES:
                        await settle(sessions[other])
                    run = creates(sessions[side], records, writers)
                    if writers == 1:
                        if side == "on":
                            run = profiled(results, "indexing", sessions[side], run)
                        sample, cpu = await cpu_use(sides[side], sessions[side], run)
                        results.cpu.setdefault(side, []).append(cpu)
                    else:
                        sample = await run
                    results.creates.setdefault((side, writers), []).append(sample)
                    progress(
                        f"round {round_}, {writers} writer(s), check {side}: p50 {sample.p50:.1f} ms, "
                        f"{sample.rate:.0f} creates/s, load {sample.load:.2f}, {sample.statuses}"
                    )
            records = take(args.idle)
            for side in order if records else ():
                run = idle_creates(sessions[side], records)
                sample = await (profiled(results, "idle", sessions[side], run) if side == "on" else run)
                results.idle.setdefault(side, []).append(sample)
                progress(f"round {round_}, indexing idle, check {side}: p50 {sample.p50:.1f} ms, {sample.statuses}")
            records = take(args.batch)
            for side in order:
                for other in SIDES:
                    await settle(sessions[other])
                seconds, statuses = await batch(sessions[side], records)
                results.batch_s.setdefault(side, []).append(seconds)
                results.batch_statuses[side] = statuses
                progress(f"round {round_}, a batch of {args.batch}, check {side}: {seconds * 1000:.2f} ms a record")
    finally:
        for session in sessions.values():
            await session.close()
    return results


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--creates", type=int, default=100, help="creates a round per writer count and side")
    parser.add_argument("--writers", type=lambda s: [int(w) for w in s.split(",")], default=[1, 4])
    parser.add_argument("--batch", type=int, default=100, help="titles in a round's batch")
    parser.add_argument(
        "--idle", type=int, default=30, help="creates a round and side made with indexing idle (0: none)"
    )
    parser.add_argument("--warm-up", type=int, default=20, help="creates on each side before the rounds")
    parser.add_argument(
        "--indexing",
        choices=("on", "off"),
        default="on",
        help="off: no recall model on either side (the check keeps its title model), to see the check's own cost",
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-writes"))
    parser.add_argument("--write", type=Path, help="replace this markdown file's bench/writes.py section")
    add_result_option(parser, "ingest")
    args = parser.parse_args(argv)
    if 1 not in args.writers:
        parser.error("--writers must include 1: the single creates the batch is compared with")
    titles = titled(args.warm_up + args.rounds * (len(args.writers) * args.creates + args.idle + args.batch))
    envs = {"on": {"RECALLD_DUPLICATES_ENABLED": "true"}, "off": {"RECALLD_DUPLICATES_ENABLED": "false"}}
    if args.indexing == "off":
        for env in envs.values():
            # the title model named, as `auto` would pick it only beside the local recall model
            env.update(RECALLD_EMBEDDING_PROVIDER="none", RECALLD_DUPLICATES_MODEL="use-multilingual-v3")
    with ThreadPoolExecutor(len(SIDES)) as pool:  # both start at once: their models load side by side
        started = {side: pool.submit(start_fresh, args.work / side, NAMESPACE, envs[side]) for side in SIDES}
        wait(started.values())
    daemons = {side: future.result() for side, future in started.items() if future.exception() is None}
    try:
        for future in started.values():
            future.result()  # a side that did not start: the other is stopped below
        progress(f"{machine()}; load average {load_average()}")
        sides = {
            side: Side(socket, daemon.pid, EmbeddedPostgres(args.work / side / "data").pgdata)
            for side, (daemon, socket) in daemons.items()
        }
        results = asyncio.run(measure(sides, args, titles))
    finally:
        for daemon, _ in daemons.values():
            stop_daemon(daemon)
    publish(report(args, results, commit()), args.write, "bench/writes.py", result=args.result)


if __name__ == "__main__":
    main()
