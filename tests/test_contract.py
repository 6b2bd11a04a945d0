"""The shared client's-eye contract check, run against this build when it is present."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import ROOT

CHECK = ROOT.parent / "shared" / "tools" / "contract_check.py"


@pytest.mark.slow
@pytest.mark.skipif(not CHECK.exists(), reason="../shared/tools/contract_check.py is not beside this checkout")
# `defects` (issue 17: the largest body, CPU per recall against pinned pools, data-file modes,
# usage without a namespace, a misspelled RECALLD_ section) takes about two minutes.
@pytest.mark.parametrize(
    "scenario", ["foundation", "degraded", "generations", "defects", "backup", "resolver", "security"]
)
def test_contract_scenario(scenario: str) -> None:
    done = subprocess.run([sys.executable, str(CHECK), scenario], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
