"""What a recall costs outside its own stages at one client: the time the client sees against the
daemon's `timings_ms.total`, beside a bare `GET /livez` over the same socket (the HTTP exchange
alone), with the query vectors cached so that the model is out of the picture.

On the corpus bench/recall.py prepared in WORK (`bench/recall.py --passages 8000 --queries 300
--work var/bench-recall-quick --prepare-only`): one aiohttp client, one connection, each round
alternating `/livez` and a recall of the same 300 queries; medians per round.

    .venv/bin/python bench/recall_gap.py [--work var/bench-recall-quick] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import RECALL_QUICK_WORK, start_daemon, stop_daemon
from bench.recall import NAMESPACE


def ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1000


async def rounds(socket: Path, queries: list[str], count: int) -> None:
    connector = aiohttp.UnixConnector(path=str(socket), limit=1)
    async with aiohttp.ClientSession(connector=connector, base_url="http://recalld") as session:

        async def recall(query: str) -> bytes:
            body = {"namespace": NAMESPACE, "k": 10, "query": query}
            async with session.post("/v1/recall", json=body) as response:
                return await response.read()

        for query in queries:  # embed every query once: the rounds ask cached vectors
            await recall(query)
        print("| round | /livez | recall, client-side | the daemon's total | difference | client's json.loads |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for r in range(1, count + 1):
            live, seen, inside, decoded = [], [], [], []
            for query in queries:
                started = time.perf_counter()
                async with session.get("/livez") as response:
                    await response.read()
                live.append(time.perf_counter() - started)
                started = time.perf_counter()
                raw = await recall(query)
                answered = time.perf_counter()
                answer = json.loads(raw)
                decoded.append(time.perf_counter() - answered)
                seen.append(answered - started)
                inside.append(answer["timings_ms"]["total"] / 1000)
            gap = [a - b for a, b in zip(seen, inside, strict=True)]
            print(f"| {r} | {ms(live):.3f} | {ms(seen):.3f} | {ms(inside):.3f} | {ms(gap):.3f} | {ms(decoded):.3f} |")
        print(f"\nms, medians of {len(queries)} each; the answer is about {len(raw):,} bytes of JSON")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=RECALL_QUICK_WORK)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = args.work.resolve()
    queries: list[str] = json.loads((work / "corpus.json").read_text())["queries"][-300:]
    socket = work / "gap.sock"
    daemon = start_daemon(work / "data", socket, work / "gap.log", config=work / "recalld.toml")
    try:
        asyncio.run(rounds(socket, queries, args.rounds))
    finally:
        stop_daemon(daemon)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
