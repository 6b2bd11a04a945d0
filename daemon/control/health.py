"""Liveness and readiness: per-component checks folded into one verdict.

`fail` in a required component makes /readyz 503; `warn` (an optional route degraded) keeps
it 200 so that load balancers keep sending work that the other routes can answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

import msgspec

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
