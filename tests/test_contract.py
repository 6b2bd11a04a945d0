"""The shared client's-eye contract check, run against this build when it is present."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import ROOT

CHECK = ROOT.parent / "shared" / "tools" / "contract_check.py"


@pytest.mark.slow
@pytest.mark.skipif(not CHECK.exists(), reason="../shared/tools/contract_check.py is not beside this checkout")
# `defects` is left out: it takes about three minutes and each of its checks has an
# in-repo test (tests/actors/index/test_large_record_daemon.py, test_native_threads.py,
# test_data_permissions.py, test_cli.py's usage without a namespace, test_config.py's misspelled
# RECALLD_ section); run it by hand with `python3 ../shared/tools/contract_check.py defects`.
# `crash` likewise: tests/store/test_sigkill.py kills the daemon thirty times in the suite.
@pytest.mark.parametrize(
    "scenario", ["foundation", "degraded", "generations", "backup", "resolver", "security", "trust"]
)
def test_contract_scenario(scenario: str) -> None:
    done = subprocess.run([sys.executable, str(CHECK), scenario], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
