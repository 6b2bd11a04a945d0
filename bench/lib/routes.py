"""Each route's candidates for a golden set, computed offline on what the daemon stored: the
full-text route by the daemon's own `full_text` over its PostgreSQL, the vector route by exact
search over the stored chunk vectors (best chunk per page), the query vectors from the same local
model and template. What the fusion sweeps and the quality step fuse."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import numpy as np

from bench.lib.golden import Question, Run, stem
from bench.lib.stored import STORED_CHUNKS_SQL
from recalld.actors.embedding.template import render_query
from recalld.store.search import Filters, full_text

DEPTH = 100
"""Candidates per route fetched for offline fusion: more than the daemon's default caps
(fts_candidates, vector_candidates), so the sweep can try every depth up to this."""

Lists = dict[str, list[tuple[uuid.UUID, float]]]
"""Question id -> a route's candidates, best first, with their scores."""


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


async def text_lists(conn: asyncpg.Connection, namespace: str, questions: Sequence[Question]) -> Lists:
    """The full-text route's candidates (the daemon's own `full_text`), depth DEPTH, with scores."""
    lists = {}
    for q in questions:
        found = await full_text(conn, Filters(namespace), q.text, DEPTH)
        lists[q.id] = [(c.id, c.score) for c in found]
    return lists


async def strict_lists(conn: asyncpg.Connection, namespace: str, questions: Sequence[Question]) -> Lists:
    """The full-text route as recall runs it next to an answering vector route: the phrase and
    every-term steps only (`loose=False`; docs/RETRIEVAL.md), depth DEPTH."""
    lists: Lists = {}
    for q in questions:
        found = await full_text(conn, Filters(namespace), q.text, DEPTH, loose=False)
        lists[q.id] = [(c.id, c.score) for c in found]
    return lists
