"""A fleet's lag: seconds from a write acknowledged by one member to the record found by the
vector route through another, and how long a member joining takes to serve its own copy.

    .venv/bin/python -m bench.fleet_lag [--members 3] [--records 1000] [--probes 30] [--result NAME]

The first member runs on the embedded defaults (its own PostgreSQL in its data directory); the
others, each with a data directory of its own, use that PostgreSQL's DSN and nothing else of it
(docs/OPERATIONS.md, "Running a fleet"). `--records` man-page passages (bench/lib/corpus.py) are
written through the first member; each further member then starts: the time until it serves its
own copy of the current generation is its join time, and the copy's build from the stored
vectors (as the member reports it in /v1/generations) a part of it. Then
each probe writes a record of its own through one member (in turn) and asks the next member, by
the vector route and every 50 ms, until the record is among the 5 best: the seconds from the
write's answer to that find are the lag. The builder embeds every record whoever took the write,
so the lag is the builder's embedding of one record plus the follower's next step (woken by the
NOTIFY its commit sends; `[index] poll_s` when that is lost).

Last, the first member (the builder) is SIGKILLed (its PostgreSQL, a server process of its own,
runs on): the takeover is the seconds until another member says it holds the builder lock, and
one more probe, written and found through the survivors, shows they index on.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
import uuid
from subprocess import Popen

from bench.lib.corpus import NAMESPACE, build_corpus
from bench.lib.daemon import wait_caught_up
from bench.lib.fleet import POLL_S, fleet, serving_own_copy
from bench.lib.report import add_result_option, load_average, machine, percentile, progress, publish
from recalld.client import Client

FOUND_WITHIN_S = 120.0


def probe(writer: Client, reader: Client, number: int) -> float:
    """Seconds from a write through `writer` to the record found by meaning through `reader`."""
    word = uuid.uuid4().hex[:8]
    title = f"Lag probe {number}: the {word} lighthouse keeper's logbook"
    body = f"Entry {number}: the keeper of lighthouse {word} logged fog, a passing freighter and a broken lamp."
    record_id = str(writer.create_record(NAMESPACE, "doc", title, body).id)
    written = time.monotonic()
    query = {"namespace": NAMESPACE, "query": f"{title}. {body}", "routes": ["vector"], "k": 5}
    while time.monotonic() - written < FOUND_WITHIN_S:
        answer = reader.request("POST", "/v1/recall", query)
        if any(result["id"] == record_id for result in answer["results"]):
            return time.monotonic() - written
        time.sleep(POLL_S)  # polling the member, not a barrier
    raise SystemExit(f"probe {number} was not found through the next member within {FOUND_WITHIN_S:.0f} s")


def kill_the_builder(builder: Popen[bytes], survivors: list[Client]) -> tuple[float, float]:
    """SIGKILL the builder; seconds until a survivor holds the builder lock, and the lag of a
    probe written and found through the survivors then."""
    builder.kill()
    builder.wait()
    killed = time.monotonic()
    while not any(client.request("GET", "/v1/generations")["index"]["builder"] for client in survivors):
        if time.monotonic() - killed > FOUND_WITHIN_S:
            raise SystemExit(f"no survivor took the builder lock within {FOUND_WITHIN_S:.0f} s")
        time.sleep(POLL_S)  # polling the members, not a barrier
    takeover = time.monotonic() - killed
    return takeover, probe(survivors[0], survivors[-1], -1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--probes", type=int, default=30)
    add_result_option(parser, "fleet")
    args = parser.parse_args()
    with fleet() as members:
        members.start()
        corpus = build_corpus(args.records, 0)["records"]
        progress(f"writing {len(corpus)} passages through the first member")
        members.write(corpus)
        wait_caught_up(members.clients[0], settled=True)
        joins: list[float] = []
        copies: list[float] = []
        for number in range(1, args.members):
            began = time.monotonic()
            took, vectors = serving_own_copy(members.start())
            joins.append(time.monotonic() - began)
            copies.append(took)
            progress(f"member {number}: a copy of {vectors} vectors built in {took:.2f} s, {joins[-1]:.1f} s in")
        clients = members.clients
        lags: list[float] = []
        for number in range(args.probes):
            writer = number % len(clients)
            lags.append(probe(clients[writer], clients[(writer + 1) % len(clients)], number))
            progress(f"probe {number}: {lags[-1]:.2f} s")
        takeover, after = kill_the_builder(members.daemons[0], clients[1:])
        progress(f"a survivor holds the builder lock {takeover:.2f} s after the SIGKILL; then found in {after:.2f} s")
    lines = [
        f"Command: python -m bench.fleet_lag {shlex.join(sys.argv[1:])}",
        "",
        f"{args.members} members, one PostgreSQL (the first member's embedded one), {len(corpus)} passages; "
        f"{machine()}; load average {load_average()}.",
        "",
        "| measure | n | median | p95 | max |",
        "| --- | --- | --- | --- | --- |",
        f"| join: a member's start (its model loading) until it serves its own copy (s) | {len(joins)} | "
        f"{statistics.median(joins):.1f} | {percentile(joins, 95):.1f} | {max(joins):.1f} |",
        f"| of which its copy's build, {vectors} vectors, from the stored ones (s) | {len(copies)} | "
        f"{statistics.median(copies):.2f} | {percentile(copies, 95):.2f} | {max(copies):.2f} |",
        f"| lag: write on one member until found by vector on the next (s) | {len(lags)} | "
        f"{statistics.median(lags):.2f} | {percentile(lags, 95):.2f} | {max(lags):.2f} |",
        f"| takeover: the builder SIGKILLed until a survivor holds the builder lock (s) | 1 | {takeover:.2f} | | |",
        f"| lag after the takeover: written and found through the survivors (s) | 1 | {after:.2f} | | |",
    ]
    publish(lines, None, "fleet_lag.py", result=args.result)


if __name__ == "__main__":
    main()
