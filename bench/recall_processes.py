"""One serving process against two sharing one listening socket (more than one serving process,
measured before it is built): the first `recalld serve` owns the embedded
PostgreSQL of bench/recall.py's data directory; the second follows it (the store's DSN and the
same generations directory, as several daemons on one database already run) from a data
directory of its own. Both get the same listening Unix socket as systemd's socket activation
passes it (fd 3, `LISTEN_FDS`), so the kernel spreads the clients' connections over them.
Rounds take turns: the first process alone, then both, and again; each round `POST /v1/recall`
with the query vector cached at 16 clients (throughput, and CPU per recall of the daemons,
PostgreSQL and this client).

    .venv/bin/python -m bench.recall_processes [--work var/bench-recall-quick] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.lib.cpu import cpu_seconds, postgres_cpu_seconds
from bench.lib.daemon import embedded_dsn, wait_ready
from bench.lib.load import socket_load
from bench.lib.paths import RECALL_QUICK_WORK, ROOT
from bench.lib.report import progress

# Socket activation's protocol: LISTEN_PID must be the daemon's own pid, which `exec` keeps.
ACTIVATE = 'LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" "$@"'


def spawn(data_dir: Path, socket_path: Path, config: Path, log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    data_dir.mkdir(parents=True, exist_ok=True)
    recalld = str(ROOT / ".venv/bin/recalld")
    command = ["sh", "-c", ACTIVATE, recalld, "serve", "--data-dir", str(data_dir), "--socket", str(socket_path)]
    with log.open("ab") as out:
        return subprocess.Popen(
            [*command, "--config", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            pass_fds=(3,),
            env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        )


def wait_logged(log: Path, start: int, line: str, daemon: subprocess.Popen[bytes]) -> None:
    give_up = time.monotonic() + 180
    while line.encode() not in log.read_bytes()[start:]:
        if daemon.poll() is not None or time.monotonic() > give_up:
            raise SystemExit(f"the follower did not log {line!r}; see {log}")
        time.sleep(0.2)


def settle(pid: int) -> None:
    """Wait until the follower's start-up work (loading the generation, its first full pass over
    the records) is done: less than 5% of a core over a second, for at most two minutes."""
    give_up = time.monotonic() + 120
    while time.monotonic() < give_up:
        used = cpu_seconds(pid)
        time.sleep(1.0)
        if cpu_seconds(pid) - used < 0.05:
            return
    progress("the follower never settled; measuring anyway")


def measure(socket_path: Path, queries: list[str], daemons: list[int], pgdata: Path) -> dict[str, Any]:
    before = ([cpu_seconds(pid) for pid in daemons], postgres_cpu_seconds(pgdata), os.times())
    load = asyncio.run(socket_load(socket_path, queries * 4, 16, "recalld"))
    after = ([cpu_seconds(pid) for pid in daemons], postgres_cpu_seconds(pgdata), os.times())
    n = len(load.latency_ms)
    own = (after[2].user + after[2].system) - (before[2].user + before[2].system)
    return {
        "processes": len(daemons),
        "throughput_16": round(load.throughput),
        "cpu_ms": {
            "daemons": round(1000 * sum(a - b for a, b in zip(after[0], before[0], strict=True)) / n, 3),
            "each": [round(1000 * (a - b) / n, 3) for a, b in zip(after[0], before[0], strict=True)],
            "postgresql": round(1000 * (after[1] - before[1]) / n, 3),
            "client": round(1000 * own / n, 3),
        },
        "degraded": load.degraded,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=RECALL_QUICK_WORK)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2, help="pairs of rounds (one process, two)")
    args = parser.parse_args()
    work = args.work.resolve()
    queries: list[str] = json.loads((work / "corpus.json").read_text())["queries"][-args.queries :]
    shared = work / "shared.sock"
    shared.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(shared))
    listener.listen(256)
    if listener.fileno() != 3:
        os.dup2(listener.fileno(), 3)
    os.set_inheritable(3, True)
    config, log = work / "recalld.toml", work / "processes.log"
    first = spawn(work / "data", shared, config, log, {})
    follower_env = {
        "RECALLD_STORE_DSN": embedded_dsn(work / "data"),
        "RECALLD_INDEX_DIRECTORY": str(work / "data/generations"),
    }
    second: subprocess.Popen[bytes] | None = None
    results: list[dict[str, Any]] = []
    try:
        wait_ready(shared)
        asyncio.run(socket_load(shared, queries, 4, "warm-up"))
        for r in range(args.rounds):
            results.append(measure(shared, queries, [first.pid], work / "data/pg"))
            progress(f"round {r + 1}: {json.dumps(results[-1])}")
            start = log.stat().st_size
            second = spawn(Path(f"/tmp/recalld-follower-{os.getpid()}"), shared, config, log, follower_env)
            wait_logged(log, start, "recalld ready", second)
            for _ in range(3):  # the follower's own query-vector cache
                asyncio.run(socket_load(shared, queries, 16, "warm-up"))
            settle(second.pid)
            results.append(measure(shared, queries, [first.pid, second.pid], work / "data/pg"))
            progress(f"round {r + 1}: {json.dumps(results[-1])}")
            second.terminate()
            second.wait(timeout=60)
            second = None
    finally:
        for daemon in (second, first):
            if daemon is not None:
                daemon.terminate()
                daemon.wait(timeout=120)
        listener.close()
        shared.unlink(missing_ok=True)
    for processes in (1, 2):
        rounds = [r for r in results if r["processes"] == processes]
        cpu = {who: statistics.median(r["cpu_ms"][who] for r in rounds) for who in ("daemons", "postgresql", "client")}
        print(
            f"{processes} serving process(es): 16 clients"
            f" {statistics.median(r['throughput_16'] for r in rounds):.0f}/s"
            f" (rounds {', '.join(str(r['throughput_16']) for r in rounds)}), CPU ms per recall {json.dumps(cpu)},"
            f" degraded answers {sum(r['degraded'] for r in rounds)}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
