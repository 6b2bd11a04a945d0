"""`@pytest.mark.exclusive` (tests/support/exclusive.py): under pytest-xdist, such a test runs
with no other test beside it, while the other tests still run side by side."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

LOGGING = """
import time
from pathlib import Path

def log(name, what):
    with open(Path(__file__).parent / "log", "a") as out:
        out.write(f"{name} {what} {time.monotonic()}\\n")

def hold(name, seconds):
    log(name, "start")
    time.sleep(seconds)
    log(name, "end")
"""


def intervals(log: Path) -> dict[str, tuple[float, float]]:
    seen: dict[str, dict[str, float]] = {}
    for line in log.read_text().splitlines():
        name, what, at = line.split()
        seen.setdefault(name, {})[what] = float(at)
    return {name: (times["start"], times["end"]) for name, times in seen.items()}


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_an_exclusive_test_runs_alone_and_the_others_side_by_side(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        f"import sys\nsys.path.insert(0, {str(REPO)!r})\npytest_plugins = ['tests.support.exclusive']\n"
    )
    pytester.makepyfile(
        logging_helpers=LOGGING,
        test_plain="""
import pytest
from logging_helpers import hold

@pytest.mark.parametrize("i", range(6))
def test_plain(i):
    hold(f"plain{i}", 0.5)
""",
        test_alone="""
import pytest
from logging_helpers import hold

@pytest.mark.exclusive
@pytest.mark.parametrize("i", range(2))
def test_alone(i):
    hold(f"alone{i}", 1.0)

@pytest.mark.parametrize("i", range(4))
def test_plain_too(i):
    hold(f"other{i}", 0.5)
""",
    )
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "load", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=12)
    held = intervals(pytester.path / "log")
    alone = [name for name in held if name.startswith("alone")]
    beside = [(a, b) for a in alone for b in held if b != a and overlap(held[a], held[b])]
    assert not beside, f"exclusive tests ran beside others: {beside}"
    others = [name for name in held if name not in alone]
    assert any(overlap(held[a], held[b]) for a in others for b in others if a < b), "no two tests ran side by side"
