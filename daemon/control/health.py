"""Liveness and readiness: per-component checks folded into one verdict.

`fail` in a required component makes /readyz 503; `warn` (an optional route degraded) keeps
it 200 so that load balancers keep sending work that the other routes can answer.

The checks of the daemon's four components (store, actors, embedding, vector) live here too:
each is a factory that closes over the part it watches and answers a `Check` when /readyz asks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

import asyncpg
import msgspec

from recalld.actors.assignments.verdict import ResolverReason
from recalld.actors.embedding.embedder import Embedder
from recalld.actors.embedding.errors import Reason
from recalld.actors.index.manager import IndexManager
from recalld.actors.index.manifest import IndexReason
from recalld.actors.kernel.supervisor import ChildState, Supervisor, SupervisorGaveUp
from recalld.config import Config
from recalld.metrics import Metrics
from recalld.services.assignments import AssignmentService
from recalld.store import db

Status = Literal["pass", "warn", "fail"]
_ORDER: dict[Status, int] = {"pass": 0, "warn": 1, "fail": 2}


class ReadinessReason(StrEnum):
    """Why a check of the daemon's own parts fails (stable codes: /readyz bodies show them).
    The embedding and vector checks report their parts' codes instead: the embedding path's
    `Reason` (`no_provider` among them), the index's `IndexReason`, the index manager's problems.
    All of them are listed in `recalld.reasons`."""

    STORE_UNAVAILABLE = "store_unavailable"
    """PostgreSQL did not answer a ping within `[store] health_timeout_s`."""
    ACTOR_DOWN = "actor_down"
    """A supervised actor is not running: starting, restarting or stopped."""
    SUPERVISOR_GAVE_UP = SupervisorGaveUp.reason
    """The supervisor stopped restarting its children; the daemon is on its way out (exit 1)."""


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
            Check(status="fail", reason=ReadinessReason.STORE_UNAVAILABLE, detail={"error": problem})
            if problem
            else Check(status="pass")
        )

    return check


NO_PROVIDER_MESSAGE = "[embedding] provider = none"
EMPTY_NOTE = "nothing indexed yet: the store holds no records"
"""What a passing vector check notes (`detail.note`) when there is nothing to index."""
"""Why the embedding and vector checks fail in a daemon configured without a provider."""


def embedding_check(embedder: Embedder | None) -> CheckFn:
    """The embedder's own verdict (breaker, vector space, last probe); fails without a provider."""

    async def check() -> Check:
        if embedder is None:
            return Check(status="fail", reason=Reason.NO_PROVIDER, detail={"message": NO_PROVIDER_MESSAGE})
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
            return Check(status="fail", reason=ReadinessReason.SUPERVISOR_GAVE_UP, detail=dict(states))
        if down:
            return Check(status="fail", reason=ReadinessReason.ACTOR_DOWN, detail=down)
        return Check(status="pass")

    return check


async def _nothing_to_index(index: IndexManager) -> bool:
    """Whether the store holds no record at all; a store that does not answer says nothing (the
    `store` check fails for it), so the missing generation counts."""
    try:
        return await index.nothing_to_index()
    except db.STORE_DOWN_ERRORS:
        return False


def vector_check(index: IndexManager | None) -> CheckFn:
    """The index manager serves a verified generation, or there is nothing to index yet (a fresh
    daemon, no records: a pass that says so); else its problem's code and message."""

    async def check() -> Check:
        if index is None:
            return Check(status="fail", reason=Reason.NO_PROVIDER, detail={"message": NO_PROVIDER_MESSAGE})
        problem = index.problem()
        # Which generation this daemon serves and how far it lags (`IndexManager.serving`).
        detail = {**index.snapshot(), **index.serving()}
        finished = [b for b in index.builds() if b.state in ("done", "failed")]  # newest first
        if problem is None and finished and finished[0].state == "failed":
            # the previous generation serves, so the route answers: a warning that says why
            # nothing newer does (a full disk, say) until a build succeeds
            failure = {"message": f"the last build failed: {finished[0].error}", **detail}
            return Check(status="warn", reason=IndexReason.VECTOR_INDEX_BUILD_FAILED, detail=failure)
        if problem is None:
            return Check(status="pass", detail=detail)
        reason, message = problem
        if reason == IndexReason.NO_VERIFIED_GENERATION and await _nothing_to_index(index):
            return Check(status="pass", detail={**detail, "note": EMPTY_NOTE})
        return Check(status="fail", reason=reason, detail={"message": message, **detail})

    return check


def resolver_check(assignments: AssignmentService) -> CheckFn:
    """Optional: an open circuit warns (disputes wait), the resolver switched off passes."""

    async def check() -> Check:
        state = assignments.resolver_state()
        detail: dict[str, object] = {"state": state}
        if assignments.resolver is not None and assignments.resolver.last_error:
            detail["last_error"] = assignments.resolver.last_error
        if state == "circuit_open":
            return Check(status="warn", reason=ResolverReason.LLM_CIRCUIT_OPEN, detail=detail)
        return Check(status="pass", detail=detail)

    return check
