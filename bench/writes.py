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
by process (the daemon, its title model's process, its PostgreSQL) from /proc. Per writer count it
also counts the titles the title model embedded per create (`recalld_embedder_texts_total`: one
when no title is embedded twice) and the checks that compared fewer live titles than they found.

    .venv/bin/python -m bench.writes                       # 5 rounds of 100 creates: about 2 minutes
    .venv/bin/python -m bench.writes --rounds 9 --creates 200 --result writes
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import time
from collections.abc import Awaitable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from bench.lib.corpus import build_corpus
from bench.lib.cpu import children_cpu_seconds, cpu_seconds, postgres_cpu_seconds
from bench.lib.daemon import start_fresh, stop_daemon
from bench.lib.report import add_result_option, commit, load_average, machine, progress, publish
from bench.writes_report import KIND, SIDES, Results, Sample, report
from recalld.providers.duplicates_model import MODEL_ID as TITLE_MODEL
from recalld.store.embedded import EmbeddedPostgres

NAMESPACE = "bench-writes"
TITLE_WORDS = 9
SETTLE_S = 300.0
"""Longest a daemon may take to embed what the last round wrote before the bench gives up."""


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
    partial: list[str] = []
    """The statuses of checks that compared fewer titles than they found."""
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
            check = answer.get("duplicate_check") or {}
            if check.get("compared", 0) < check.get("of", 0):
                partial.append(status)

    started = time.perf_counter()
    await asyncio.gather(*(writer() for _ in range(writers)))
    return Sample(latency, time.perf_counter() - started, os.getloadavg()[0], statuses, len(partial))


TITLE_TEXTS = re.compile(
    rf'^recalld_embedder_texts_total\{{[^}}]*model="{re.escape(TITLE_MODEL)}"[^}}]*\}} (\S+)$', re.M
)


async def titles_embedded(session: aiohttp.ClientSession, run: Awaitable[Sample]) -> Sample:
    """`run`, with the titles its daemon's title model embedded meanwhile
    (`recalld_embedder_texts_total` of the title model): one a create when no title is embedded
    twice."""

    async def texts() -> float:
        async with session.get("/metrics") as response:
            found = TITLE_TEXTS.search(await response.text())
        return float(found.group(1)) if found else 0.0

    before = await texts()
    sample = await run
    sample.titles_embedded = await texts() - before
    return sample


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
                    if side == "on":
                        run = titles_embedded(sessions[side], run)
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
