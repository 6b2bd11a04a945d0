"""What a recall costs outside its own stages at one client: the time the client sees against the
daemon's `timings_ms.total`, beside a bare `GET /livez` over the same socket (the HTTP exchange
alone), with the query vectors cached so that the model is out of the picture.

On the corpus bench/recall.py prepared in WORK (`python -m bench.recall --passages 8000 --queries 300
--work var/bench-recall-quick --prepare-only`): each client on one connection of its own, each
round alternating `/livez` and a recall of the same 300 queries; medians per round. Two clients take turns each round:
aiohttp's (as bench/recall.py asks), and a minimal HTTP/1.1 client on a plain socket (a request
written as bytes, the answer read by its Content-Length), whose own cost is close to nothing,
so that the difference between the two is the client library's share.

    .venv/bin/python -m bench.recall_gap [--work var/bench-recall-quick] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket as sockets
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp

from bench.lib.corpus import NAMESPACE
from bench.lib.daemon import start_daemon, stop_daemon
from bench.lib.paths import RECALL_QUICK_WORK


def ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1000


class PlainClient:
    """HTTP/1.1 keep-alive requests written by hand on a blocking Unix socket."""

    def __init__(self, path: Path) -> None:
        self._socket = sockets.socket(sockets.AF_UNIX)
        self._socket.connect(str(path))

    def exchange(self, method: str, target: str, body: bytes = b"") -> bytes:
        head = f"{method} {target} HTTP/1.1\r\nHost: recalld\r\nContent-Length: {len(body)}\r\n"
        if body:
            head += "Content-Type: application/json\r\n"
        self._socket.sendall(head.encode() + b"\r\n" + body)
        received = b""
        while b"\r\n\r\n" not in received:
            received += self._received()
        header, answer = received.split(b"\r\n\r\n", 1)
        length = next(
            int(line.split(b":")[1]) for line in header.split(b"\r\n") if line.lower().startswith(b"content-length:")
        )
        while len(answer) < length:
            answer += self._received()
        return answer

    def _received(self) -> bytes:
        data = self._socket.recv(65536)
        if not data:
            raise ConnectionError("the daemon closed the connection mid-answer")
        return data

    def close(self) -> None:
        self._socket.close()


Exchange = Callable[[str, str, bytes], Awaitable[bytes]]


async def measure(name: str, r: int, exchange: Exchange, queries: list[str]) -> int:
    """One round of one client: `/livez` and a recall in turn for every query; prints its row."""
    live, seen, inside, decoded = [], [], [], []
    raw = b""
    for query in queries:
        started = time.perf_counter()
        await exchange("GET", "/livez", b"")
        live.append(time.perf_counter() - started)
        body = json.dumps({"namespace": NAMESPACE, "k": 10, "query": query}).encode()
        started = time.perf_counter()
        raw = await exchange("POST", "/v1/recall", body)
        answered = time.perf_counter()
        answer = json.loads(raw)
        decoded.append(time.perf_counter() - answered)
        seen.append(answered - started)
        inside.append(answer["timings_ms"]["total"] / 1000)
    gap = [a - b for a, b in zip(seen, inside, strict=True)]
    print(f"| {r} | {name} | {ms(live):.3f} | {ms(seen):.3f} | {ms(inside):.3f} | {ms(gap):.3f} | {ms(decoded):.3f} |")
    return len(raw)


async def rounds(socket: Path, queries: list[str], count: int) -> None:
    connector = aiohttp.UnixConnector(path=str(socket), limit=1)
    plain = PlainClient(socket)
    try:
        async with aiohttp.ClientSession(connector=connector, base_url="http://recalld") as session:

            async def with_aiohttp(method: str, target: str, body: bytes) -> bytes:
                headers = {"Content-Type": "application/json"} if body else None
                async with session.request(method, target, data=body or None, headers=headers) as response:
                    return await response.read()

            async def with_plain(method: str, target: str, body: bytes) -> bytes:
                return plain.exchange(method, target, body)

            for query in queries:  # embed every query once: the rounds ask cached vectors
                await with_plain(
                    "POST", "/v1/recall", json.dumps({"namespace": NAMESPACE, "k": 10, "query": query}).encode()
                )
            print("| round | client | /livez | recall, client-side | the daemon's total | difference | json.loads |")
            print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
            for r in range(1, count + 1):
                await measure("aiohttp", r, with_aiohttp, queries)
                size = await measure("plain socket", r, with_plain, queries)
    finally:
        plain.close()
    print(f"\nms, medians of {len(queries)} each; the answer is about {size:,} bytes of JSON")


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
