"""The CI golden set (bench/golden/pgdocs-ci, a subset of the pgdocs set): recall with the local
model holds its floor, and a broken fusion makes the eval fail below it.

The corpus is embedded once (a minute or two on 2 cores). The broken run restarts the daemon on
the same store with a fusion that ignores the full-text route (`[recall] fts_evidence_weights`
all 0: every full-text candidate adds nothing) and evaluates the same namespace, so nothing is
embedded again. What proves the failure is fusion's: the full-text and vector routes answer
exactly as before, only the fused figures fall, and the eval exits 1 naming the floor.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

import pytest

from recalld.eval.golden import load
from recalld.store.embedded import EmbeddedPostgres
from tests.support import ROOT, Daemon, create_database, scratch_dir

CI_SET = ROOT / "bench/golden/pgdocs-ci"
BROKEN_FUSION = {"RECALLD_RECALL_FTS_EVIDENCE_WEIGHTS": "{exact = 0, all_terms = 0, some_terms = 0}"}


def evaluate(daemon: Daemon) -> tuple[int, dict[str, Any], str]:
    env = {**os.environ, "RECALLD_SOCKET": str(daemon.socket)}
    done = subprocess.run(
        [sys.executable, "-m", "recalld", "eval", str(CI_SET), "--namespace", "ci", "--json", "--quiet"],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=ROOT,
    )
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout), done.stderr


def figures(run: dict[str, Any], route: str) -> dict[str, Any]:
    return dict(run["routes"][route]["kinds"])


@pytest.mark.slow
def test_the_ci_set_holds_its_floor_and_a_broken_fusion_falls_below_it(postgres: EmbeddedPostgres) -> None:
    golden = load(CI_SET)
    dsn = create_database(postgres)
    home = scratch_dir("recalld-test-eval-ci-")
    try:
        daemon = Daemon(home, {"RECALLD_STORE_DSN": dsn}).start()
        try:
            code, good, stderr = evaluate(daemon)
        finally:
            assert daemon.stop() == 0
        space = good["space"]["key"]
        assert good["floor"]["verdict"] != "no_floor", (
            f"bench/golden/pgdocs-ci/floor.json has no floor for {space}: run "
            "`recalld eval bench/golden/pgdocs-ci --accept` with this model and commit the file"
        )
        assert code == 0, f"below the floor: {good['floor']}\nmisses: {good['misses']['fused']}\n{stderr}"
        assert good["routes"]["fused"]["degraded"] == 0
        assert good["ingest"]["created"] == len(golden.files)

        broken_daemon = Daemon(home, {"RECALLD_STORE_DSN": dsn, **BROKEN_FUSION}).start()
        try:
            code, broken, _ = evaluate(broken_daemon)
        finally:
            assert broken_daemon.stop() == 0
        assert broken["ingest"]["unchanged"] == len(golden.files)  # same records, same vectors
        assert broken["routes"]["fused"]["fusion"]["evidence"] == {"exact": 0, "all_terms": 0, "some_terms": 0}
        # the routes answer as before: what changed is fusion alone
        assert figures(broken, "fts") == figures(good, "fts")
        assert figures(broken, "vector") == figures(good, "vector")
        # a fusion that drops full text answers as the vector route alone does, which is below
        # the floor: fused recall is worth more than its best route on this set
        assert figures(broken, "fused") == figures(good, "vector")
        assert broken["floor"]["verdict"] == "below_floor", broken["floor"]
        assert broken["floor"]["count"] < good["floor"]["floor"]["count"] <= good["floor"]["count"]
        assert code == 1
        assert broken["passed"] is False
    finally:
        shutil.rmtree(home, ignore_errors=True)
