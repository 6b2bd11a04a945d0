"""Embedding throughput: the raw local model vs the same model through the embedder actor.

    .venv/bin/python -m bench.embed [--repeats 9] [--titles 192] [--chunks 32] [--write docs/BENCHMARKS.md]

Same texts, one process, one run: the raw model (`LocalProvider.encode` on batches of
`max_batch`, called directly) and the actor (`Embedder.embed` from many concurrent callers with
one text each, the shape of real traffic, on the asyncio backend the daemon uses) take turns,
`--repeats` times each, and the medians are compared. Interleaving keeps a busy neighbour on a
shared machine from favouring one side.

Texts are real English from the standard library's docstrings (deterministic for a Python
version): short titles (their first lines) and 256-token chunks (runs of their sentences long
enough to be truncated at the model's 256 tokens).
"""

from __future__ import annotations

import argparse
import inspect
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import anyio

from bench.lib.report import add_result_option, load_average, machine, write_section
from recalld.actors.embedding.embedder import Embedder, EmbedderSettings
from recalld.actors.ports.usage import UsageRow
from recalld.providers.local import MAX_TOKENS, LocalProvider

SOURCE_MODULES = (
    "argparse asyncio collections contextlib csv datetime decimal email enum functools http.client "
    "inspect json logging pathlib pickle re sqlite3 statistics string subprocess tarfile textwrap "
    "threading typing unittest urllib.request uuid zipfile"
).split()


def corpus(n_titles: int, n_chunks: int, model: LocalProvider) -> tuple[list[str], list[str]]:
    import importlib

    docs: list[str] = []
    for name in SOURCE_MODULES:
        module = importlib.import_module(name)
        for _, obj in inspect.getmembers(module):
            doc = inspect.getdoc(obj) if callable(obj) or inspect.isclass(obj) else None
            if doc and doc not in docs:
                docs.append(doc)
    titles: list[str] = []
    for doc in docs:
        first = doc.splitlines()[0].strip()
        if 15 <= len(first) <= 80 and first not in titles:
            titles.append(first)
    prose = " ".join(re.sub(r"\s+", " ", d) for d in docs if ">>>" not in d)
    words = prose.split(" ")
    chunks: list[str] = []
    for start in range(0, len(words), 200):
        chunk = " ".join(words[start : start + 260])
        if model.count_tokens([chunk])[0] >= MAX_TOKENS:  # long enough to fill the window
            chunks.append(chunk)
    if len(titles) < n_titles or len(chunks) < n_chunks:
        raise SystemExit(f"corpus too small: {len(titles)} titles, {len(chunks)} chunks")
    return titles[:n_titles], chunks[:n_chunks]


class NullSink:
    async def record(self, rows: Sequence[UsageRow]) -> None:
        return None


def raw_rate(model: LocalProvider, texts: Sequence[str], batch: int) -> float:
    start = time.perf_counter()
    for i in range(0, len(texts), batch):
        model.encode(texts[i : i + batch])
    return len(texts) / (time.perf_counter() - start)


async def actor_rate(embedder: Embedder, texts: Sequence[str], callers: int) -> tuple[float, float]:
    """(texts/s, share of the wall time the model was busy) for `callers` concurrent callers."""
    pending = iter(range(len(texts)))

    async def caller() -> None:
        for i in pending:
            await embedder.embed([texts[i]], purpose="eval", namespace=None)

    busy = embedder.stats().provider_seconds_total
    start = time.perf_counter()
    async with anyio.create_task_group() as tasks:
        for _ in range(callers):
            tasks.start_soon(caller)
    wall = time.perf_counter() - start
    return len(texts) / wall, (embedder.stats().provider_seconds_total - busy) / wall


async def bench(args: argparse.Namespace) -> str:
    model = LocalProvider()
    model.load()
    titles, chunks = corpus(args.titles, args.chunks, model)
    settings = EmbedderSettings(max_batch=args.max_batch, max_wait_s=args.max_wait_ms / 1000)
    embedder = Embedder(model, usage=NullSink(), settings=settings)
    results: dict[str, dict[str, list[float]]] = {}
    async with anyio.create_task_group() as tasks:
        await tasks.start(embedder.run)
        for label, texts in (("short titles", titles), (f"{MAX_TOKENS}-token chunks", chunks)):
            raw_rate(model, texts[: args.max_batch], args.max_batch)
            await actor_rate(embedder, texts[: args.max_batch], args.callers)  # warm-up
            runs: dict[str, list[float]] = {"raw": [], "actor": [], "ratio": [], "busy": []}
            for repeat in range(args.repeats):
                # Alternate which side goes first, so that drift in a neighbour's load cancels.
                for side in ("raw", "actor") if repeat % 2 == 0 else ("actor", "raw"):
                    if side == "raw":
                        # In a worker thread, like the actor's calls: same cores, same handoff.
                        rate = await anyio.to_thread.run_sync(raw_rate, model, texts, args.max_batch)
                    else:
                        rate, busy = await actor_rate(embedder, texts, args.callers)
                        runs["busy"].append(busy)
                    runs[side].append(rate)
                runs["ratio"].append(runs["actor"][-1] / runs["raw"][-1])
            results[label] = runs
            print(f"{label}: raw {runs['raw']}, actor {runs['actor']}", file=sys.stderr)
        stats = embedder.stats()
        tasks.cancel_scope.cancel()

    counts = {"short titles": len(titles), f"{MAX_TOKENS}-token chunks": len(chunks)}
    lines = [
        "| workload | texts | raw model (texts/s) | through the actor (texts/s) | actor / raw | model busy |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label, runs in results.items():
        raw, actor = statistics.median(runs["raw"]), statistics.median(runs["actor"])
        ratio = statistics.median(runs["ratio"])
        spread = f"{min(runs['ratio']):.0%}–{max(runs['ratio']):.0%}"
        busy = statistics.median(runs["busy"])
        lines.append(f"| {label} | {counts[label]} | {raw:.1f} | {actor:.1f} | {ratio:.0%} ({spread}) | {busy:.1%} |")
    mean_batch = stats.texts_total / max(1, stats.calls_total)
    lines.append("")
    lines.append(
        f"Medians of {args.repeats} interleaved pairs; actor / raw is the median of the pairs' ratios "
        f"(their range in brackets). Model busy: the share of the actor's wall time spent inside "
        f"model calls (what the actor's own work leaves to the model; unlike the rates it hardly "
        f"moves with the machine's load). Actor: {args.callers} concurrent callers with one text each, "
        f"max_batch {args.max_batch}, max_wait {args.max_wait_ms:g} ms; "
        f"mean batch {mean_batch:.1f} texts over {stats.calls_total} model calls."
    )
    return "\n".join(lines)


def write(path: Path, table: str, command: str) -> None:
    """The Embedding section of `path` (between its `embed.py` markers), rewritten in place."""
    load = load_average()
    write_section(
        path,
        "embed.py",
        [
            "## Embedding",
            "",
            "Throughput of the local model (all-MiniLM-L6-v2 int8, onnxruntime on CPU) called directly",
            "(`LocalProvider.encode` on batches of `max_batch`) and through the embedder actor (many",
            "concurrent `Embedder.embed` callers, one text each, merged by micro-batching), same texts,",
            "one run. The aim: the actor reaches at least 90% of the raw model on both.",
            "",
            f"- Machine: {machine()}.",
            f"- Load average at the end: {load}. A shared machine: other work ran alongside, which is",
            "  why the two sides take turns, medians are reported and the ratios spread widely.",
            "- Data: real English from the Python standard library's docstrings: short titles (first",
            "  lines, 15–80 characters) and chunks of about 260 words, each truncated at 256 tokens.",
            f"- Command: `{command}`",
            f"- Date: {datetime.now(UTC):%Y-%m-%d}",
            "",
            table,
            "",
            "Why the actor keeps up with the raw model:",
            "",
            "- the next batch is assembled while the current model call runs, so under load a call",
            "  starts full the moment the previous one ends and `max_wait` costs nothing;",
            "- one worker-thread handoff per batch of up to `max_batch` texts, not one per caller;",
            "- inputs are sorted by length, and the provider groups them into onnxruntime runs of at",
            "  most 2,048 padded tokens, so short and long texts are not padded to each other;",
            "- onnxruntime's threads do not spin, so the event loop gets the CPU between runs.",
        ],
    )


def main(argv: Sequence[str] | None = None, run: Callable[..., str] = anyio.run) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--titles", type=int, default=192)
    parser.add_argument("--chunks", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--callers", type=int, default=64)
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--max-wait-ms", type=float, default=5.0)
    parser.add_argument("--write", type=Path, help="update the Embedding section of this markdown file")
    add_result_option(parser, "models")
    args = parser.parse_args(argv)
    table = run(bench, args)
    print(table)
    command = "python -m bench.embed " + " ".join(argv if argv is not None else sys.argv[1:])
    for path in (args.write, args.result):
        if path is not None:
            write(path, table, command)


if __name__ == "__main__":
    main()
