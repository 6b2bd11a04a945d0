"""Retrieval quality on a golden set: recalld's routes and fusion vs the raw alternatives.

    .venv/bin/python -m bench.retrieval --data-dir var/retrieval/data [--namespace NS] [--write docs/RETRIEVAL.md]

The set is pgdocs unless `--corpus` and `--questions` name another (bench/golden/README.md: the
manpages set; `--section` then names its own part of the `--write` file).
One run, one corpus, the same MiniLM vectors for every system:

1. Ingest the corpus (`var/golden/pgdocs/`, built by `python -m bench.golden.pgdocs_corpus`) into a
   daemon, in a
   timestamp-suffixed namespace (`--namespace` reuses one already indexed), and wait until the
   vector route has caught up (`pending == 0`). With `--socket` pointing at a running daemon that
   daemon is used; otherwise one is started on `--data-dir` and stopped at the end.
2. Every question through the daemon's socket API: `routes: ["fts"]`, `["vector"]`, and fused
   with each method (`rrf`, `weighted`) under the daemon's configured defaults.
3. In the same run, what a user would pick instead, on the vectors the daemon stored (read from
   its PostgreSQL): raw FAISS (exact inner product over every chunk, best chunk per page), and
   pgvector-python's documented hybrid (examples/hybrid_search/rrf.py: RRF k=60 over the top 20
   chunks of an exact vector search and of a `plainto_tsquery` + `ts_rank_cd` search, in a
   scratch table with a `vector(384)` column in the same PostgreSQL), chunks grouped to pages by
   their best score.
4. Offline, from per-route candidate lists fetched once (the daemon's own full-text code and
   exact vector search, depth 100), every fusion setting of the sweep grid is scored with
   `actors/recall/fusion.py`; settings are chosen on the odd-numbered questions and reported on the
   even-numbered ones (held out) as well as on all. A set whose questions are all `fresh`
   (written after the defaults were frozen) is for checking only: no sweep.

Scores are page level, by actors/recall/metrics.py (the metrics of `recalld eval`): hit@5
counts a question when any expected page is among the first 5 distinct pages; MRR@10 is 1/rank
of the first expected page within the first 10 (0 if none).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np

from bench.lib.daemon import embedded_dsn, start_daemon, stop_daemon, wait_caught_up
from bench.lib.golden import (
    DEFAULT_QUESTIONS,
    Question,
    Run,
    daemon_run,
    ingest_corpus,
    load_questions,
    readiness_space,
)
from bench.lib.paths import ROOT
from bench.lib.pgvector import KEYWORD_SQL, PGVECTOR_K, PGVECTOR_SQL, PGVECTOR_TOP, pgvector_works, vector_codec
from bench.lib.report import progress, publish
from bench.lib.retrieval_report import Raw, build_report
from bench.lib.routes import Corpus, embed_queries, faiss_run, load_corpus, text_lists
from recalld.actors.recall.fusion import RRF_NAME, WEIGHTED_NAME, shared_ranks
from recalld.client import Client
from recalld.config import Config


def _ranks(distances: np.ndarray, top: int) -> list[tuple[int, int]]:
    """(row, SQL RANK()) of the `top` smallest distances: equal distances share a rank."""
    order = [int(row) for row in np.lexsort((np.arange(len(distances)), distances))[:top]]
    return list(zip(order, shared_ranks([float(distances[row]) for row in order]), strict=True))


async def pgvector_run(
    conn: asyncpg.Connection, corpus: Corpus, questions: Sequence[Question], queries: np.ndarray, *, native: bool
) -> Run:
    """pgvector-python's documented hybrid, chunks grouped to pages by their best score.

    `native`: the documented SQL as written, in the daemon's PostgreSQL. Otherwise (pgvector
    crashes on this CPU) the same query computed in two halves: the keyword CTE verbatim in
    PostgreSQL, the semantic CTE (exact cosine distance order, RANK(), top 20) with numpy over
    the same vectors, and the documented RRF sum over both.
    """
    table = f"bench_pgvector_{os.getpid()}"
    if native:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        await vector_codec(conn)
        await conn.execute(
            f"CREATE TABLE {table} (id bigserial PRIMARY KEY, record int, content text, embedding vector(384))"
        )
    else:
        await conn.execute(f"CREATE TABLE {table} (id bigserial PRIMARY KEY, record int, content text)")
    try:
        progress(f"pgvector: copying {len(corpus.vectors)} chunks into {table}")
        rows = [
            (i + 1, int(record), text)
            for i, (record, text) in enumerate(zip(corpus.chunk_record, corpus.chunk_text, strict=True))
        ]
        if native:
            await conn.executemany(
                f"INSERT INTO {table} (id, record, content, embedding) VALUES ($1, $2, $3, $4)",
                [(*row, vector) for row, vector in zip(rows, corpus.vectors, strict=True)],
            )
        else:
            await conn.copy_records_to_table(table, columns=["id", "record", "content"], records=rows)
        await conn.execute(f"CREATE INDEX ON {table} USING GIN (to_tsvector('english', content))")
        await conn.execute(f"ANALYZE {table}")
        run = Run()
        if native:
            statement = await conn.prepare(PGVECTOR_SQL.format(table=table, top=PGVECTOR_TOP))
        else:
            statement = await conn.prepare(KEYWORD_SQL.format(table=table, top=PGVECTOR_TOP))
        for q, vector in zip(questions, queries, strict=True):
            started = time.perf_counter()
            if native:
                fused = [
                    (row["id"] - 1, float(row["score"])) for row in await statement.fetch(vector, q.text, PGVECTOR_K)
                ]
            else:
                keyword = [(row["id"] - 1, row["rank"]) for row in await statement.fetch(q.text)]
                # pgvector's cosine distance; the vectors are unit length
                semantic = _ranks(1.0 - corpus.vectors @ vector, PGVECTOR_TOP)
                scores: dict[int, float] = {}
                for row, rank in [*semantic, *keyword]:
                    scores[row] = scores.get(row, 0.0) + 1.0 / (PGVECTOR_K + rank)
                fused = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
            run.latency_ms.append((time.perf_counter() - started) * 1000)
            best: dict[int, float] = {}
            for row, chunk_score in fused:  # best first: a page keeps its best chunk's score
                best.setdefault(int(corpus.chunk_record[row]), chunk_score)
            run.answers[q.id] = [corpus.pages[corpus.record_ids[r]] for r in best][:10]
        return run
    finally:
        await conn.execute(f"DROP TABLE IF EXISTS {table}")


async def raw_parts(
    dsn: str, namespace: str, questions: Sequence[Question], space: dict[str, Any], space_id: str, *, native: bool
) -> Raw:
    conn = await asyncpg.connect(dsn)
    try:
        corpus = await load_corpus(conn, namespace, space, space_id)
        progress(f"raw parts: {len(corpus.vectors)} stored chunk vectors of {len(corpus.pages)} pages")
        queries, embed_ms = embed_queries(questions, corpus.template_version)
        faiss, vector = faiss_run(corpus, questions, queries)
        progress("raw FAISS done")
        text = await text_lists(conn, namespace, questions)
        pgvector = await pgvector_run(conn, corpus, questions, queries, native=native)
        progress("pgvector documented hybrid done")
        return Raw(faiss, pgvector, text, vector, corpus.pages, embed_ms, len(corpus.vectors), native)
    finally:
        await conn.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT / "var/retrieval/data", help="the daemon's data dir")
    parser.add_argument("--socket", type=Path, help="a running daemon's socket (default: <data-dir>/../recalld.sock)")
    parser.add_argument("--dsn", help="the daemon's PostgreSQL (default: the embedded server in --data-dir)")
    parser.add_argument("--corpus", type=Path, default=ROOT / "var/golden/pgdocs")
    parser.add_argument(
        "--questions",
        type=Path,
        action="append",
        help="a question file; repeat it for several, each reported as its own group (default: pgdocs.toml)",
    )
    parser.add_argument("--namespace", help="reuse this namespace (ingest is then a no-op for unchanged files)")
    parser.add_argument("--dump", type=Path, help="also write per-question route lists (JSON) here")
    parser.add_argument("--write", type=Path, help="replace the measured section of this markdown file")
    parser.add_argument(
        "--section", default="retrieval.py", help="the name of that section's markers (default retrieval.py)"
    )
    args = parser.parse_args(argv)
    args.questions = args.questions or [DEFAULT_QUESTIONS]

    data_dir = args.data_dir.resolve()
    socket = (args.socket or data_dir.parent / "recalld.sock").resolve()
    questions = load_questions(args.questions)
    client = Client(socket, timeout=120)
    daemon = None
    try:
        client.request("GET", "/livez")
        progress(f"using the daemon on {socket}")
    except ConnectionError:
        progress(f"starting recalld serve --data-dir {data_dir} --socket {socket}")
        daemon = start_daemon(data_dir, socket, data_dir.parent / "serve.log")
    try:
        namespace = args.namespace or f"{args.questions[0].stem}-{datetime.now(UTC):%Y%m%dT%H%M%S}"
        ingest_corpus(client, args.corpus.resolve(), namespace, reused=args.namespace is not None)
        wait_caught_up(client)
        space, space_id = readiness_space(client)

        progress(f"{len(questions)} questions through the daemon, per route and fused")
        runs: dict[str, Run] = {}
        runs["fts"] = daemon_run(client, namespace, questions, "fts", routes=["fts"])
        runs["vector"] = daemon_run(client, namespace, questions, "vector", routes=["vector"])
        for method in (RRF_NAME, WEIGHTED_NAME):
            runs[method] = daemon_run(client, namespace, questions, method, fusion=method)
        default = Config().recall.fusion
        runs["default"] = runs[default]

        native = pgvector_works()
        progress(f"pgvector {'works' if native else 'crashes (SIGILL)'} on this machine")
        dsn = args.dsn or embedded_dsn(data_dir)
        raw = asyncio.run(raw_parts(dsn, namespace, questions, space, space_id, native=native))
        if args.dump:
            args.dump.write_text(
                json.dumps(
                    {
                        q.id: {
                            "kind": q.kind,
                            "expected": q.expected,
                            "fts": [(raw.pages[key], s) for key, s in raw.text[q.id]],
                            "vector": [(raw.pages[key], s) for key, s in raw.vector[q.id]],
                        }
                        for q in questions
                    }
                )
            )
        publish(build_report(args, questions, runs, raw, namespace, space), args.write, args.section)
    finally:
        client.close()
        stop_daemon(daemon)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
