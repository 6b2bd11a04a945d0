"""How long a `recalld` client command takes from the shell: `recalld --version` and `recalld
recall ...` against the floor a Python client pays anyway, `python -c "import httpx, msgspec"`,
in one run, the three taking turns.

`recall` asks a daemon this script starts on a fresh data directory (embedded PostgreSQL, the
local model) with one record, so the answer is small and the time is the command's own: start
Python, import the CLI, connect, ask, print. Medians of `--rounds` (and their ratios to the
floor's median).

    .venv/bin/python -m bench.cli_startup [--rounds 30] [--write FILE] [--result NAME]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench.lib.daemon import start_daemon, stop_daemon
from bench.lib.paths import ROOT
from bench.lib.report import add_result_option, load_average, machine, progress, publish
from recalld.client import Client

PYTHON = str(ROOT / ".venv/bin/python")
RECALLD = str(ROOT / ".venv/bin/recalld")
SECTION = "cli_startup.py"


def timed(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--write", type=Path, help="replace this markdown file's section with the results")
    add_result_option(parser, "cli")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="recalld-bench-cli-") as work:
        home = Path(work)
        home.chmod(0o755)  # as root, the embedded PostgreSQL runs as the user recalld: it must get in
        socket = home / "recalld.sock"
        daemon = start_daemon(home / "data", socket, home / "recalld.log")
        try:
            with Client(socket) as client:
                client.create_record("bench", "note", "Refunds need two approvals", "Above 500 EUR.")
            env = {**os.environ, "RECALLD_SOCKET": str(socket)}
            commands = {
                "python -c 'import httpx, msgspec' (the floor)": [PYTHON, "-c", "import httpx, msgspec"],
                "recalld --version": [RECALLD, "--version"],
                "recalld recall -n bench 'who approves refunds'": [
                    RECALLD,
                    "recall",
                    "-n",
                    "bench",
                    "who approves refunds",
                    "--route",
                    "fts",
                ],
            }
            for command in commands.values():  # warm: the files in the page cache, the daemon's first answer
                timed(command, env)
            seconds: dict[str, list[float]] = {name: [] for name in commands}
            for round_ in range(args.rounds):
                for name, command in commands.items():
                    seconds[name].append(timed(command, env))
                if round_ % 10 == 9:
                    progress(f"round {round_ + 1}/{args.rounds}")
        finally:
            stop_daemon(daemon)
    floor = statistics.median(next(iter(seconds.values())))
    lines = [
        "## Client command start-up",
        "",
        "A client command's wall time from the shell against what a Python program that talks to the",
        "daemon pays anyway (the interpreter, httpx and msgspec). The CLI's client-side commands import",
        "the client side only (daemon/wire, daemon/client): no aiohttp server, asyncpg, FAISS or numpy",
        "(tests/cli/test_cli_imports.py checks `sys.modules` after each). The aim: at most 2x the floor.",
        "",
        f"- Machine: {machine()}; load average at the end: {load_average()}.",
        "- The recall asks a daemon on a fresh data directory with one record, over full text.",
        f"- Command: `.venv/bin/python -m bench.cli_startup --rounds {args.rounds} --write docs/BENCHMARKS.md`",
        f"- Date: {time.strftime('%Y-%m-%d')}",
        "",
        "| command | median (ms) | p90 (ms) | / floor |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, values in seconds.items():
        median = statistics.median(values)
        p90 = sorted(values)[int(0.9 * (len(values) - 1))]
        lines.append(f"| `{name}` | {median * 1000:.0f} | {p90 * 1000:.0f} | {median / floor:.2f}x |")
    lines += ["", f"Medians of {args.rounds} rounds, the three commands taking turns in each."]
    publish(lines, args.write, SECTION, result=args.result)


if __name__ == "__main__":
    main()
