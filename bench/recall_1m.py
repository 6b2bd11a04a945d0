"""Recall at 1M chunks: how cost grows past `python -m bench.recall`'s corpus.

    .venv/bin/python -m bench.recall_1m [--chunks 1000000] [--keep] [--write FILE] [--result NAME]

Embedding a million passages with the local model would take this machine the better part of a
day, so the stored vectors are SYNTHETIC: each chunk's vector is drawn at random near a
32-dimensional subspace of the 384-dimensional space (unit length, `normalize(A z + 0.35 e)`,
so the data has the low intrinsic dimension real text embeddings have, not the worst case of
uniform directions), and so is each title's (the duplicate check's). The texts are real: the
passages of bench/recall.py's corpus (var/bench-recall/corpus.json, built from the man pages
when absent), each used CHUNKS / passages times under its own title, one chunk per record. Queries are real
text, embedded by the daemon's model as any query is, so the vector route's answers mean
nothing here (the query's neighbours are random), but what it costs does: the same HNSW walk.

1. A daemon on a fresh data directory (`[index] factory = "HNSW32"`), then, in its PostgreSQL,
   the records, their chunks, the chunks' vectors, the records' `indexed_records` rows and the
   titles' vectors written directly, in one transaction (a savepoint per BATCH records), as the
   index manager would have stored them: nothing is left for the catch-up to embed.
2. Generation build: the daemon builds its first generation on its own once writes stop; the
   time from the last write to the generation being current.
3. Daemon RSS with the generation loaded (VmRSS), and PostgreSQL's data on disk.
4. Cold start: the daemon stopped and started again; the time until /livez answers and until
   the vector route answers from the generation.
5. `POST /v1/recall` (k 10, both routes) at 1 client with queries never asked (embedding
   included): p50/p95/p99 and each stage's; then at 16 clients with the query vectors cached.
The data directory is deleted at the end unless `--keep`.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np

from bench.lib.corpus import NAMESPACE, load_corpus
from bench.lib.daemon import embedded_dsn, start_daemon, stop_daemon, wait_ready
from bench.lib.load import STAGES, Load, socket_load
from bench.lib.paths import RECALL_WORK
from bench.lib.report import add_result_option, load_average, machine, percentile, progress, publish
from bench.lib.synthetic import RANK, synthetic
from recalld.actors.index.settings import defaults
from recalld.actors.records import content_hash, normalise_title
from recalld.client import Client

BATCH = 5_000
CONFIG = """\
# Written by bench/recall_1m.py.
[index]
factory = "HNSW32"

# Titles are compared with the recall model's vectors (one space; the bench writes them).
[duplicates]
model = "embedding"
time_cap_s = 0.001
"""


async def write(dsn: str, passages: list[dict[str, str]], chunks: int, space_id: str, dimension: int) -> float:
    """Records, chunks, vectors, indexed_records and title vectors, all in one transaction,
    BATCH records a savepoint inside it."""
    rng = np.random.default_rng(2026_12_02)
    basis = rng.standard_normal((RANK, dimension)).astype(np.float32)
    conn = await asyncpg.connect(dsn)
    started = time.perf_counter()
    # One transaction for everything: the daemon sees the rows at once and builds one generation
    # of all of them, instead of one each time its delta outgrows the last (`compact_share`).
    whole = conn.transaction()
    await whole.start()
    try:
        chunker = defaults().chunker  # as the daemon's default [index] chunk_chars and chunk_overlap cut
        for start in range(0, chunks, BATCH):
            n = min(BATCH, chunks - start)
            records, texts, titles = [], [], []
            for i in range(start, start + n):
                passage = passages[i % len(passages)]
                title = f"{i:07d} {passage['title']}"  # unique once folded: a fixed-width number first
                body = passage["body"]
                record_id = uuid.uuid4()
                records.append(
                    (
                        record_id,
                        NAMESPACE,
                        "man",
                        title,
                        normalise_title(title),
                        body,
                        "{}",
                        None,
                        content_hash(kind="man", title=title, body=body, attributes={}, source_path=None),
                    )
                )
                texts.append(body)
                titles.append(normalise_title(title))
            vectors = synthetic(rng, basis, n)
            title_vectors = synthetic(rng, basis, n)
            async with conn.transaction():  # a savepoint inside the whole
                await conn.copy_records_to_table(
                    "records",
                    records=records,
                    columns=[
                        "id",
                        "namespace",
                        "kind",
                        "title",
                        "title_norm",
                        "body",
                        "attributes",
                        "source_path",
                        "content_hash",
                    ],
                )
                ids = [r[0] for r in records]
                surrogates = await conn.fetch(
                    """INSERT INTO chunks (record_id, revision, chunker, chunk_no, namespace, text, text_sha256)
                       SELECT id, 1, $2, 0, $3, text, sha FROM unnest($1::uuid[], $4::text[], $5::text[])
                           WITH ORDINALITY AS u (id, text, sha, n)
                       ORDER BY n
                       RETURNING surrogate, record_id""",
                    ids,
                    chunker,
                    NAMESPACE,
                    texts,
                    [hashlib.sha256(t.encode()).hexdigest() for t in texts],
                )
                row_of = {record_id: i for i, record_id in enumerate(ids)}
                await conn.copy_records_to_table(
                    "chunk_vectors",
                    records=[(space_id, s["surrogate"], vectors[row_of[s["record_id"]]].tobytes()) for s in surrogates],
                    columns=["space_id", "surrogate", "vector"],
                )
                await conn.copy_records_to_table(
                    "indexed_records",
                    records=[(space_id, record_id, 1, chunker) for record_id in ids],
                    columns=["space_id", "record_id", "revision", "chunker"],
                )
                await conn.execute(
                    """INSERT INTO title_vectors (space_id, title_sha256, vector)
                       SELECT $1, k, v FROM unnest($2::text[], $3::bytea[]) AS u (k, v)
                       ON CONFLICT DO NOTHING""",
                    space_id,
                    [hashlib.sha256(t.encode()).hexdigest() for t in titles],
                    [v.tobytes() for v in title_vectors],
                )
            if (start // BATCH) % 20 == 0:
                progress(f"  written {start + n:,}/{chunks:,} ({time.perf_counter() - started:.0f} s)")
        await whole.commit()
        await conn.execute("ANALYZE")
    except BaseException:
        await whole.rollback()
        raise
    finally:
        await conn.close()
    return time.perf_counter() - started


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def du_gib(path: Path) -> float:
    done = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True)
    return int(done.stdout.split()[0]) / 2**30


def generations(socket: Path) -> dict[str, Any]:
    client = Client(socket, timeout=120)
    try:
        answer: dict[str, Any] = client.request("GET", "/v1/generations")
        return answer
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=1_000_000)
    parser.add_argument("--work", type=Path, default=RECALL_WORK.with_name("bench-recall-1m"))
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    parser.add_argument("--reuse", action="store_true", help="measure the data a --keep run left")
    parser.add_argument("--build-deadline-s", type=float, default=3 * 3600, help="give up waiting for the build")
    parser.add_argument("--write", type=Path, help="replace this markdown file's recall_1m.py section")
    add_result_option(parser, "scale")
    parser.add_argument(
        "--fts-waits",
        choices=("auto", "always", "never"),
        help="the measured daemon's [recall] fts_waits_for_embedding (default: the daemon's own)",
    )
    args = parser.parse_args(argv)
    command = shlex.join([".venv/bin/python", "-m", "bench.recall_1m", *(sys.argv[1:] if argv is None else argv)])
    work = args.work.resolve()
    figures: dict[str, Any] = {}
    if args.reuse:
        figures = json.loads((work / "figures.json").read_text())
    else:
        if work.exists():
            shutil.rmtree(work)
        work.mkdir(parents=True)
        (work / "recalld.toml").write_text(CONFIG)
        if not build(args, work, figures):
            return 1
    return measure(args, command, work, figures)


def build(args: argparse.Namespace, work: Path, figures: dict[str, Any]) -> bool:
    """Write the rows, wait for the generation; False if the build outlasted its deadline."""
    socket, config, log = work / "recalld.sock", work / "recalld.toml", work / "serve.log"
    corpus = load_corpus(RECALL_WORK / "corpus.json", 100_000, 1_500)
    daemon = start_daemon(work / "data", socket, log, config=config)
    try:
        client = Client(socket, timeout=120)
        try:
            for _ in range(600):
                detail = client.request("GET", "/readyz")["checks"]["embedding"]["detail"]
                if detail.get("space_id"):
                    break
                time.sleep(0.2)
        finally:
            client.close()
        space_id, dimension = detail["space_id"], int(detail["space"]["dimension"])
        dsn = embedded_dsn(work / "data")
        progress(f"writing {args.chunks:,} records with synthetic vectors in space {space_id}")
        figures["write_s"] = asyncio.run(write(dsn, corpus["records"], args.chunks, space_id, dimension))
        written = time.perf_counter()
        progress("waiting for the daemon to build its generation")
        while True:
            state = generations(socket)
            current = state.get("current") or {}
            if int(current.get("count") or 0) >= args.chunks:
                break
            if time.perf_counter() - written > args.build_deadline_s:
                figures["build_unfinished"] = state.get("builds", [])[:1]
                figures["build_waited_s"] = time.perf_counter() - written
                progress(f"the build did not finish in time: {json.dumps(figures, default=str)}")
                (work / "figures.json").write_text(json.dumps(figures, default=str))
                return False
            time.sleep(2)
        figures["build_s"] = time.perf_counter() - written
        figures["generation"] = current
        wait_ready(socket)
        figures["rss_warm_mib"] = rss_mib(daemon.pid)
    finally:
        stop_daemon(daemon)
    figures["disk_gib"] = du_gib(work / "data")
    figures["passages"] = len(corpus["records"])
    (work / "figures.json").write_text(json.dumps(figures, default=str))
    progress(f"built: {json.dumps(figures, default=str)}")
    return True


def measure(args: argparse.Namespace, command: str, work: Path, figures: dict[str, Any]) -> int:
    socket, config, log = work / "recalld.sock", work / "recalld.toml", work / "serve.log"
    if args.fts_waits:
        config = work / "recalld-measure.toml"
        config.write_text(f'{CONFIG}\n[recall]\nfts_waits_for_embedding = "{args.fts_waits}"\n')
    corpus = load_corpus(RECALL_WORK / "corpus.json", 100_000, 1_500)
    queries: list[str] = corpus["queries"][: args.queries * 2]

    started = time.perf_counter()
    daemon = start_daemon(work / "data", socket, log, config=config)
    try:
        figures["livez_s"] = time.perf_counter() - started
        wait_ready(socket)
        figures["ready_s"] = time.perf_counter() - started
        figures["rss_cold_mib"] = rss_mib(daemon.pid)
        new, again = queries[1 : args.queries + 1], queries[1 : args.queries + 1]
        one = asyncio.run(socket_load(socket, new, 1, "recalld"))
        many = asyncio.run(socket_load(socket, again * 2, 16, "recalld"))
        figures["rss_after_mib"] = rss_mib(daemon.pid)
    finally:
        stop_daemon(daemon)
    if not args.keep:
        shutil.rmtree(work)
    publish(report(args, command, figures, one, many), args.write, "recall_1m.py", result=args.result)
    return 0


def _ms(values: list[float]) -> str:
    return " / ".join(f"{percentile(values, q):.1f}" for q in (50, 95, 99)) if values else "–"


def report(args: argparse.Namespace, command: str, f: dict[str, Any], one: Load, many: Load) -> list[str]:
    lines = [
        f"### Recall at {args.chunks:,} chunks (synthetic vectors)",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {machine()}; load average at the end {load_average()}.",
        "",
        f"- Data: {args.chunks:,} records of one chunk each, one namespace: the {f['passages']:,} man-page"
        " passages of bench/recall.py, each under several titles; **stored vectors synthetic** (random,"
        f" near a {RANK}-dimensional subspace, 384 dimensions; see the script), written straight into PostgreSQL;"
        f' `[index] factory = "HNSW32"`, generation `{f["generation"]["id"]}` with {f["generation"]["count"]:,}'
        " vectors. Queries: real text (man pages' NAME descriptions and option names), embedded by the daemon.",
        f"- Command: `{command}`.",
        f"- `[recall] fts_waits_for_embedding`: {args.fts_waits or 'the default'}.",
        "",
        "| measure | value |",
        "| --- | ---: |",
        f"| writing the rows (records, chunks, vectors, title vectors) | {f['write_s']:.0f} s |",
        f"| generation build, from the last write to current | {f['build_s']:.0f} s |",
        f"| PostgreSQL and generation files on disk | {f['disk_gib']:.1f} GiB |",
        f"| daemon RSS after the build / after a cold start / after the loads | {f['rss_warm_mib']:.0f} /"
        f" {f['rss_cold_mib']:.0f} / {f['rss_after_mib']:.0f} MiB |",
        f"| cold start: /livez answers / the vector route answers | {f['livez_s']:.1f} s / {f['ready_s']:.1f} s |",
        f"| new queries, 1 client: latency p50 / p95 / p99 | {_ms(one.latency_ms)} ms |",
        f"| new queries, 1 client: throughput | {one.throughput:.0f} queries/s |",
        f"| repeated queries (vector cached), 16 clients: latency p50 / p95 / p99 | {_ms(many.latency_ms)} ms |",
        f"| repeated queries, 16 clients: throughput | {many.throughput:.0f} queries/s |",
        f"| answers with a degraded route | {one.degraded + many.degraded} |",
        "",
        "Stages inside recalld (`timings_ms`), p50 / p95 / p99 in ms:",
        "",
        "| queries | clients | " + " | ".join(STAGES) + " |",
        "| --- | ---: | " + " | ".join("---:" for _ in STAGES) + " |",
    ]
    for label, load in (("new queries", one), ("repeated queries", many)):
        lines.append(f"| {label} | {load.clients} | " + " | ".join(_ms(load.stages.get(s, [])) for s in STAGES) + " |")
    lines.append("")
    lines.append(f"Raw figures: `{json.dumps({k: v for k, v in f.items() if k != 'generation'}, default=str)}`.")
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
