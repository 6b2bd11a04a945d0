"""The registry of reason codes (daemon/reasons.py): complete, stable, one meaning per code."""

from __future__ import annotations

import enum
import importlib
import inspect
import pkgutil
import re
from collections.abc import Awaitable, Callable

import pytest
from anyio.abc import TaskStatus

import recalld
import recalld.actors
from recalld.actors.kernel.supervisor import ChildSpec, Supervisor, SupervisorGaveUp, SupervisorOptions
from recalld.control.health import CheckFn, ReadinessReason, actors_check, embedding_check, vector_check
from recalld.reasons import REASON_ENUMS, SHARED_CODES, reason_codes

NOT_REASON_CODES = {
    "recalld.actors.assignments.disputes.Event": "what happens to a dispute, the input of its transition table",
    "recalld.actors.assignments.strategy.Source": "a canonical value's source (`auto:...` or `manual`), not why something failed",
    "recalld.actors.kernel.breaker.BreakerState": "a state shown in /readyz detail, not why something failed",
    "recalld.actors.embedding.template.InputKind": "which template renders an input",
    "recalld.actors.index.manifest.Corruption": "what exactly failed verification, for logs and tests",
    "recalld.actors.kernel.supervisor.ChildState": "an actor's state, shown in /readyz detail",
    "recalld.actors.kernel.supervisor.EventKind": "what happened to an actor, for logs and metrics",
    "recalld.actors.recall.query.QueryKind": "how a query was read",
    "recalld.eval.floor.Acceptance": "what `recalld eval --accept` did to a floor, printed by the CLI",
    "recalld.eval.floor.Verdict": "an eval's standing against its floor, printed by the CLI",
}
"""Enums of snake_case strings that are not reason codes, and why."""


def string_enums() -> set[str]:
    """Every enum of strings defined in `recalld` (its actors/ folder is a path of its own), as
    `module.Name`."""
    found = set()
    for package in (recalld, recalld.actors):
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if info.name.endswith("__main__"):
                continue  # runs the CLI on import
            module = importlib.import_module(info.name)
            for name, value in vars(module).items():
                if inspect.isclass(value) and issubclass(value, enum.StrEnum) and value.__module__ == info.name:
                    found.add(f"{info.name}.{name}")
    return found


def test_every_enum_of_codes_is_registered_or_declared_not_a_reason() -> None:
    registered = {f"{e.__module__}.{e.__qualname__}" for e in REASON_ENUMS}
    assert registered.isdisjoint(NOT_REASON_CODES)
    assert string_enums() == registered | NOT_REASON_CODES.keys()


@pytest.mark.parametrize("code", sorted(reason_codes()))
def test_a_code_is_snake_case(code: str) -> None:
    assert re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)*", code)


def test_a_code_defined_twice_is_a_declared_shared_code() -> None:
    shared = {code for code, enums in reason_codes().items() if len(enums) > 1}
    assert shared == SHARED_CODES.keys()


def test_readiness_codes_keep_their_names() -> None:
    # /readyz bodies, tests and contract_check.py read these: a rename is a breaking change
    assert {r.value for r in ReadinessReason} == {"store_unavailable", "actor_down", "supervisor_gave_up"}


async def _crash(*, task_status: TaskStatus[object]) -> None:
    task_status.started()
    raise RuntimeError("crashed")


async def embedding_without_provider() -> CheckFn:
    return embedding_check(None)


async def vector_without_provider() -> CheckFn:
    return vector_check(None)


async def actors_not_started() -> CheckFn:
    return actors_check(Supervisor([ChildSpec("idle", _crash)]))


async def actors_given_up() -> CheckFn:
    supervisor = Supervisor([ChildSpec("crasher", _crash)], SupervisorOptions(max_restarts=0, max_seconds=60.0))
    with pytest.raises(SupervisorGaveUp):
        await supervisor.run()
    return actors_check(supervisor)


@pytest.mark.anyio
@pytest.mark.anyio_backends("asyncio", "trio", real_clock=True)
@pytest.mark.parametrize(
    ("make_check", "reason"),
    [
        (embedding_without_provider, "no_provider"),
        (vector_without_provider, "no_provider"),
        (actors_not_started, "actor_down"),
        (actors_given_up, "supervisor_gave_up"),
    ],
)
async def test_a_failing_check_names_a_registered_code(
    make_check: Callable[[], Awaitable[CheckFn]], reason: str
) -> None:
    check = await (await make_check())()
    assert (check.status, check.reason) == ("fail", reason)
    assert check.reason in reason_codes()
