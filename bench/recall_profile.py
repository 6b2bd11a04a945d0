"""Where the daemon's event-loop thread spends a recall: `recalld serve` on
bench/recall.py's data directory under cProfile (the main thread only: the loop's thread; the
model's and FAISS's worker threads are not in it), `POST /v1/recall` with the query vector cached
at 16 clients, then the profile's largest entries by own time and by inclusive time. Also the
HTTP layer's floor: a bare aiohttp handler on a Unix socket answering a canned body as long as
a recall's answer, measured by the same client at 16 clients (process CPU per request).

    .venv/bin/python -m bench.recall_profile [--work var/bench-recall-quick] [--queries 150]

cProfile slows the loop several times over, so read the shares, not the milliseconds; the CPU
per recall without the profiler is what bench/recall_probe.py measures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pstats
import subprocess
import time
from pathlib import Path

from bench.lib.corpus import NAMESPACE
from bench.lib.daemon import wait_ready
from bench.lib.load import socket_load
from bench.lib.paths import RECALL_QUICK_WORK, ROOT
from bench.lib.report import progress
from recalld.client import Client

# Runs `recalld serve` with cProfile on the main thread; the stats are dumped as serve returns
# (SIGTERM exits serve normally).
WRAPPER = """
import cProfile, sys
from recalld.cli.commands import main
profile = cProfile.Profile()
profile.enable()
try:
    code = main(sys.argv[2:])
finally:
    profile.disable()
    profile.dump_stats(sys.argv[1])
raise SystemExit(code)
"""

# A bare aiohttp server answering every POST with the same bytes: the HTTP layer's own cost.
BARE = """
import asyncio, sys
import uvloop
from aiohttp import web
body = open(sys.argv[2], "rb").read()
async def handler(request):
    await request.read()
    return web.Response(body=body, content_type="application/json")
app = web.Application()
app.router.add_post("/v1/recall", handler)
uvloop.install()
web.run_app(app, path=sys.argv[1], print=None, access_log=None)
"""


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_socket(socket: Path) -> None:
    client = Client(socket)
    for _ in range(100):
        try:
            client.request("GET", "/livez")
        except ConnectionError:
            time.sleep(0.1)
        except Exception:  # the bare server answers 404/405: it is up
            return
        else:
            return
    raise SystemExit(f"nothing answered on {socket}")


def profile_daemon(work: Path, queries: list[str], out: Path) -> bytes:
    socket = work / "recalld.sock"
    command = [
        str(ROOT / ".venv/bin/python"),
        "-c",
        WRAPPER,
        str(out),
        "serve",
        "--data-dir",
        str(work / "data"),
        "--socket",
        str(socket),
        "--config",
        str(work / "recalld.toml"),
    ]
    with (work / "serve.log").open("ab") as log:
        daemon = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        wait_socket(socket)
        wait_ready(socket)
        asyncio.run(socket_load(socket, queries, 4, "warm-up"))
        before = cpu_s(daemon.pid)
        load = asyncio.run(socket_load(socket, queries * 2, 16, "recalld"))
        used = cpu_s(daemon.pid) - before
        progress(f"profiled: {load.throughput:.0f}/s, {1000 * used / len(load.latency_ms):.2f} ms CPU a recall")
        answer = Client(socket).request("POST", "/v1/recall", {"namespace": NAMESPACE, "query": queries[0], "k": 10})
    finally:
        daemon.terminate()
        daemon.wait(timeout=120)
    return json.dumps(answer).encode()


def bare_floor(work: Path, body: bytes, queries: list[str]) -> None:
    socket = work / "bare.sock"
    canned = work / "bare-body.json"
    canned.write_bytes(body)
    server = subprocess.Popen([str(ROOT / ".venv/bin/python"), "-c", BARE, str(socket), str(canned)], cwd=ROOT)
    try:
        wait_socket(socket)
        asyncio.run(socket_load(socket, queries, 4, "warm-up"))
        before = cpu_s(server.pid)
        load = asyncio.run(socket_load(socket, queries * 4, 16, "bare"))
        used = cpu_s(server.pid) - before
        print(
            f"bare aiohttp handler, {len(body)} bytes an answer: {load.throughput:.0f}/s at 16 clients,"
            f" {1000 * used / len(load.latency_ms):.3f} ms server CPU a request"
        )
    finally:
        server.terminate()
        server.wait(timeout=30)
        socket.unlink(missing_ok=True)
        canned.unlink(missing_ok=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=RECALL_QUICK_WORK)
    parser.add_argument("--queries", type=int, default=150)
    parser.add_argument("--out", type=Path, default=Path("/tmp/recalld-loop.prof"))
    parser.add_argument("--top", type=int, default=45)
    args = parser.parse_args()
    work = args.work.resolve()
    queries: list[str] = json.loads((work / "corpus.json").read_text())["queries"][-args.queries :]
    body = profile_daemon(work, queries, args.out)
    stats = pstats.Stats(str(args.out))
    stats.sort_stats("tottime").print_stats(args.top)
    stats.sort_stats("cumulative").print_stats(args.top)
    bare_floor(work, body, queries)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
