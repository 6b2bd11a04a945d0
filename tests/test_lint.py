"""The code stays as the house style asks: ruff clean and formatted, mypy --strict on `recalld` and bench/."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.support import ROOT
from tests.support.typecheck import run_mypy

BIN = ROOT / ".venv" / "bin"


def tool(name: str) -> str:
    found = BIN / name if (BIN / name).exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return str(found)


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["check", "format"])
def test_ruff(command: list[str]) -> None:
    done = subprocess.run(
        [tool("ruff"), *command, "actors", "daemon", "tests", "bench"], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-1000:]


@pytest.mark.slow
def test_mypy_strict_on_recalld_and_bench() -> None:
    done = run_mypy()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-1000:]
