"""Where the benches keep what they build and what they report."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The checkout the bench runs from: its `.venv`, `var/` and the daemon's code."""

RECALL_WORK = ROOT / "var/bench-recall"
"""Where `python -m bench.recall` keeps its corpus, data directory, socket and log (its `--work`)."""
RECALL_QUICK_WORK = ROOT / "var/bench-recall-quick"
"""Where `python -m bench.recall --quick` keeps them (8,000 passages), the corpus the probes of the
read path measure on by default."""

RESULTS = ROOT / "bench/results"
"""Reports kept as printed, filed by topic and date: `RESULTS/<topic>/<YYYY-MM-DD>-<name>.md`."""


def result_file(topic: str, name: str) -> Path:
    """The file a report of `topic` named `name` is kept in, dated today (UTC): the date of the
    commit that adds it, when it is committed the same day."""
    return RESULTS / topic / f"{datetime.now(UTC):%Y-%m-%d}-{name}.md"
