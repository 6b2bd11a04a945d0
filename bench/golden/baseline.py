"""Full-text-only baseline for the pgdocs golden set, with no recalld code in the retrieval path.

Loads the generated corpus (one row per page) into PostgreSQL, then answers every question with
plain `websearch_to_tsquery('english', question)` and `ts_rank` over title + body, exactly as a
developer would write it, and reports hit@5 and MRR@10 at page level per kind. By default it
starts a throwaway embedded PostgreSQL (recalld.store.embedded, the server recalld itself uses)
in a fresh directory under /tmp; `--dsn` uses an existing server instead (the table is created
as a TEMP table, so nothing is left behind).

    .venv/bin/python -m bench.golden.baseline [--corpus DIR] [--questions FILE] [--dsn DSN] [--misses]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import asyncpg

from bench.golden.check_questions import (
    DEFAULT_CORPUS,
    DEFAULT_QUESTIONS,
    KINDS,
    Question,
    check_corpus,
    load_questions,
)
from recalld.actors.recall.metrics import first_rank

if TYPE_CHECKING:
    from recalld.store.embedded import EmbeddedPostgres

HIT_AT = 5
MRR_AT = 10

SCHEMA = """
CREATE TEMP TABLE golden_pages (
    stem  text PRIMARY KEY,
    title text NOT NULL,
    body  text NOT NULL,
    tsv   tsvector GENERATED ALWAYS AS (to_tsvector('english', title || ' ' || body)) STORED
);
"""
INDEX = "CREATE INDEX ON golden_pages USING gin (tsv); ANALYZE golden_pages;"
SEARCH = """
SELECT p.stem
FROM golden_pages AS p, websearch_to_tsquery('english', $1) AS q
WHERE p.tsv @@ q
ORDER BY ts_rank(p.tsv, q) DESC, p.stem
LIMIT $2
"""


def read_corpus(corpus: Path) -> list[tuple[str, str, str]]:
    """(stem, title, body) per page: the title is the first line, the body the rest."""
    rows = []
    for path in sorted(corpus.glob("*.txt")):
        title, _, body = path.read_text(encoding="utf-8").partition("\n")
        rows.append((path.stem, title.strip(), body.strip()))
    return rows


def first_hit_rank(ranked: Sequence[str], expected: Sequence[str]) -> int | None:
    """1-based rank of the first result that is any expected page (within MRR@10), or None:
    the criterion of `recalld eval`, actors/recall/metrics.py."""
    return first_rank(ranked, expected, MRR_AT)


async def run(dsn: str, rows: list[tuple[str, str, str]], questions: list[Question]) -> dict[str, list[str]]:
    """Load the pages and answer every question; returns each question's ranked stems."""
    conn = await asyncpg.connect(dsn)
    try:
        started = time.monotonic()
        await conn.execute(SCHEMA)
        await conn.copy_records_to_table("golden_pages", records=rows, columns=["stem", "title", "body"])
        await conn.execute(INDEX)
        version = await conn.fetchval("SHOW server_version")
        print(
            f"loaded {len(rows)} pages into PostgreSQL {version} in {time.monotonic() - started:.1f}s",
            file=sys.stderr,
        )
        results: dict[str, list[str]] = {}
        for q in questions:
            found = await conn.fetch(SEARCH, q.question, MRR_AT)
            results[q.id] = [record["stem"] for record in found]
        return results
    finally:
        await conn.close()


def report(questions: list[Question], results: dict[str, list[str]], misses: bool) -> None:
    print("Full-text only: websearch_to_tsquery('english', q) + ts_rank over title+body, page level\n")
    print(f"| kind | questions | hit@{HIT_AT} | MRR@{MRR_AT} | no match at all |")
    print("|---|---:|---:|---:|---:|")
    for kind in (*KINDS, "all"):
        chosen = [q for q in questions if kind in ("all", q.kind)]
        if not chosen:
            continue
        ranks = [first_hit_rank(results[q.id], q.expected) for q in chosen]
        hits = sum(1 for rank in ranks if rank is not None and rank <= HIT_AT)
        mrr = sum(1.0 / rank for rank in ranks if rank is not None) / len(chosen)
        empty = sum(1 for q in chosen if not results[q.id])
        print(f"| {kind} | {len(chosen)} | {hits}/{len(chosen)} | {mrr:.3f} | {empty} |")
    if misses:
        print(f"\nMisses (no expected page in the top {HIT_AT}):\n")
        for q in questions:
            rank = first_hit_rank(results[q.id], q.expected)
            if rank is None or rank > HIT_AT:
                top = ", ".join(results[q.id][:3]) or "(nothing)"
                print(f"- {q.id} [{q.kind}] {q.question!r}: rank {rank or '-'}; top: {top}")


def start_embedded() -> tuple[EmbeddedPostgres, Path, str]:
    """A throwaway embedded server under /tmp: (server, its directory, DSN)."""
    from recalld.store.embedded import EmbeddedPostgres

    workdir = Path(tempfile.mkdtemp(prefix="recalld-golden-"))
    os.chmod(workdir, 0o755)  # the server may run as the unprivileged `recalld` user
    server = EmbeddedPostgres(workdir)
    return server, workdir, server.start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help=f"default {DEFAULT_CORPUS}")
    parser.add_argument("--questions", type=Path, default=DEFAULT_QUESTIONS, help="the set (TOML)")
    parser.add_argument("--dsn", help="use this PostgreSQL instead of starting an embedded one")
    parser.add_argument("--misses", action="store_true", help="list the questions missed at hit@5")
    args = parser.parse_args(argv)
    if not args.corpus.is_dir():
        print(f"no corpus at {args.corpus}: run `python -m bench.golden.pgdocs_corpus` first", file=sys.stderr)
        return 1
    questions, problems = load_questions(args.questions)
    problems += check_corpus(questions, args.corpus)
    if problems:
        print("the question set does not check out; run `python -m bench.golden.check_questions`", file=sys.stderr)
        return 1
    rows = read_corpus(args.corpus)
    if args.dsn:
        results = asyncio.run(run(args.dsn, rows, questions))
    else:
        server, workdir, dsn = start_embedded()
        try:
            results = asyncio.run(run(dsn, rows, questions))
        finally:
            server.stop()
            shutil.rmtree(workdir, ignore_errors=True)
    report(questions, results, args.misses)
    return 0


if __name__ == "__main__":
    sys.exit(main())
