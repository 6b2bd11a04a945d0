"""What a fleet member costs its PostgreSQL, in CPU: per recall, per write, per member joining,
and per member doing nothing; and, from those, a model of how many members one primary of C
cores serves before PostgreSQL is the bottleneck.

    .venv/bin/python -m bench.fleet_cost [--members 3] [--records 1000] [--rounds 5] [--recalls 100]
        [--writes 50] [--idle-s 20] [--write docs/BENCHMARKS.md] [--result NAME]

A fleet starts as bench/fleet_lag.py starts one (bench/lib/fleet.py): the first member on the
embedded defaults, with its own PostgreSQL, takes `--records` man-page passages
(bench/lib/corpus.py); the others join one by one, each building its own copy of the current
generation from the stored vectors. The PostgreSQL's CPU is read from /proc (bench/lib/cpu.py:
the postmaster and its backends, the ones that ended included) before and after each measure.

- Idle: the fleet settled (every member up to date for `[index] quiet_s` + `poll_s`), nothing
  asked for `--idle-s`: the non-holders trying the builder lock each `poll_s`, the index steps,
  the tickers. Measured before each join (the fleet so far) and at the start of each round.
- A join: from a member's start until it serves its own copy; this includes the member's
  start-up statements and connections besides the copy's reading of the stored vectors.
- A recall: `POST /v1/recall` with the defaults (hybrid, k 10), one client, the members in turn,
  each query a new one (the corpus's queries, none asked twice).
- A write: `POST /v1/records` creating a passage not stored yet (kind `man`: the duplicate check
  runs), one client, the members in turn; measured until every member has taken in every vector
  and stayed so, so the builder's embedding and storing and the members' reading in count.

From each figure the fleet's idle CPU over the same seconds is subtracted (at the median of the
rounds' idle rates; a join's at the rate of the fleet it joined), and from a write round also the
wait's generation requests (at their cost measured in the same round). Figures are medians over
the rounds; a round 0 before them, measured the same way, warms the members' connections and
caches up and is not counted.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeVar

from bench.lib.corpus import NAMESPACE, build_corpus
from bench.lib.cpu import postgres_cpu_seconds
from bench.lib.daemon import wait_caught_up
from bench.lib.fleet import Fleet, fleet, serving_own_copy, wait_all_caught_up
from bench.lib.paths import ROOT
from bench.lib.report import add_result_option, commit, load_average, machine, progress, publish
from recalld.actors.index.settings import defaults

T = TypeVar("T")
SECTION = "fleet_cost.py"
KIND = "man"
"""A kind the duplicate check covers (`doc`, what `recalld ingest` writes, it does not)."""
QUERY_PASSAGES = 8_000
"""The corpus is cut from this many passages' pages at least, so that its queries (four in five
are the pages' descriptions) are new up to 600: 6 rounds (the warm-up's included) of 100."""
SETTLE_S = defaults().quiet_s + defaults().poll_s
"""A builder starts an automatic build once the writes have been quiet for `quiet_s`, at its next
step: a fleet up to date this long has nothing more to do."""
GENERATION_PROBES = 50
CORES = (2, 8, 32)
UTILISATION = 0.7
PROFILES = (
    ("flat out: 237 recalls/s (16 clients, query vectors cached, 100k passages: docs/BENCHMARKS.md)", 237.0, 0.0),
    ("a busy member: 20 recalls/s, 2 writes/s", 20.0, 2.0),
    ("an agent's member: 1 recall/s, 1 write every 10 s", 1.0, 0.1),
)


@dataclass
class Spent:
    """What the PostgreSQL spent on some work: CPU (ms) over its wall seconds, for `done` operations."""

    pg_ms: float
    seconds: float
    done: int

    def per_operation(self, idle_ms_s: float, less_ms: float = 0.0) -> float:
        """ms of CPU an operation, the idle rate over the same seconds (and `less_ms`) subtracted."""
        return (self.pg_ms - idle_ms_s * self.seconds - less_ms) / self.done


@dataclass
class Round:
    idle_ms_s: float
    """The fleet's PostgreSQL CPU per second while nothing is asked (ms/s)."""
    probes: Spent
    recalls: Spent
    writes: Spent
    """`done`: the creates; the wait's generation requests are in `polls`."""
    polls: int
    built: bool
    """A new generation was published during the round's writes (and each member copied it)."""

    def figures(self, idle_ms_s: float) -> tuple[float, float, float]:
        """ms of CPU a generation request, a recall and a write, `idle_ms_s` subtracted."""
        probe = self.probes.per_operation(idle_ms_s)
        return probe, self.recalls.per_operation(idle_ms_s), self.writes.per_operation(idle_ms_s, self.polls * probe)


def pg_ms(members: Fleet) -> float:
    return 1000 * postgres_cpu_seconds(members.pgdata)


def spent(members: Fleet, count: int, work: Callable[[], T]) -> tuple[Spent, T]:
    """What the PostgreSQL spent while `work` ran, `count` operations; and what `work` returned."""
    before, began = pg_ms(members), time.monotonic()
    answer = work()
    return Spent(pg_ms(members) - before, time.monotonic() - began, count), answer


def idle(members: Fleet, seconds: float) -> float:
    """The settled fleet's PostgreSQL CPU per second while nothing is asked (ms/s)."""
    wait_all_caught_up(members.clients, settle_s=SETTLE_S)
    before = pg_ms(members)
    time.sleep(seconds)  # the measuring window itself, not a barrier
    return (pg_ms(members) - before) / seconds


def generations(members: Fleet) -> None:
    """`GET /v1/generations`, what the writes' wait asks, through the members in turn."""
    for n in range(GENERATION_PROBES):
        members.clients[n % len(members.clients)].request("GET", "/v1/generations")


def recalls(members: Fleet, queries: list[str]) -> None:
    for n, query in enumerate(queries):
        members.clients[n % len(members.clients)].request(
            "POST", "/v1/recall", {"namespace": NAMESPACE, "query": query}
        )


def writes(members: Fleet, records: list[dict[str, str]], checks: Counter[str]) -> int:
    """Create `records` through the members in turn, then wait until every member has them all;
    the generation requests the wait took."""
    for n, record in enumerate(records):
        created = members.clients[n % len(members.clients)].create_record(
            NAMESPACE, KIND, record["title"], record["body"], source_path=record["source_path"]
        )
        checks[created.duplicate_check.status] += 1
    return wait_all_caught_up(members.clients, settle_s=SETTLE_S)


def current_generation(members: Fleet) -> str:
    return str(members.clients[0].request("GET", "/v1/generations")["current"]["id"])


def median_range(values: list[float], digits: int = 2) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--recalls", type=int, default=100, help="recalls a round")
    parser.add_argument("--writes", type=int, default=50, help="writes a round")
    parser.add_argument("--idle-s", type=float, default=20.0, help="seconds of each idle window")
    parser.add_argument("--write", type=Path, help=f"replace this markdown file's {SECTION} section")
    add_result_option(parser, "fleet")
    args = parser.parse_args()
    new = (args.rounds + 1) * args.writes
    corpus = build_corpus(max(args.records + new, QUERY_PASSAGES), (args.rounds + 1) * args.recalls)
    stored, fresh, queries = corpus["records"][: args.records], corpus["records"][args.records :], corpus["queries"]
    rounds: list[Round] = []
    joins: list[tuple[Spent, float, int]] = []
    """Each join, the idle rate of the fleet it joined, and the vectors of its copy."""
    idle_by_size: list[float] = []
    checks: Counter[str] = Counter()
    with fleet() as members:
        members.start()
        progress(f"writing {len(stored)} passages through the first member")
        members.write(stored, KIND)
        wait_caught_up(members.clients[0], settled=True)
        for number in range(1, args.members):
            idle_by_size.append(idle(members, args.idle_s))
            join, (_, vectors) = spent(members, 1, lambda: serving_own_copy(members.start()))
            joins.append((join, idle_by_size[-1], vectors))
            progress(f"member {number} joined: {join.pg_ms:.0f} ms of PostgreSQL CPU, a copy of {vectors} vectors")
        for number in range(args.rounds + 1):  # round 0 warms up: the pools' connections, the caches
            idle_ms_s = idle(members, args.idle_s)
            probes, _ = spent(members, GENERATION_PROBES, partial(generations, members))
            asked = queries[number * args.recalls : (number + 1) * args.recalls]
            recalled, _ = spent(members, len(asked), partial(recalls, members, asked))
            current = current_generation(members)
            written = fresh[number * args.writes : (number + 1) * args.writes]
            counted = checks if number else Counter[str]()
            wrote, polls = spent(members, len(written), partial(writes, members, written, counted))
            measured = Round(idle_ms_s, probes, recalled, wrote, polls, current_generation(members) != current)
            rounds += [measured] if number else []
            figures = ", ".join(f"{ms:.2f} ms" for ms in measured.figures(idle_ms_s))
            progress(f"round {number}: idle {idle_ms_s:.1f} ms/s; a generations request, recall, write: {figures}")
        idle_by_size.append(statistics.median(r.idle_ms_s for r in rounds))
    publish(report(args, rounds, joins, idle_by_size, checks), args.write, SECTION, result=args.result)


def report(
    args: argparse.Namespace,
    rounds: list[Round],
    joins: list[tuple[Spent, float, int]],
    idle_by_size: list[float],
    checks: Counter[str],
) -> list[str]:
    idle_ms_s = statistics.median(r.idle_ms_s for r in rounds)
    probe, recall, write = ([r.figures(idle_ms_s)[n] for r in rounds] for n in range(3))
    join = [spent.per_operation(rate) for spent, rate, _ in joins]
    per_1000 = [1000 * ms / vectors for ms, (_, _, vectors) in zip(join, joins, strict=True)]
    c_r, c_w, c_i = statistics.median(recall), statistics.median(write), idle_ms_s / args.members
    lines = [
        "## PostgreSQL CPU of a fleet",
        "",
        "What each fleet member costs the fleet's PostgreSQL in CPU (`bench/fleet_cost.py`, whose",
        "docstring has the method): every member on this machine, one PostgreSQL (the first member's",
        "embedded one), its CPU read from /proc. From each per-operation figure the fleet's idle CPU",
        "over the same seconds is subtracted (at the rounds' median idle rate; a join's at the rate of",
        "the fleet it joined), and from the writes' also the wait's own generation requests. Medians of",
        "the rounds (least–most).",
        "",
        f"- Machine: {machine()}; load average at the end: {load_average()}.",
        f"- Data: {args.records:,} man-page passages, {args.members} members; {args.rounds} rounds (after one to "
        f"warm up) of an idle window ({args.idle_s:.0f} s), {args.recalls} new queries and {args.writes} creates "
        "(duplicate checks: "
        f"{', '.join(f'{n} {status}' for status, n in sorted(checks.items()))}).",
        f"- Command: `.venv/bin/python -m bench.fleet_cost {shlex.join(sys.argv[1:])}`",
        f"- Date: {time.strftime('%Y-%m-%d')}; commit {commit()}.",
        "",
        "| PostgreSQL CPU | ms |",
        "| --- | ---: |",
        f"| per recall (hybrid, k 10) | {median_range(recall)} |",
        f"| per write, until every member has its vectors | {median_range(write)} |",
        f"| per member, each second nothing is asked | {median_range([r.idle_ms_s / args.members for r in rounds])} |",
        f"| per member joining (its start-up included) | {median_range(join)} |",
        f"| the same, per 1,000 vectors of its copy | {median_range(per_1000)} |",
        f"| per `GET /v1/generations` (the writes' wait) | {median_range(probe)} |",
        "",
        "Idle, the whole fleet, in ms of CPU a second (before each join; the whole fleet's is the rounds' median): "
        + ", ".join(f"{size} member{'s' * (size > 1)} {ms:.1f}" for size, ms in enumerate(idle_by_size, start=1))
        + f". The joins' copies held {', '.join(str(v) for _, _, v in joins)} vectors.",
        "",
        "| round | idle, fleet (ms/s) | recall (ms) | write (ms) | a generation built during the writes |",
        "| ---: | ---: | ---: | ---: | ---: |",
        *(
            f"| {n} | {r.idle_ms_s:.1f} | {recall[n - 1]:.2f} | {write[n - 1]:.2f} | {'yes' if r.built else 'no'} |"
            for n, r in enumerate(rounds, start=1)
        ),
        "",
        "**The model** (derived from the medians above, not a measured fleet's throughput): a member",
        f"asked r recalls and w writes a second costs the primary r × {c_r:.2f} + w × {c_w:.2f} + {c_i:.2f} ms",
        f"of CPU a second, so a primary of C cores kept at {UTILISATION:.0%} CPU serves",
        f"M = {UTILISATION} × C × 1000 / that many members. It assumes the server's CPU grows with its cores",
        "and that nothing else binds first: connections do, for large fleets (each member holds up to",
        "`pool_max` + 3 of them, docs/OPERATIONS.md), and so may I/O, which this does not measure. The",
        f"costs are from {args.records:,} passages, the flat-out rate from 100,000: what a recall costs the",
        "server on a larger corpus is not measured here.",
        "",
        "| load per member | PostgreSQL CPU per member (ms/s) | " + " | ".join(f"C = {c}" for c in CORES) + " |",
        "| --- | ---: | " + " | ".join("---:" for _ in CORES) + " |",
    ]
    for label, r, w in PROFILES:
        load = r * c_r + w * c_w + c_i
        members = " | ".join(f"{UTILISATION * c * 1000 / load:,.0f}" if load > 0 else "–" for c in CORES)
        lines.append(f"| {label} | {load:.1f} | {members} |")
    if args.result is not None:
        lines += ["", f"Report: {args.result.relative_to(ROOT)}."]
    return lines


if __name__ == "__main__":
    main()
