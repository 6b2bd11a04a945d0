"""Loads over the daemon's socket: `POST /v1/recall` from many clients at once, what each answer's
latency and `timings_ms` were, and the CPU each process spent meanwhile."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.lib.corpus import NAMESPACE
from bench.lib.cpu import cpu_seconds, postgres_cpu_seconds

STAGES = ("embed", "vector", "fts", "rehydrate", "fusion", "total")
"""The stages of an answer's `timings_ms` the recall tables report, in order."""


@dataclass
class Load:
    """One system at one concurrency: per-request latency (ms), per-stage timings, wall time."""

    system: str
    clients: int
    latency_ms: list[float] = field(default_factory=list)
    stages: dict[str, list[float]] = field(default_factory=dict)
    wall_s: float = 0.0
    degraded: int = 0
    fusion: dict[str, Any] | None = None
    cpu_s: dict[str, float] = field(default_factory=dict)
    """CPU seconds spent during the load by the daemon, PostgreSQL and this client (`Meter`)."""

    @property
    def throughput(self) -> float:
        return len(self.latency_ms) / self.wall_s if self.wall_s else 0.0

    @classmethod
    def merged(cls, loads: Sequence[Load]) -> Load:
        """The rounds of one configuration as one load (all their requests, their summed time)."""
        whole = cls(loads[0].system, loads[0].clients, fusion=loads[0].fusion)
        for load in loads:
            whole.latency_ms += load.latency_ms
            whole.wall_s += load.wall_s
            whole.degraded += load.degraded
            for who, seconds in load.cpu_s.items():
                whole.cpu_s[who] = whole.cpu_s.get(who, 0.0) + seconds
            for stage, values in load.stages.items():
                whole.stages.setdefault(stage, []).extend(values)
        return whole


@dataclass
class Meter:
    """Reads the CPU time used so far by the daemon, by PostgreSQL and by this client process."""

    daemon_pid: int
    pgdata: Path

    def read(self) -> dict[str, float]:
        own = os.times()
        return {
            "daemon": cpu_seconds(self.daemon_pid),
            "postgresql": postgres_cpu_seconds(self.pgdata),
            "client": own.user + own.system,
        }

    def run(self, load: Coroutine[Any, Any, Load]) -> Load:
        """`load` run to its end, with the CPU each side spent during it."""
        before = self.read()
        done = asyncio.run(load)
        after = self.read()
        done.cpu_s = {who: after[who] - before[who] for who in before}
        return done


async def concurrently(queries: Sequence[Any], clients: int, one: Callable[[int, Any], Awaitable[None]]) -> float:
    """Run `one(worker, query)` over `queries` with `clients` workers; the wall time in seconds."""
    pending = iter(queries)

    async def worker(number: int) -> None:
        for query in pending:
            await one(number, query)

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(clients)))
    return time.perf_counter() - started


async def socket_load(
    socket: Path, queries: Sequence[str], clients: int, system: str, routes: Sequence[str] | None = None
) -> Load:
    """`POST /v1/recall` (k 10, the default fusion, `routes` or the default ones) from `clients`
    connections at once."""
    load = Load(system, clients)
    body: dict[str, Any] = {"namespace": NAMESPACE, "k": 10}
    if routes is not None:
        body["routes"] = list(routes)
    connector = aiohttp.UnixConnector(path=str(socket), limit=clients)
    async with aiohttp.ClientSession(connector=connector, base_url="http://recalld") as session:

        async def one(_: int, query: str) -> None:
            started = time.perf_counter()
            async with session.post("/v1/recall", json={**body, "query": query}) as response:
                answer = await response.json()
                if response.status != 200:
                    raise SystemExit(f"recall answered {response.status}: {answer}")
            load.latency_ms.append((time.perf_counter() - started) * 1000)
            load.degraded += bool(answer["degraded_routes"])
            load.fusion = answer["fusion"]
            for stage, value in answer["timings_ms"].items():
                load.stages.setdefault(stage, []).append(value)

        load.wall_s = await concurrently(queries, clients, one)
    return load
