"""`recalld mcp`'s wiring, before any MCP: the daemon's config it reads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT


def test_a_config_it_cannot_read_stops_it_before_serving(tmp_path: Path) -> None:
    """`recalld mcp` reads the daemon's config as `recalld serve` does (for recall.max_k): a file
    it cannot read is a usage error, said on stderr, with nothing served on stdout."""
    missing = tmp_path / "absent.toml"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECALLD_")}
    done = subprocess.run(
        [sys.executable, "-m", "daemon", "mcp", "-n", "notes", "--config", str(missing)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done
    assert done.stdout == "", done
    assert f"config file not found: {missing}" in done.stderr, done
