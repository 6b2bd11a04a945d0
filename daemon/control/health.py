"""Liveness and readiness: per-component checks folded into one verdict.

`fail` in a required component makes /readyz 503; `warn` (an optional route degraded) keeps
it 200 so that load balancers keep sending work that the other routes can answer.

The checks of the daemon's four components (store, actors, embedding, vector) live here too:
each is a factory that closes over the part it watches and answers a `Check` when /readyz asks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

import asyncpg
import msgspec

from actors.embedder import Embedder
from actors.index_manager import IndexManager
from actors.kernel.supervisor import ChildState, Supervisor
from daemon.config import Config
from daemon.metrics import Metrics
from daemon.store import db

Status = Literal["pass", "warn", "fail"]
_ORDER: dict[Status, int] = {"pass": 0, "warn": 1, "fail": 2}


class Check(msgspec.Struct, kw_only=True, omit_defaults=True):
    status: Status
    reason: str | None = None
    detail: dict[str, object] | None = None


class Readiness(msgspec.Struct, kw_only=True):
    status: Status
    checks: dict[str, Check]


CheckFn = Callable[[], Awaitable[Check]]


@dataclass
class Component:
    name: str
    check: CheckFn
    required: bool
    """A required component that fails makes the daemon not ready; an optional one only warns."""


def fold(results: dict[str, tuple[Check, bool]]) -> Readiness:
    """The overall verdict: the worst check, where an optional component's fail counts as warn."""
    worst: Status = "pass"
    for check, required in results.values():
        status: Status = check.status if required or check.status != "fail" else "warn"
        if _ORDER[status] > _ORDER[worst]:
            worst = status
    return Readiness(status=worst, checks={name: check for name, (check, _) in results.items()})


class Health:
    def __init__(self) -> None:
        self._components: list[Component] = []

    def add(self, name: str, check: CheckFn, *, required: bool) -> None:
        self._components.append(Component(name, check, required))

    async def readiness(self) -> Readiness:
        results: dict[str, tuple[Check, bool]] = {}
        for component in self._components:
            results[component.name] = (await component.check(), component.required)
        return fold(results)


def store_check(pool: asyncpg.Pool, config: Config, metrics: Metrics) -> CheckFn:
    """PostgreSQL answers a ping within `[store] health_timeout_s` (also sets `recalld_store_up`)."""

    async def check() -> Check:
        problem = await db.ping(pool, config.store.health_timeout_s)
        metrics.store_up.set(0 if problem else 1)
        return (
            Check(status="fail", reason="store_unavailable", detail={"error": problem})
            if problem
            else Check(status="pass")
        )

    return check


def embedding_check(embedder: Embedder | None) -> CheckFn:
    """The embedder's own verdict (breaker, vector space, last probe); fails without a provider."""

    async def check() -> Check:
        if embedder is None:
            return Check(status="fail", reason="no_provider", detail={"message": "[embedding] provider = none"})
        health = embedder.health()
        detail: dict[str, object] = {"message": health.message, "breaker": health.breaker}
        if health.space is not None:
            detail["space"] = msgspec.to_builtins(health.space)
            detail["space_id"] = health.space.key
        if health.probe is not None:
            detail["probe"] = msgspec.to_builtins(health.probe)
        return Check(status=health.status, reason=health.reason, detail=detail)

    return check


def actors_check(supervisor: Supervisor) -> CheckFn:
    """Every supervised actor is running, and the supervisor has not given up."""

    async def check() -> Check:
        states = supervisor.status()
        down: dict[str, object] = {name: str(state) for name, state in states.items() if state != ChildState.RUNNING}
        if not supervisor.alive:
            return Check(status="fail", reason="supervisor_gave_up", detail=dict(states))
        if down:
            return Check(status="fail", reason="actor_down", detail=down)
        return Check(status="pass")

    return check


def vector_check(index: IndexManager | None) -> CheckFn:
    """The index manager serves a verified generation; else its problem's code and message."""

    async def check() -> Check:
        if index is None:
            return Check(status="fail", reason="no_provider", detail={"message": "provider = none"})
        problem = index.problem()
        detail = index.snapshot()
        if problem is None:
            return Check(status="pass", detail=detail)
        reason, message = problem
        return Check(status="fail", reason=reason, detail={"message": message, **detail})

    return check
