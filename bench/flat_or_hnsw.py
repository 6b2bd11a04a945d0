"""Flat or HNSW: from how many vectors a graph search costs less than scoring every vector.

For each size, the same vectors go into the two index types a generation may use, built as the
daemon builds them (`IndexIDMap2` over `Flat` or `HNSW32` with the daemon's efConstruction,
inner product), and one query at a time is searched on one thread for the 60 best vectors (the
vector route's first fetch for its 30 records), HNSW at the daemon's default beam. Unfiltered,
one namespace: the route also passes namespace and tombstone selectors, and in an HNSW
generation scores a namespace of at most 4,096 vectors one by one. Printed per size: each
type's median search time, HNSW's recall@10 against the flat (exact) answer, and HNSW's build
time on all cores.

Vectors are synthetic (bench/lib/synthetic.py: unit vectors near a 32-dimensional subspace, the
low intrinsic dimension of text embeddings); queries are drawn the same way and are not in the
index. With `--real WORK` the 8,000 model vectors bench/recall.py stored in WORK's data
directory (and the corpus's queries, embedded by the local model) are measured too.

    .venv/bin/python -m bench.flat_or_hnsw [--sizes 2000,5000,...] [--queries 300] [--write FILE] [--result NAME]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import faiss
import numpy as np

from bench.lib.report import add_result_option, load_average, machine, progress, publish
from bench.lib.synthetic import RANK, synthetic
from recalld.actors.index.generation import HNSW_EF_CONSTRUCTION, new_index
from recalld.actors.index.settings import HNSW_EF_SEARCH
from recalld.actors.index.vectors import BUILD_THREADS, one_thread_per_search, search_parameters

DIMENSION = 384
FETCH = 60
"""Vectors a search asks for: the vector route's first fetch, 2 x its 30 records."""
SIZES = (2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000)


def built(factory: str, vectors: np.ndarray) -> tuple[faiss.Index, float]:
    index = new_index(DIMENSION, factory, HNSW_EF_CONSTRUCTION, HNSW_EF_SEARCH)
    faiss.omp_set_num_threads(BUILD_THREADS)
    started = time.perf_counter()
    index.add_with_ids(vectors, np.arange(len(vectors), dtype=np.int64))
    return index, time.perf_counter() - started


def timed(index: faiss.Index, queries: np.ndarray, params: faiss.SearchParameters | None) -> tuple[float, np.ndarray]:
    """Median ms of one-query searches on one thread, and every query's ids."""
    one_thread_per_search()
    times, found = [], []
    for query in queries:
        started = time.perf_counter()
        _, ids = index.search(query[None, :], FETCH, params=params)
        times.append(time.perf_counter() - started)
        found.append(ids[0])
    return statistics.median(times) * 1000, np.stack(found)


def row(label: str, vectors: np.ndarray, queries: np.ndarray) -> str:
    progress(f"{label}: {len(vectors):,} vectors")
    flat, _ = built("Flat", vectors)
    hnsw, build_s = built("HNSW32", vectors)
    flat_ms, exact = timed(flat, queries, None)
    hnsw_ms, approximate = timed(hnsw, queries, search_parameters(None, ef_search=max(HNSW_EF_SEARCH, FETCH)))
    recall = np.mean([len(set(a[:10]) & set(e[:10])) / 10 for a, e in zip(approximate, exact, strict=True)])
    return (
        f"| {label} | {len(vectors):,} | {flat_ms:.3f} | {hnsw_ms:.3f} | {flat_ms / hnsw_ms:.2f} | {recall:.3f} |"
        f" {build_s:.1f} |"
    )


def real_vectors(work: Path, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The chunk vectors bench/recall.py stored in WORK, and `count` of its queries embedded."""
    import json

    from bench.lib.daemon import start_daemon, stop_daemon
    from bench.lib.head_to_head import served_raw_parts
    from recalld.actors.embedding.template import render_query

    socket = work / "flat-or-hnsw.sock"
    daemon = start_daemon(work / "data", socket, work / "flat-or-hnsw.log")
    try:
        _, _, raw = served_raw_parts(work, socket)
    finally:
        stop_daemon(daemon)
    texts = json.loads((work / "corpus.json").read_text())["queries"][:count]
    queries, _ = raw.model.encode([render_query(text, version=raw.template_version).text for text in texts])
    return np.ascontiguousarray(raw.stored.vectors), queries


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="vector counts, comma-separated")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--real", type=Path, help="also bench/recall.py's stored vectors in this WORK directory")
    parser.add_argument("--write", type=Path, help="replace this markdown file's flat_or_hnsw.py section")
    add_result_option(parser, "index")
    args = parser.parse_args()
    rng = np.random.default_rng(24)
    basis = rng.standard_normal((RANK, DIMENSION)).astype(np.float32)
    queries = synthetic(rng, basis, args.queries)
    rows = [row("synthetic", synthetic(rng, basis, int(size)), queries) for size in args.sizes.split(",")]
    if args.real is not None:
        vectors, real_queries = real_vectors(args.real.resolve(), args.queries)
        rows.append(row("man-page passages, the local model", vectors, real_queries))
    lines = [
        f"Measured {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC on {machine()}; load average at the"
        f" end {load_average()}. Command: `.venv/bin/python -m bench.flat_or_hnsw {' '.join(sys.argv[1:])}`.",
        "",
        f"One query at a time on one thread, the {FETCH} best vectors; HNSW32 with efConstruction"
        f" {HNSW_EF_CONSTRUCTION} searched at efSearch {max(HNSW_EF_SEARCH, FETCH)}; build on {BUILD_THREADS} threads;"
        f" {args.queries} queries, medians.",
        "",
        "| vectors | count | Flat ms | HNSW32 ms | Flat / HNSW | HNSW recall@10 | HNSW build s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
    ]
    publish(lines, args.write, "flat_or_hnsw.py", result=args.result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
