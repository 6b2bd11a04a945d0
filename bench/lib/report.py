"""How a bench reports: progress lines, the machine's description, percentiles, and markdown
sections rewritten in place (`--write`)."""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bench.lib.paths import ROOT, result_file


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{model}, {cores} cores, Python {platform.python_version()}, {platform.system()} {platform.machine()}"


def load_average() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else float("nan")


def p50_p95_p99(values: Sequence[float]) -> str:
    """`p50 / p95 / p99` to a tenth, or `–` for no values: the latency cell of the recall tables."""
    return " / ".join(f"{percentile(values, q):.1f}" for q in (50, 95, 99)) if values else "–"


def write_section(path: Path, name: str, lines: list[str]) -> None:
    """Replace what lies between the `<!-- NAME: begin -->` and `<!-- NAME: end -->` markers of
    `path` (appended when absent), so a rerun rewrites only its own results."""
    begin, end = f"<!-- {name}: begin -->", f"<!-- {name}: end -->"
    text = path.read_text() if path.exists() else ""
    block = "\n".join([begin, *lines, end])
    if begin in text and end in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def write_option(doc: str, name: str, argv: list[str] | None) -> Path | None:
    """The command line of a bench with only `--write PATH` (its section `name` in PATH)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--write", type=Path, help=f"replace this markdown file's {name} section")
    path: Path | None = parser.parse_args(argv).write
    return path


def add_result_option(parser: argparse.ArgumentParser, topic: str) -> None:
    """`--result NAME`: keep the report in bench/results/TOPIC/<today>-NAME.md (`args.result`, a
    path, or None), as the reports kept there are filed."""
    parser.add_argument(
        "--result",
        metavar="NAME",
        type=lambda name: result_file(topic, name),
        help=f"also keep the report as bench/results/{topic}/<today>-NAME.md",
    )


def publish(lines: list[str], path: Path | None, name: str, *, result: Path | None = None) -> None:
    """Print a report, and with `--write` also put it in `path`'s section `name`; with `--result`,
    in that section of the results file too."""
    print("\n".join(lines))
    for target in (path, result):
        if target is not None:
            write_section(target, name, lines)
            progress(f"wrote {target}")


def commit(tree: Path = ROOT) -> str:
    """The commit `tree` is at, marked when the code a bench runs (daemon/, actors/, bench/) has
    uncommitted changes: a report names the code that made it."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=tree, capture_output=True, text=True, check=False).stdout.strip()

    changed = git("status", "--porcelain", "--", "daemon", "actors", "bench")
    return git("rev-parse", "--short", "HEAD") + (" (with uncommitted changes)" if changed else "")
