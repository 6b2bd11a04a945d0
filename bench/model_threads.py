"""The local model's cost per onnxruntime run against the run's size, on one thread and on all
cores: where a second thread starts to pay.

The daemon runs the model with every core's thread (`daemon/providers/local.py`), one run at a
time. A query is one short run: if one thread embeds it as fast, the other threads only add CPU.
Each size is one `encode` call of `rows` texts of `width` tokens (common words, [CLS] and [SEP]
included; all of them fit one run), timed RUNS times per thread count; wall time is the median,
CPU the process's user + system time per call.

    .venv/bin/python -m bench.model_threads [--write FILE] [--result NAME]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from bench.lib.report import add_result_option, machine, publish
from recalld.providers.local import LocalProvider, default_threads

SIZES = ((1, 8), (1, 12), (1, 16), (1, 24), (1, 32), (1, 64), (2, 64), (1, 256), (8, 256))
"""(rows, tokens) per run: query lengths first, then a chunk and a batch of chunks."""
RUNS = 30


WORDS = "the index of a table is read when the query asks for a few rows of it".split()


def texts(rows: int, width: int) -> list[str]:
    """`rows` texts of `width` tokens each: common words (one token apiece), [CLS] and [SEP]."""
    return [" ".join(WORDS[(row + i) % len(WORDS)] for i in range(width - 2)) for row in range(rows)]


def timed(provider: LocalProvider, batch: list[str]) -> tuple[float, float]:
    """Median wall ms and mean CPU ms of RUNS `encode` calls of `batch`."""
    provider.encode(batch)  # the first run of a shape allocates
    walls, cpu = [], time.process_time()
    for _ in range(RUNS):
        started = time.perf_counter()
        provider.encode(batch)
        walls.append(time.perf_counter() - started)
    return statistics.median(walls) * 1000, (time.process_time() - cpu) / RUNS * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", type=Path)
    add_result_option(parser, "models")
    args = parser.parse_args()
    cores = default_threads()
    providers = {1: LocalProvider(threads=1), cores: LocalProvider(threads=cores)}
    for provider in providers.values():
        provider.load()
    lines = [
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {machine()}.",
        "",
        "Command: `.venv/bin/python -m bench.model_threads" + (f" --write {args.write}`" if args.write else "`"),
        "",
        f"| run (texts × tokens) | 1 thread: wall / CPU ms | {cores} threads: wall / CPU ms | wall, 1 / {cores} |",
        "| --- | ---: | ---: | ---: |",
    ]
    for rows, width in SIZES:
        batch = texts(rows, width)
        assert providers[1].count_tokens(batch) == [width] * rows
        one, many = (timed(providers[threads], batch) for threads in (1, cores))
        lines.append(
            f"| {rows} × {width} | {one[0]:.2f} / {one[1]:.2f} | {many[0]:.2f} / {many[1]:.2f} |"
            f" {one[0] / many[0]:.2f} |"
        )
    publish(lines, args.write, "model_threads.py", result=args.result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
