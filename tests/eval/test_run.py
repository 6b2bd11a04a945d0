"""The parts of an eval run that need no daemon: its namespace, its scores, its misses."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from recalld.client.ingest import Summary
from recalld.eval.floor import SpaceIdentity
from recalld.eval.golden import GoldenQuestion, GoldenSet
from recalld.eval.run import EvalRun, RouteRun, namespace_for

NOW = dt.datetime(2026, 12, 2, 0, 30, 5, tzinfo=dt.UTC)


def golden(name: str = "handbook") -> GoldenSet:
    return GoldenSet(
        name=name,
        description="",
        source=Path("/sets/handbook/questions.toml"),
        corpus=Path("/sets/handbook/corpus"),
        floor_path=Path("/sets/handbook/floor.json"),
        questions=(
            GoldenQuestion("a", "natural", "how", ("x.md",)),
            GoldenQuestion("b", "identifier", "--flag", ("y.md", "z.md")),
        ),
        files=("x.md", "y.md", "z.md", "w.md"),
    )


def test_the_namespace_is_the_sets_name_and_the_utc_time() -> None:
    assert namespace_for(golden(), NOW) == "eval-handbook-20261202T003005Z"
    assert namespace_for(golden(), NOW.astimezone(dt.timezone(dt.timedelta(hours=2)))) == namespace_for(golden(), NOW)
    long = namespace_for(golden("x" * 500), NOW)
    assert len(long) <= 128 and long.startswith("eval-xxx") and long.endswith("-20261202T003005Z")


def test_scores_count_and_misses_say_what_came_first() -> None:
    run = EvalRun(golden(), "ns", SpaceIdentity("local", "m", 384, 1), "vs1", NOW, Summary())
    run.runs["fused"] = RouteRun("fused", answers={"a": ["w.md", "x.md"], "b": ["w.md"] * 3 + ["(stray)"]})
    run.runs["fused"].latency_ms = [10.0, 30.0, 20.0]
    assert run.count("fused") == (1, 2)
    assert run.count("vector") is None
    assert run.scores()["fused"]["identifier"].hits == 0
    assert run.misses("fused") == [
        {
            "id": "b",
            "kind": "identifier",
            "question": "--flag",
            "expected": ["y.md", "z.md"],
            "rank": None,
            "first": ["w.md", "(stray)"],
        }
    ]
    assert run.runs["fused"].latency() == {"p50": 20.0, "p95": 30.0}
    assert run.golden.relative("/sets/handbook/corpus/x.md") == "x.md"
