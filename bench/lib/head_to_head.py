"""recalld against the raw parts it is made of: the local model called directly, the daemon's own
FAISS file and one PostgreSQL query, in sequence per query; one client's rounds, recalld then the
raw parts on a fresh slice of queries each, so that the machine's drift hits both sides alike."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import faiss
import numpy as np

from bench.lib.corpus import NAMESPACE
from bench.lib.daemon import embedded_dsn
from bench.lib.load import Load, socket_load
from bench.lib.report import percentile, progress
from bench.lib.stored import Stored, load_stored
from recalld.actors.embedding.template import render_query
from recalld.actors.index.settings import HNSW_EF_SEARCH
from recalld.actors.index.vectors import one_thread_per_search
from recalld.client import Client
from recalld.config import Config

WARMUP = 30
ROUNDS = 4
"""The two head-to-head comparisons run this many times, taking turns (this machine's speed
drifts by ±20% within minutes): the ratios quoted are the medians of the rounds' ratios."""
CPU_REQUESTS = 480
"""The loads that measure CPU per request at one client and on the vector route alone ask the
cached queries over until they have answered at least this many (the CPU clock counts in 10 ms
ticks, and the daemon's background work runs meanwhile)."""
TOP = Config().recall.vector_candidates
"""Candidates per route, as the daemon's defaults (fts_candidates, vector_candidates)."""


def current_index(work: Path, generation_id: str) -> faiss.Index:
    """The daemon's own current generation, read as a user would read a FAISS file."""
    found = sorted((work / "data/generations").glob(f"**/{generation_id}/index.faiss"))
    if not found:
        raise SystemExit(f"no index.faiss for generation {generation_id} under {work / 'data/generations'}")
    index = faiss.read_index(str(found[0]))
    # as the daemon does: the beam is at least as wide as the hits asked for
    faiss.ParameterSpace().set_index_parameter(index, "efSearch", max(HNSW_EF_SEARCH, TOP))
    return index


RAW_SQL = """
WITH text_hits AS (
    SELECT id FROM records, websearch_to_tsquery('english', $1) query
    WHERE namespace = $2 AND deleted_at IS NULL AND search @@ query
    ORDER BY ts_rank(search, query) DESC
    LIMIT $4
)
SELECT id, title, body, true AS text_hit FROM records JOIN text_hits USING (id)
UNION ALL
SELECT id, title, body, false FROM records
WHERE id = ANY($3::uuid[]) AND id NOT IN (SELECT id FROM text_hits) AND namespace = $2 AND deleted_at IS NULL
"""


@dataclass
class RawParts:
    """The parts recalld is made of, called directly: the local model, the daemon's FAISS file
    and one PostgreSQL query."""

    stored: Stored
    index: faiss.Index
    template_version: int
    model: Any = field(init=False)

    def __post_init__(self) -> None:
        from recalld.providers.local import LocalProvider

        # FAISS searches on one thread, as the daemon's do (`one_thread_per_search`): with its
        # default OpenMP team of two, the idle member spins after each search beside the model
        # run that follows (bench/NOTES.md, "The raw parts' FAISS on one thread").
        one_thread_per_search()
        self.model = LocalProvider()
        self.model.encode(["warm up"])


async def raw_parts(dsn: str, raw: RawParts, queries: Sequence[str]) -> tuple[Load, dict[str, list[float]], np.ndarray]:
    """The raw parts in sequence per query: embed, search the FAISS file, one PostgreSQL query
    (full text plus the rows of the vector hits). Also returns the query vectors for the other
    systems."""
    stored, index, model, template_version = raw.stored, raw.index, raw.model, raw.template_version
    record_of = dict(zip(stored.surrogates.tolist(), stored.record_ids, strict=True))
    parts: dict[str, list[float]]
    load, parts = Load("raw parts", 1), {"embed": [], "faiss": [], "postgresql": []}
    vectors = []
    conn = await asyncpg.connect(dsn)
    try:
        for query in queries:
            t0 = time.perf_counter()
            vector, _ = model.encode([render_query(query, version=template_version).text])
            t1 = time.perf_counter()
            _, ids = index.search(vector[:1], TOP)
            hits = [record_of[s] for s in ids[0].tolist() if s >= 0]
            t2 = time.perf_counter()
            rows = await conn.fetch(RAW_SQL, query, NAMESPACE, hits, TOP)
            t3 = time.perf_counter()
            if not rows:
                raise SystemExit(f"raw parts found nothing for {query!r}")
            vectors.append(vector[0])
            parts["embed"].append((t1 - t0) * 1000)
            parts["faiss"].append((t2 - t1) * 1000)
            parts["postgresql"].append((t3 - t2) * 1000)
            load.latency_ms.append((t3 - t0) * 1000)
    finally:
        await conn.close()
    load.wall_s = sum(load.latency_ms) / 1000
    return load, parts, np.stack(vectors)


def served_raw_parts(work: Path, socket: Path) -> tuple[dict[str, Any], dict[str, Any], RawParts]:
    """The daemon's current generation (`/v1/generations`) and embedding detail (`/readyz`), and
    the raw parts on what it serves: its stored vectors and its generation's FAISS file."""
    client = Client(socket, timeout=120)
    try:
        current = client.request("GET", "/v1/generations")["current"]
        embedding = client.request("GET", "/readyz")["checks"]["embedding"]["detail"]
    finally:
        client.close()
    stored = asyncio.run(load_stored(embedded_dsn(work / "data"), embedding["space_id"]))
    progress(f"raw parts: {len(stored.texts)} stored chunk vectors, generation {current['id']}")
    raw = RawParts(stored, current_index(work, current["id"]), int(embedding["space"]["template_version"]))
    return current, embedding, raw


@dataclass
class OneClient:
    """One client's never-asked queries, recalld's answers then the raw parts' on the same ones,
    round by round."""

    recalld: list[Load]
    raw: list[Load]
    parts: dict[str, list[float]]
    """Each raw part's times (`raw_parts`), every round's."""
    asked: list[str]
    vectors: np.ndarray
    """The raw parts' query vectors, in the order of `asked`."""

    def overheads_ms(self) -> list[float]:
        """Per round: recalld's p50 minus the raw parts' p50, in ms: what recalld adds to a query."""
        return [
            percentile(c.latency_ms, 50) - percentile(r.latency_ms, 50)
            for c, r in zip(self.recalld, self.raw, strict=True)
        ]

    def latency_ratios(self) -> list[float]:
        """Per round: recalld's p50 over the raw parts' p50 (each query's three parts summed)."""
        return [
            percentile(c.latency_ms, 50) / percentile(r.latency_ms, 50)
            for c, r in zip(self.recalld, self.raw, strict=True)
        ]


def one_client_rounds(socket: Path, dsn: str, raw: RawParts, queries: Sequence[str], rounds: int = ROUNDS) -> OneClient:
    """recalld over `socket`, then the raw parts, on a fresh slice of `queries` each round, so
    that the machine's drift hits both sides alike."""
    one = OneClient([], [], {}, [], np.empty((0, 0), dtype=np.float32))
    vectors = []
    for r in range(rounds):
        chunk = queries[r::rounds]
        progress(f"round {r + 1}/{rounds}: recalld, new queries, 1 client, then the raw parts: {len(chunk)} each")
        one.recalld.append(asyncio.run(socket_load(socket, chunk, 1, "recalld")))
        load, parts, round_vectors = asyncio.run(raw_parts(dsn, raw, chunk))
        one.raw.append(load)
        for part, values in parts.items():
            one.parts.setdefault(part, []).extend(values)
        one.asked += chunk
        vectors.append(round_vectors)
    one.vectors = np.concatenate(vectors)
    return one
